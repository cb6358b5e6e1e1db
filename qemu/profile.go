package qemu

import (
	"bufio"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"sort"
	"strings"
	"sync"
	"time"
)

// A Profile is a flat profile of the guest: how many samples of its program
// counter fell in each function. Under -icount the guest's clock stands
// still while QEMU's gdbstub holds it, so sampling does not change what the
// guest's counters measure; it only slows the transfer in host time.
type Profile struct {
	Samples int            // all samples, idle included
	Idle    int            // samples in the idle loop (WFI)
	Funcs   map[string]int // samples per function (idle excluded)
}

// Busy is the number of samples taken while the guest was not idle.
func (p Profile) Busy() int { return p.Samples - p.Idle }

// Stage names a part of the guest's work, from a function's name.
func Stage(fn string) string {
	type rule struct{ prefix, stage string }
	for _, r := range []rule{
		{"runtime.memmove", "copy (memmove)"},
		{"runtime.memclr", "clear (memclr)"},
		{"github.com/tamanic/tamanic/fec", "tamanic: ENET driver"},
		{"github.com/tamanic/tamanic/bounce", "tamanic: TX placement"},
		{"github.com/tamanic/tamanic/tso", "tamanic: TSO segmenter"},
		{"github.com/tamanic/tamanic/netstack", "tamanic: gVisor endpoint"},
		{"github.com/tamanic/tamanic/dma", "tamanic: DMA and cache maintenance"},
		{"github.com/tamanic/tamanic/internal/pkt", "tamanic: checksums"},
		{"github.com/tamanic/tamanic/internal/mmio", "tamanic: registers"},
		{"github.com/tamanic/tamanic/board", "tamanic: board (IRQ, idle)"},
		{"github.com/tamanic/tamanic/firmware", "firmware app (source, sink, HTTP)"},
		{"gvisor.dev/gvisor/pkg/tcpip/transport/tcp", "gVisor TCP"},
		{"gvisor.dev/gvisor/pkg/tcpip/network", "gVisor IP"},
		{"gvisor.dev/gvisor/pkg/tcpip/checksum", "gVisor checksum"},
		{"gvisor.dev/gvisor/pkg/tcpip/stack", "gVisor stack core"},
		{"gvisor.dev/gvisor/pkg/buffer", "gVisor buffers"},
		{"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet", "gVisor gonet"},
		{"gvisor.dev/gvisor", "gVisor other (sleep, sync, waiter)"},
		{"github.com/usbarmory/tamago", "TamaGo (SoC, IRQ)"},
		{"sync.", "Go sync"},
		{"time.", "Go timers"},
	} {
		if strings.HasPrefix(fn, r.prefix) {
			return r.stage
		}
	}
	if strings.HasPrefix(fn, "runtime.") || strings.HasPrefix(fn, "internal/runtime") {
		for _, k := range []string{"gc", "GC", "mark", "sweep", "scan", "malloc", "mspan", "mcache", "mcentral",
			"mheap", "heapBits", "greyobject", "findObject", "wbBuf", "Barrier", "newobject", "makeslice", "growslice", "spanOf", "typePointers"} {
			if strings.Contains(fn, k) {
				return "Go runtime: allocation and GC"
			}
		}
		return "Go runtime: scheduler, timers, other"
	}
	return "other"
}

// ByStage sums a profile's busy samples by Stage, largest first.
func (p Profile) ByStage() []Share {
	m := map[string]int{}
	for f, n := range p.Funcs {
		m[Stage(f)] += n
	}
	return shares(m, p.Busy())
}

// Top returns the n functions with the most busy samples.
func (p Profile) Top(n int) []Share {
	s := shares(p.Funcs, p.Busy())
	if len(s) > n {
		s = s[:n]
	}
	return s
}

// Share is one line of a profile.
type Share struct {
	Name     string
	Samples  int
	Fraction float64 // of busy samples
}

func shares(m map[string]int, total int) []Share {
	var s []Share
	for k, v := range m {
		f := 0.0
		if total > 0 {
			f = float64(v) / float64(total)
		}
		s = append(s, Share{k, v, f})
	}
	sort.Slice(s, func(i, j int) bool {
		if s[i].Samples != s[j].Samples {
			return s[i].Samples > s[j].Samples
		}
		return s[i].Name < s[j].Name
	})
	return s
}

// symtab maps addresses to function names from an ELF symbol table.
type symtab struct {
	addr []uint64
	name []string
	end  []uint64
}

func loadSymbols(path string) (*symtab, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("qemu: profile symbols: %w", err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		return nil, fmt.Errorf("qemu: profile symbols of %s: %w", path, err)
	}
	sort.Slice(syms, func(i, j int) bool { return syms[i].Value < syms[j].Value })
	t := &symtab{}
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) != elf.STT_FUNC || s.Value == 0 {
			continue
		}
		t.addr = append(t.addr, s.Value)
		t.name = append(t.name, s.Name)
		t.end = append(t.end, s.Value+s.Size)
	}
	if len(t.addr) == 0 {
		return nil, fmt.Errorf("qemu: %s has no function symbols", path)
	}
	return t, nil
}

func (t *symtab) lookup(pc uint64) string {
	i := sort.Search(len(t.addr), func(i int) bool { return t.addr[i] > pc }) - 1
	if i < 0 || pc >= t.end[i] {
		return fmt.Sprintf("?%#x", pc)
	}
	return t.name[i]
}

// gdb is a minimal client of QEMU's gdbstub (the GDB remote serial
// protocol): enough to stop the guest, read its registers and continue.
type gdb struct {
	c net.Conn
	r *bufio.Reader
}

func dialGDB(port int) (*gdb, error) {
	c, err := dial(port, 10*time.Second)
	if err != nil {
		return nil, fmt.Errorf("qemu: gdbstub: %w", err)
	}
	g := &gdb{c: c, r: bufio.NewReader(c)}
	if _, err := g.call("QStartNoAckMode"); err != nil {
		c.Close()
		return nil, err
	}
	// QEMU stops the guest when a debugger connects.
	if err := g.send("c"); err != nil {
		c.Close()
		return nil, err
	}
	return g, nil
}

func (g *gdb) send(cmd string) error {
	var sum byte
	for i := 0; i < len(cmd); i++ {
		sum += cmd[i]
	}
	g.c.SetDeadline(time.Now().Add(10 * time.Second))
	_, err := fmt.Fprintf(g.c, "$%s#%02x", cmd, sum)
	return err
}

// reply reads one packet, skipping acknowledgements.
func (g *gdb) reply() (string, error) {
	g.c.SetDeadline(time.Now().Add(10 * time.Second))
	for {
		b, err := g.r.ReadByte()
		if err != nil {
			return "", fmt.Errorf("qemu: gdbstub: %w", err)
		}
		if b != '$' {
			continue // '+' acknowledgements before no-ack mode
		}
		s, err := g.r.ReadString('#')
		if err != nil {
			return "", fmt.Errorf("qemu: gdbstub: %w", err)
		}
		if _, err := g.r.Discard(2); err != nil {
			return "", fmt.Errorf("qemu: gdbstub: %w", err)
		}
		return strings.TrimSuffix(s, "#"), nil
	}
}

// stopped reads replies up to the stop reply (T or S packet) that an
// interrupt produces; anything before it is a late reply to an earlier
// command.
func (g *gdb) stopped() error {
	for {
		r, err := g.reply()
		if err != nil {
			return err
		}
		if strings.HasPrefix(r, "T") || strings.HasPrefix(r, "S") {
			return nil
		}
	}
}

func (g *gdb) call(cmd string) (string, error) {
	if err := g.send(cmd); err != nil {
		return "", fmt.Errorf("qemu: gdbstub %s: %w", cmd, err)
	}
	return g.reply()
}

// sample stops the guest, reads its program counter and lets it go on.
func (g *gdb) sample() (uint64, error) {
	g.c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := g.c.Write([]byte{0x03}); err != nil {
		return 0, fmt.Errorf("qemu: gdbstub interrupt: %w", err)
	}
	if err := g.stopped(); err != nil {
		return 0, err
	}
	regs, err := g.call("g")
	if err != nil {
		return 0, err
	}
	// r0..r15, 32 bits each in target (little-endian) byte order.
	if len(regs) < 16*8 {
		return 0, fmt.Errorf("qemu: gdbstub: short register reply %q", regs)
	}
	b, err := hex.DecodeString(regs[15*8 : 16*8])
	if err != nil {
		return 0, fmt.Errorf("qemu: gdbstub: %w", err)
	}
	pc := uint64(binary.LittleEndian.Uint32(b))
	return pc, g.send("c")
}

// detach stops the running guest and detaches, which lets it run on.
func (g *gdb) detach() error {
	g.c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := g.c.Write([]byte{0x03}); err != nil {
		return fmt.Errorf("qemu: gdbstub interrupt: %w", err)
	}
	if err := g.stopped(); err != nil {
		return err
	}
	if r, err := g.call("D"); err != nil || r != "OK" {
		return fmt.Errorf("qemu: gdbstub detach: %q %v", r, err)
	}
	return nil
}

// Profiler samples a machine booted with Options.GDB.
type Profiler struct {
	g     *gdb
	syms  *symtab
	idle  string
	every time.Duration
	stop  chan struct{}
	done  chan struct{}
	mu    sync.Mutex
	p     Profile
	err   error
}

// StartProfile samples the guest's program counter every interval until
// Stop. Samples in the function named idle count as idle.
func (m *Machine) StartProfile(elfPath, idle string, interval time.Duration) (*Profiler, error) {
	if m.GDBPort == 0 {
		return nil, errors.New("qemu: machine was booted without Options.GDB")
	}
	syms, err := loadSymbols(elfPath)
	if err != nil {
		return nil, err
	}
	g, err := dialGDB(m.GDBPort)
	if err != nil {
		return nil, err
	}
	pr := &Profiler{g: g, syms: syms, idle: idle, every: interval, stop: make(chan struct{}), done: make(chan struct{}),
		p: Profile{Funcs: map[string]int{}}}
	go pr.run()
	return pr, nil
}

func (pr *Profiler) run() {
	defer close(pr.done)
	t := time.NewTicker(pr.every)
	defer t.Stop()
	for {
		select {
		case <-pr.stop:
			return
		case <-t.C:
		}
		pc, err := pr.g.sample()
		pr.mu.Lock()
		if err != nil {
			pr.err = err
			pr.mu.Unlock()
			return
		}
		fn := pr.syms.lookup(pc)
		pr.p.Samples++
		if fn == pr.idle {
			pr.p.Idle++
		} else {
			pr.p.Funcs[fn]++
		}
		pr.mu.Unlock()
	}
}

// Snapshot returns the profile so far.
func (pr *Profiler) Snapshot() Profile {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	p := pr.p
	p.Funcs = make(map[string]int, len(pr.p.Funcs))
	for k, v := range pr.p.Funcs {
		p.Funcs[k] = v
	}
	return p
}

// Stop ends sampling, detaches (the guest runs on) and returns the profile.
func (pr *Profiler) Stop() (Profile, error) {
	close(pr.stop)
	<-pr.done
	err := pr.err
	if err == nil {
		err = pr.g.detach()
	}
	pr.g.c.Close()
	return pr.Snapshot(), err
}
