package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/tamanic/tamanic/qemu"
)

// idleFunc holds the WFI instruction the guest idles in.
const idleFunc = "github.com/usbarmory/tamago/arm.wfi"

// ProfileRun is a sampled transfer: where the guest's busy instructions
// went, by stage and by function.
type ProfileRun struct {
	Run
	Samples, Idle int
	Stages        []qemu.Share
	Top           []qemu.Share
}

// profile boots the firmware with -icount and QEMU's gdbstub and samples
// the guest's program counter over one transfer per configuration.
func profile(ctx context.Context, elf string, size int64, every time.Duration) ([]ProfileRun, error) {
	m, err := qemu.Boot(ctx, qemu.Options{ELF: elf, Board: board, Icount: true, GDB: true})
	if err != nil {
		return nil, err
	}
	defer m.Stop()
	if err := m.SetSinkHash(false); err != nil {
		return nil, err
	}
	fmt.Printf("# profile boot: %s\n# %s\n", m.Ready, m.CommandLine())
	var out []ProfileRun
	for _, c := range []key{{"tx", "bounce", 512}, {"tx", "sg", 512}, {"tx", "tso", 512}, {"rx", "tso", 512}, {"rx", "tso", -1}} {
		if err := m.SetMode(c.mode, c.cb); err != nil {
			return nil, err
		}
		pr, err := m.StartProfile(elf, idleFunc, every)
		if err != nil {
			return nil, err
		}
		r, terr := transfer(m, "icount+gdb", c.dir, c.mode, c.cb, 0, size)
		p, perr := pr.Stop()
		if terr != nil {
			return nil, fmt.Errorf("profile %s %s: %w\n%s", c.dir, c.mode, terr, m.Console())
		}
		if perr != nil {
			return nil, perr
		}
		out = append(out, ProfileRun{Run: r, Samples: p.Samples, Idle: p.Idle, Stages: p.ByStage(), Top: p.Top(12)})
	}
	return out, nil
}

func dirName(d string) string {
	if d == "rx" {
		return "host→guest"
	}
	return "guest→host"
}

// printProfiles writes each profile as Markdown: stages and functions with
// their share of the busy samples. Samples are taken in host time, so
// instructions QEMU emulates slowly (generic-timer reads, device
// registers) weigh more than their count; the shares rank stages, the
// icount figures measure them.
func printProfiles(w io.Writer, ps []ProfileRun) {
	fmt.Fprintln(w, "\nShares are of samples taken in host time while the guest was busy; instructions QEMU emulates slowly (generic-timer counter reads, device registers) are over-represented.")
	for _, p := range ps {
		fmt.Fprintf(w, "\n#### %s, %s, copybreak %d: %.2f M busy instructions/MiB, %d samples (%d idle)\n\n",
			dirName(p.Dir), p.Mode, p.Copybreak, p.BusyPerMiB/1e6, p.Samples, p.Idle)
		fmt.Fprintln(w, "| stage | share of busy samples |")
		fmt.Fprintln(w, "|---|---|")
		for _, s := range p.Stages {
			fmt.Fprintf(w, "| %s | %.1f%% |\n", s.Name, 100*s.Fraction)
		}
		fmt.Fprintln(w, "\nTop functions:")
		for _, s := range p.Top {
			fmt.Fprintf(w, "- %.1f%% `%s`\n", 100*s.Fraction, s.Name)
		}
	}
}
