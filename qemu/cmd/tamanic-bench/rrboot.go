package main

// The request/response boots: which firmware, board and interfaces, and
// the QEMU options of each (rr.go runs the transactions on them).

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/tamanic/tamanic/qemu"
)

// runRROnly builds the firmware, runs rrAll and writes rr.md and rr.json
// in out, appending the tables to the report.md beside them if there is
// one.
func runRROnly(ctx context.Context, root, out string, dur time.Duration, baseline bool, command string) error {
	prog.note("building the firmware")
	elf, err := qemu.Build(ctx, root, out, board)
	if err != nil {
		return err
	}
	rs, err := rrAll(ctx, root, out, elf, baseline)
	if werr := writeRR(out, rs, command); err == nil {
		err = werr
	}
	return err
}

// rrAll boots elf plain and under icount (sleep=on) and runs the
// request/response rows on each, the copybreak sweep on the mx6ullevk's
// icount boot; on the mx6ullevk, the rows of the firmware without GRO and
// the ACK filter (rrNoMerge) and with baseline the baseline firmware's
// too. On the i.MX7D each boot runs the rows on ENET1 and on the 82574L
// (rrMachine).
func rrAll(ctx context.Context, root, out, elf string, baseline bool) ([]RRRun, error) {
	var all []RRRun
	for _, boot := range []string{"plain", "icount"} {
		rs, err := rrMachine(ctx, elf, "tamanic", boot)
		all = append(all, rs...)
		if err != nil {
			return all, err
		}
	}
	if rrNoMerge && board == "mx6ullevk" {
		// The same firmware built without GRO and the ACK filter
		// (make firmware GRO=off ACKFILTER=off): what each costs or saves
		// a small message, in the same run.
		dir := filepath.Join(out, "rr-nomerge")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return all, err
		}
		prog.note("building the firmware without GRO and the ACK filter")
		nelf, err := qemu.Build(ctx, root, dir, board, noMergeFlags...)
		if err != nil {
			return all, err
		}
		for _, boot := range []string{"plain", "icount"} {
			rs, err := rrMachine(ctx, nelf, rrFirmwareNoMerge, boot)
			all = append(all, rs...)
			if err != nil {
				return all, err
			}
		}
	}
	if baseline && board == "mx6ullevk" {
		belf, err := buildBaseline(ctx, root, out, board)
		if err != nil {
			return all, err
		}
		for _, boot := range []string{"plain", "icount"} {
			rs, err := rrMachine(ctx, belf, "baseline", boot)
			all = append(all, rs...)
			if err != nil {
				return all, err
			}
		}
	}
	return all, nil
}

// rrFirmwareNoMerge names the rows of the firmware built without GRO and
// the ACK filter; noMergeFlags are its linker settings (what make firmware
// GRO=off ACKFILTER=off links) and noMergeLine the console line that
// proves them.
const (
	rrFirmwareNoMerge = "tamanic, GRO and ACK filter off"
	noMergeLine       = "RXMERGE gro=off ackfilter=off"
)

var noMergeFlags = []string{
	"github.com/tamanic/tamanic/firmware/internal/fwmain.GRO=off",
	"github.com/tamanic/tamanic/firmware/internal/fwmain.AckFilter=off",
}

// rrNoMerge adds the rows of the firmware without GRO and the ACK filter
// (-rr-nomerge; mx6ullevk only).
var rrNoMerge = true

// rrMachine boots elf and runs rrBoot on each of its interfaces that
// rrInterfaces lists (the sweep on tamanic's icount boot of the
// mx6ullevk).
func rrMachine(ctx context.Context, elf, firmware, boot string) ([]RRRun, error) {
	prog.note(fmt.Sprintf("booting %s %s", firmware, boot))
	ifs := rrInterfaces(board)
	m, err := qemu.Boot(ctx, rrOptions(elf, board, boot, ifs))
	if err != nil {
		return nil, fmt.Errorf("%s %s boot: %w", firmware, boot, err)
	}
	defer m.Stop()
	fmt.Printf("# %s %s boot: %s\n# %s\n", firmware, boot, m.Ready, m.CommandLine())
	mode := "tso"
	if firmware == "baseline" {
		mode = BaselineMode
	}
	if firmware == rrFirmwareNoMerge && !strings.Contains(m.Console(), noMergeLine) {
		return nil, fmt.Errorf("%s %s: no %q on the console: the build did not take the switches\n%s", firmware, boot, noMergeLine, m.Console())
	}
	var all []RRRun
	for _, nic := range ifs {
		ports, cb := &m.Ports, 512
		if nic == "e1000e" {
			// The 82574L's /mode ignores the copybreak and its /stats
			// reports 0 (cxnic.HWTSOMode); its address must have come
			// (by DHCP, from its user network's server) before READY.
			if m.E1000E == nil {
				return all, fmt.Errorf("%s %s: booted without the 82574L", firmware, boot)
			}
			if _, err := qemu.E1000EAddr(m.Console(), qemu.E1000EGuest+"/24"); err != nil {
				return all, fmt.Errorf("%s %s: %w\n%s", firmware, boot, err, m.Console())
			}
			ports, cb = m.E1000E, 0
		}
		sweep := firmware == "tamanic" && boot == "icount" && board == "mx6ullevk"
		rs, err := rrBoot(ports, RRRun{Firmware: firmware, Boot: boot, Board: board, NIC: nic}, mode, cb, rrTime, sweep)
		all = append(all, rs...)
		if err != nil {
			return all, fmt.Errorf("%s %s %s: %w\n%s", firmware, qemu.NICLabel(board, nic), boot, err, m.Console())
		}
	}
	return all, nil
}

// rrInterfaces lists the interfaces of board that the request/response
// rows run on, as RRRun.NIC names them: the ENET the firmware serves on,
// and on the i.MX7D the 82574L too.
func rrInterfaces(board string) []string {
	if board == "mcimx7d" {
		return []string{"enet", "e1000e"}
	}
	return []string{"enet"}
}

// rrOptions are the boot options of a request/response boot of elf on
// board: the 82574L on its own user network when ifs has it, and under
// icount, sleep=on.
func rrOptions(elf, board, boot string, ifs []string) qemu.Options {
	o := qemu.Options{ELF: elf, Board: board}
	for _, nic := range ifs {
		o.E1000E = o.E1000E || nic == "e1000e"
	}
	if boot == "icount" {
		// sleep=on, not the bulk boots' sleep=off: with sleep=off the
		// guest's clock jumps to its next timer whenever it waits for
		// the host, which request/response does after every answer, so
		// the guest's timers (TCP's retransmission, the echo's idle
		// deadline, the PHY watch) fire hundreds of times faster than
		// in real time, add their work to each transaction and close
		// the TCP echo's connection as idle within a second of wall
		// time. With sleep=on an idle guest's clock follows the host's,
		// and a running guest's still counts one nanosecond per
		// instruction.
		o.Args = []string{"-icount", "shift=0,sleep=on"}
	}
	return o
}

// rrProfile boots the firmware under icount (sleep=on) with QEMU's
// gdbstub and samples the guest's program counter every millisecond over
// a TCP_RR and a UDP_RR run of 64 bytes (-rr-profile): where a
// transaction's busy instructions go.
func rrProfile(ctx context.Context, root, out string, dur time.Duration) error {
	elf, err := qemu.Build(ctx, root, out, board)
	if err != nil {
		return err
	}
	m, err := qemu.Boot(ctx, qemu.Options{ELF: elf, Board: board, GDB: true, Args: []string{"-icount", "shift=0,sleep=on"}})
	if err != nil {
		return err
	}
	defer m.Stop()
	fmt.Printf("# profile boot: %s\n# %s\n", m.Ready, m.CommandLine())
	if err := m.SetMode("tso", 512); err != nil {
		return fmt.Errorf("profile boot: POST /mode: %w", err)
	}
	for _, proto := range []string{"tcp", "udp"} {
		pr, err := m.StartProfile(elf, idleFunc, time.Millisecond)
		if err != nil {
			return err
		}
		r, rerr := rrRun(&m.Ports, RRRun{Firmware: "tamanic", Boot: "icount+gdb", Board: board, NIC: "enet", Proto: proto, Size: 64, Mode: "tso", Copybreak: 512}, dur)
		p, perr := pr.Stop()
		if rerr != nil {
			return rerr
		}
		if perr != nil {
			return perr
		}
		fmt.Printf("\n#### %s_RR 64 B: %.0f busy instructions/transaction, %d samples (%d idle)\n\n", strings.ToUpper(proto), r.BusyPerTxn, p.Samples, p.Idle)
		for _, s := range p.ByStage() {
			fmt.Printf("- stage %s: %.1f%%\n", s.Name, 100*s.Fraction)
		}
		for _, s := range p.Top(20) {
			fmt.Printf("- %.1f%% `%s`\n", 100*s.Fraction, s.Name)
		}
	}
	return nil
}
