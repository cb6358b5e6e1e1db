package connectx_test

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tamanic/tamanic/connectx"
	"github.com/tamanic/tamanic/connectx/connectxtest"
	"github.com/tamanic/tamanic/dma"
	"github.com/tamanic/tamanic/dma/dmatest"
	"github.com/tamanic/tamanic/internal/mmio"
)

// counting wraps DMA memory and counts live allocations; onUnmap, when
// set, is called before each Unmap.
type counting struct {
	*dmatest.Memory
	mu      sync.Mutex
	live    map[dma.Addr]int
	onUnmap func()
}

func (c *counting) Unmap(b *dma.Buffer, dir dma.Dir) error {
	if c.onUnmap != nil {
		c.onUnmap()
	}
	return c.Memory.Unmap(b, dir)
}

func (c *counting) Alloc(size, align int, attr dma.Attr) (dma.Buffer, error) {
	b, err := c.Memory.Alloc(size, align, attr)
	if err == nil {
		c.mu.Lock()
		c.live[b.Addr()] = size
		c.mu.Unlock()
	}
	return b, err
}

func (c *counting) Free(b dma.Buffer) error {
	c.mu.Lock()
	delete(c.live, b.Addr())
	c.mu.Unlock()
	return c.Memory.Free(b)
}

func (c *counting) Live() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.live)
}

// open runs connectx.Open on a fresh model with faults f.
func open(t *testing.T, mo func(*connectxtest.Options), f connectxtest.Faults, cfg func(*connectx.Config)) (*connectx.NIC, error, *connectxtest.Model, *counting) {
	t.Helper()
	mem := &counting{Memory: dmatest.New(t, dmatest.Options{CoherentSize: 4 << 20}), live: map[dma.Addr]int{}}
	o := connectxtest.Options{Mem: mem.Memory}
	if mo != nil {
		mo(&o)
	}
	m := connectxtest.New(o)
	m.SetFaults(f)
	c := connectx.Config{ConfigSpace: m.ConfigSpace(), BAR0: m, Mem: mem, FirmwareTimeout: 500 * time.Millisecond,
		CmdTimeout: 20 * time.Millisecond, BringUpCmdTimeout: 20 * time.Millisecond}
	if cfg != nil {
		cfg(&c)
	}
	n, err := connectx.Open(c)
	return n, err, m, mem
}

// clean checks that a failed bring-up left nothing behind: no memory, no
// pages, no objects, HCA disabled, bus mastering off.
func clean(t *testing.T, m *connectxtest.Model, mem *counting) {
	t.Helper()
	if l := mem.Live(); l != 0 {
		t.Errorf("%d DMA allocations left", l)
	}
	if st := m.State(); st.Enabled || st.Pages != 0 || st.Objects != 0 || st.BusMaster {
		t.Errorf("function left %+v", st)
	}
	for _, v := range m.Violations() {
		t.Errorf("model: %s", v)
	}
}

func TestFirmwareNeverReady(t *testing.T) {
	n, err, m, mem := open(t, nil, connectxtest.Faults{NeverReady: true}, nil)
	if n != nil || !errors.Is(err, connectx.ErrTimeout) || !strings.Contains(err.Error(), "initializing") {
		t.Fatalf("Open: %v", err)
	}
	clean(t, m, mem)
}

func TestCommandTimeout(t *testing.T) {
	for _, after := range []int{1, 5, 12, 25} {
		n, err, m, mem := open(t, nil, connectxtest.Faults{StallAfter: after}, nil)
		if n != nil || !errors.Is(err, connectx.ErrTimeout) {
			t.Fatalf("stall after %d: Open: %v", after, err)
		}
		// The card stopped answering: teardown could run no command, so
		// it cleared Bus Master Enable before freeing memory. The
		// function's objects stay, but the card can no longer reach memory.
		if l := mem.Live(); l != 0 {
			t.Errorf("stall after %d: %d DMA allocations left", after, l)
		}
		if st := m.State(); st.BusMaster {
			t.Errorf("stall after %d: bus master still on", after)
		}
		for _, v := range m.Violations() {
			t.Errorf("model: %s", v)
		}
	}
}

func TestPageRequestRefused(t *testing.T) {
	n, err, m, mem := open(t, func(o *connectxtest.Options) { o.InitPages = 64 }, connectxtest.Faults{},
		func(c *connectx.Config) { c.MaxPages = 32 })
	if n != nil || !errors.Is(err, connectx.ErrNoPages) {
		t.Fatalf("Open: %v", err)
	}
	clean(t, m, mem)
}

// Every command of the bring-up failing in turn leaves nothing behind, and
// the error names the command with its status and syndrome.
func TestEachCommandFailing(t *testing.T) {
	ops := []uint16{connectx.OpEnableHCA, connectx.OpQueryISSI, connectx.OpSetISSI, connectx.OpQueryPages, connectx.OpManagePages,
		connectx.OpQueryHCACap, connectx.OpInitHCA, connectx.OpAccessRegister, connectx.OpModifyNICVportCtx, connectx.OpQueryNICVportContext,
		connectx.OpAllocUAR, connectx.OpCreateEQ, connectx.OpAllocPD, connectx.OpAllocTransportDomain,
		connectx.OpQuerySpecialContexts, connectx.OpCreateCQ, connectx.OpCreateTIS, connectx.OpCreateSQ, connectx.OpModifySQ,
		connectx.OpCreateRQ, connectx.OpModifyRQ, connectx.OpCreateTIR, connectx.OpCreateFlowTable,
		connectx.OpCreateFlowGroup, connectx.OpSetFlowTableEntry, connectx.OpSetFlowTableRoot, connectx.OpQueryVportState}
	for _, op := range ops {
		n, err, m, mem := open(t, nil, connectxtest.Faults{FailOp: op, FailStatus: 0x03}, nil)
		var ce *connectx.CmdError
		if n != nil || !errors.As(err, &ce) || ce.Op != op || ce.Status != connectx.StatBadParam || ce.Syndrome != 0xBAD {
			if op == connectx.OpQueryISSI && n != nil {
				n.Close()
			}
			t.Errorf("op %#x: Open: %v", op, err)
			continue
		}
		clean(t, m, mem)
	}
}

func TestNotConnectX(t *testing.T) {
	mem := dmatest.New(t, dmatest.Options{})
	m := connectxtest.New(connectxtest.Options{Mem: mem, DeviceID: 0x1003})
	if _, err := connectx.Open(connectx.Config{ConfigSpace: m.ConfigSpace(), BAR0: m, Mem: mem}); !errors.Is(err, connectx.ErrNotConnectX) {
		t.Fatalf("ConnectX-3 accepted: %v", err)
	}
	if _, err := connectx.Open(connectx.Config{}); err == nil {
		t.Fatal("empty config accepted")
	}
	if _, err := connectx.Open(connectx.Config{ConfigSpace: m.ConfigSpace(), BAR0: m, Mem: mem, TxRing: 100}); err == nil {
		t.Fatal("ring of 100 accepted")
	}
	// The frame lands RxAlign bytes in: 2048-byte buffers hold a vport
	// MTU of 2046 bytes (IP MTU 2024), not 2047.
	m = connectxtest.New(connectxtest.Options{Mem: mem})
	if _, err := connectx.Open(connectx.Config{ConfigSpace: m.ConfigSpace(), BAR0: m, Mem: mem, RxBufSize: 2048, MTU: 2025}); err == nil {
		t.Fatal("a 2048-byte receive buffer accepted for a 2047-byte vport MTU")
	}
}

// revRegs reports another command interface revision.
type revRegs struct{ mmio.Regs }

func (r revRegs) Read32(off uint32) uint32 {
	if off == connectx.InitCmdIfRev {
		return 0x0400_0000 // 4<<16, big-endian on a little-endian load
	}
	return r.Regs.Read32(off)
}

func TestCmdIfRev(t *testing.T) {
	n, err, m, mem := open(t, nil, connectxtest.Faults{}, func(c *connectx.Config) { c.BAR0 = revRegs{c.BAR0} })
	if n != nil || !errors.Is(err, connectx.ErrCmdIfRev) {
		t.Fatalf("Open: %v", err)
	}
	clean(t, m, mem)
}

// A driver that forgets the big-endian swap of registers never gets past
// the init segment: the model reads its command queue address as garbage.
func TestOpenCloseTwice(t *testing.T) {
	n, err, m, mem := open(t, nil, connectxtest.Faults{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	clean(t, m, mem)
	if err := n.Transmit([][]byte{make([]byte, 60)}, false, nil); !errors.Is(err, connectx.ErrClosed) {
		t.Fatalf("transmit after close: %v", err)
	}
}

// A ConnectX-4 on firmware 14.12.1220 asked for 6 boot and 12,868 init pages
// (about 50 MiB; Snabb's mlx5_core trace). The driver gives them in
// MANAGE_PAGES commands of at most 16 mailboxes each and takes every one
// back at Close.
func TestRealisticPageCount(t *testing.T) {
	if testing.Short() {
		t.Skip("50 MiB of pages")
	}
	mem := dmatest.New(t, dmatest.Options{CoherentSize: 4 << 20, CachedSize: 56 << 20, NoTrace: true})
	r := connectxtest.NewRig(t, connectxtest.RigOptions{Mem: mem, Model: func(o *connectxtest.Options) {
		o.BootPages, o.InitPages = 6, 12868
	}})
	if st := r.Model.State(); st.Pages != 12874 {
		t.Fatalf("%d pages held", st.Pages)
	}
	if s := r.NIC.Stats(); s.PagesGiven != 12874 {
		t.Fatalf("stats %+v", s)
	}
}

// sizedBAR is a BAR0 mapping that reports its length, as pcie.Window does.
type sizedBAR struct {
	*connectxtest.Model
	size uint32
}

func (b sizedBAR) Size() uint32 { return b.size }

// TestUAROutsideMapping: a UAR page beyond the part of BAR0 the driver can
// reach (the model hands out page 1, at 0x1000..0x2000) fails bring-up
// with ErrUARUnmapped and leaves nothing behind, whether the mapping's
// length is configured or reported by the BAR (pcie.Window drops stores
// beyond it: the card would never be rung). A mapping holding the page
// brings the card up.
func TestUAROutsideMapping(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  func(*connectx.Config)
		ok   bool
	}{
		{"Config.BAR0Size", func(c *connectx.Config) { c.BAR0Size = 0x1000 }, false},
		{"BAR0.Size", func(c *connectx.Config) { c.BAR0 = sizedBAR{c.BAR0.(*connectxtest.Model), 0x1800} }, false},
		{"holds the page", func(c *connectx.Config) { c.BAR0 = sizedBAR{c.BAR0.(*connectxtest.Model), 0x2000} }, true},
	} {
		n, err, m, mem := open(t, nil, connectxtest.Faults{}, c.cfg)
		if c.ok {
			if err != nil {
				t.Fatalf("%s: Open: %v", c.name, err)
			}
			if err := n.Close(); err != nil {
				t.Fatalf("%s: Close: %v", c.name, err)
			}
			clean(t, m, mem)
			continue
		}
		if n != nil || !errors.Is(err, connectx.ErrUARUnmapped) || !strings.Contains(err.Error(), "UAR 1 at BAR0 0x1000..0x2000") {
			t.Fatalf("%s: Open: %v", c.name, err)
		}
		clean(t, m, mem)
	}
}

// TestPagesBeyondDMARegion: a card asking for more firmware pages than the
// DMA region holds (a ConnectX-4's 12,868 init pages, about 50 MiB, from a
// 4 MiB region here; the i.MX7D firmware's region is 32 MiB) fails
// bring-up with an error naming the page that could not be allocated,
// promptly (no wait on the card), and leaves nothing behind. This is what
// the co-simulation shows with tamanic-cxsim -init-pages 12868.
func TestPagesBeyondDMARegion(t *testing.T) {
	mem := &counting{Memory: dmatest.New(t, dmatest.Options{CoherentSize: 1 << 20, CachedSize: 4 << 20, NoTrace: true}), live: map[dma.Addr]int{}}
	m := connectxtest.New(connectxtest.Options{Mem: mem.Memory, BootPages: 6, InitPages: 12868})
	n, err := connectx.Open(connectx.Config{ConfigSpace: m.ConfigSpace(), BAR0: m, Mem: mem,
		FirmwareTimeout: 500 * time.Millisecond, CmdTimeout: 20 * time.Millisecond, BringUpCmdTimeout: 20 * time.Millisecond})
	if n != nil || err == nil || !strings.Contains(err.Error(), "init pages (stage 2): connectx: firmware page 1019 of 12868 wanted: DMA memory:") || errors.Is(err, connectx.ErrTimeout) {
		t.Fatalf("Open: %v", err)
	}
	t.Logf("Open: %v", err)
	clean(t, m, mem)
}

// TestPortAdminStatus: bring-up sets the port's admin status UP (PAOS, as
// Linux's mlx5e_open does) and only then does the card report the port up
// and take frames; Close sets it DOWN again (mlx5e_close).
func TestPortAdminStatus(t *testing.T) {
	n, err, m, _ := open(t, nil, connectxtest.Faults{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !m.State().AdminUp || !n.Link() {
		t.Fatalf("after Open: admin up %v, link %v", m.State().AdminUp, n.Link())
	}
	if !m.Deliver(udp4(make([]byte, 100), true)) {
		t.Fatalf("a frame after Open not taken: %+v", m.Stats())
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if m.State().AdminUp {
		t.Fatal("admin status still up after Close")
	}
	for _, v := range m.Violations() {
		t.Errorf("model: %s", v)
	}
}
