package pcie_test

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tamanic/tamanic/dma"
	"github.com/tamanic/tamanic/dma/dmatest"
	"github.com/tamanic/tamanic/pcie"
	"github.com/tamanic/tamanic/pcie/pcietest"
)

// regFile is a BAR handler: a sparse register file that logs accesses.
type regFile struct {
	regs  map[uint32]uint32
	reads []uint32
}

func newRegFile() *regFile { return &regFile{regs: map[uint32]uint32{}} }

func (r *regFile) Read32(off uint32) uint32 { r.reads = append(r.reads, off); return r.regs[off] }
func (r *regFile) Write32(off, v uint32)    { r.regs[off] = v }

type rig struct {
	t   *testing.T
	h   *pcietest.Host
	rc  *pcie.RC
	mem *dmatest.Memory
}

func newRig(t *testing.T, opts pcietest.Options, mod func(*pcie.Config)) *rig {
	t.Helper()
	if opts.Mem == nil {
		opts.Mem = dmatest.New(t, dmatest.Options{CachedSize: 1 << 20, CoherentSize: 64 << 10})
	}
	h := pcietest.New(opts)
	cfg := h.Config()
	if mod != nil {
		mod(&cfg)
	}
	rc, err := pcie.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{t: t, h: h, rc: rc, mem: opts.Mem}
	t.Cleanup(func() {
		for _, v := range h.Take() {
			t.Errorf("model violation: %s", v)
		}
	})
	return r
}

// e1000e is the endpoint QEMU puts behind the i.MX7D root port: Intel
// 82574L, 8086:10d3, BAR0 128 KiB memory, BAR1 128 KiB flash, BAR2 32 bytes
// I/O, BAR3 16 KiB MSI-X, PCIe, MSI, MSI-X capabilities.
func e1000e() (*pcietest.Function, *regFile) {
	f := pcietest.NewEndpoint(0x8086, 0x10D3, 0x020000)
	r := newRegFile()
	r.regs[0x8] = 0x0008_0283 // STATUS as QEMU reports it
	f.SetBAR(0, 128<<10, pcietest.Mem32, r)
	f.SetBAR(1, 128<<10, pcietest.Mem32, newRegFile())
	f.SetBAR(2, 32, pcietest.IO, nil)
	f.SetBAR(3, 16<<10, pcietest.Mem32, newRegFile())
	f.SetPin(1)
	f.AddPCIe(pcie.TypeEndpoint, 1, 1)
	f.AddMSI(true)
	f.AddMSIX(5, 3, 0, 3, 0x2000)
	return f, r
}

func socs() []pcie.SoC { return []pcie.SoC{pcie.IMX6Q, pcie.IMX6SX, pcie.IMX7D} }

func TestBringUpGen1ThenGen2OnEverySoC(t *testing.T) {
	for _, soc := range socs() {
		t.Run(soc.Name, func(t *testing.T) {
			r := newRig(t, pcietest.Options{SoC: soc}, nil)
			if err := r.rc.Start(); err != nil {
				t.Fatal(err)
			}
			if !r.rc.LinkUp() || !r.h.LinkUp() {
				t.Fatal("link not up")
			}
			// The model trains at whatever the root port's Link
			// Capabilities allow when the LTSSM starts: Gen1 proves
			// the cap was written (DBI_RO_WR_EN) before training.
			if got := r.h.FirstGen(); got != 1 {
				t.Errorf("first trained at Gen%d, want Gen1", got)
			}
			if gen, w := r.rc.Link(); gen != 2 || w != 1 || r.h.Gen() != 2 {
				t.Errorf("link Gen%d x%d (model Gen%d), want Gen2 x1", gen, w, r.h.Gen())
			}
		})
	}
}

func TestMaxGen1StaysGen1(t *testing.T) {
	r := newRig(t, pcietest.Options{SoC: pcie.IMX6Q}, func(c *pcie.Config) { c.MaxGen = 1 })
	if err := r.rc.Start(); err != nil {
		t.Fatal(err)
	}
	if gen, _ := r.rc.Link(); gen != 1 {
		t.Fatalf("Gen%d", gen)
	}
}

func TestPartnerGen1(t *testing.T) {
	r := newRig(t, pcietest.Options{SoC: pcie.IMX7D, PartnerGen: 1}, nil)
	if err := r.rc.Start(); err != nil {
		t.Fatal(err)
	}
	if gen, _ := r.rc.Link(); gen != 1 {
		t.Fatalf("Gen%d with a Gen1 partner", gen)
	}
}

func TestLinkNeverTrains(t *testing.T) {
	for _, soc := range socs() {
		t.Run(soc.Name, func(t *testing.T) {
			r := newRig(t, pcietest.Options{SoC: soc, NeverTrains: true}, func(c *pcie.Config) { c.LinkTimeout = 50 * time.Millisecond })
			err := r.rc.Start()
			var le *pcie.LinkError
			if !errors.As(err, &le) || !errors.Is(err, pcie.ErrLinkDown) {
				t.Fatalf("Start = %v, want a LinkError wrapping ErrLinkDown", err)
			}
			if le.Stage != "gen1" || le.Waited < 50*time.Millisecond || le.Waited > 60*time.Millisecond {
				t.Errorf("stage %q waited %v", le.Stage, le.Waited)
			}
			if !strings.Contains(err.Error(), soc.Name) {
				t.Errorf("error %q does not name the SoC", err)
			}
			devs, err := r.rc.Enumerate()
			if !errors.Is(err, pcie.ErrLinkDown) || devs != nil {
				t.Fatalf("Enumerate = %v, %v", devs, err)
			}
			if v := r.rc.ReadConfig32(pcie.BDF{Bus: 1}, 0); v != 0xFFFF_FFFF {
				t.Errorf("config read with the link down = %#x", v)
			}
			if err := r.rc.WriteConfig32(pcie.BDF{Bus: 1}, 4, 0); !errors.Is(err, pcie.ErrNoDevice) {
				t.Errorf("config write with the link down: %v", err)
			}
			if n := r.h.TLPs(); n != 0 {
				t.Errorf("%d TLPs left the root port with the link down", n)
			}
			// On the i.MX6 the PHY's RX overrides are pulsed after a
			// failed training (Linux imx6_pcie_reset_phy).
			w := r.h.PHYWrites()
			pulsed := len(w) == 2 && w[0] == (pcietest.PHYWrite{Addr: 0x1005, Val: 0x28}) && w[1] == (pcietest.PHYWrite{Addr: 0x1005, Val: 0})
			if pulsed != (soc.Glue != pcie.GlueIMX7D) {
				t.Errorf("PHY writes after the failure: %v", w)
			}
		})
	}
}

func TestSpeedChangeNeverCompletes(t *testing.T) {
	r := newRig(t, pcietest.Options{SoC: pcie.IMX6Q, SpeedChangeStuck: true}, nil)
	err := r.rc.Start()
	var le *pcie.LinkError
	if !errors.As(err, &le) || !errors.Is(err, pcie.ErrSpeedChange) || le.Stage != "speed change" {
		t.Fatalf("Start = %v", err)
	}
	// The i.MX7D never clears the bit and the driver does not wait for it.
	r7 := newRig(t, pcietest.Options{SoC: pcie.IMX7D, SpeedChangeStuck: true}, nil)
	if err := r7.rc.Start(); err != nil {
		t.Fatal(err)
	}
}

func TestPHYReferenceClock(t *testing.T) {
	for _, c := range []struct {
		hz        int
		mpll, ate uint16
	}{
		{100_000_000, 25<<2 | 1<<9, 1 << 2},
		{200_000_000, 25<<2 | 1<<9, 1<<2 | 1},
		{125_000_000, 0, 0},
	} {
		r := newRig(t, pcietest.Options{SoC: pcie.IMX6SX}, func(cf *pcie.Config) { cf.PHYRefClock = c.hz })
		if err := r.rc.Start(); err != nil {
			t.Fatal(err)
		}
		if m, a := r.h.PHYReg(0x11), r.h.PHYReg(0x10); m != c.mpll || a != c.ate {
			t.Errorf("%d Hz: MPLL_OVRD_IN_LO %#x ATEOVRD %#x, want %#x %#x", c.hz, m, a, c.mpll, c.ate)
		}
	}
	stuck := newRig(t, pcietest.Options{SoC: pcie.IMX6Q, PHYStuck: true}, func(cf *pcie.Config) { cf.PHYRefClock = 100_000_000 })
	if err := stuck.rc.Start(); !errors.Is(err, pcie.ErrPHY) {
		t.Fatalf("PHY that never acknowledges: %v", err)
	}
}

func TestPLLNeverLocks(t *testing.T) {
	r := newRig(t, pcietest.Options{SoC: pcie.IMX7D, PLLNeverLocks: true}, nil)
	if err := r.rc.Start(); !errors.Is(err, pcie.ErrPLLLock) {
		t.Fatalf("Start = %v, want ErrPLLLock", err)
	}
}

func TestClocksAndPERSTHooks(t *testing.T) {
	var seq []string
	r := newRig(t, pcietest.Options{SoC: pcie.IMX6Q}, func(c *pcie.Config) {
		c.Clocks = func() error { seq = append(seq, "clocks"); return nil }
		c.PERST = func(a bool) {
			if a {
				seq = append(seq, "perst-assert")
			} else {
				seq = append(seq, "perst-release")
			}
		}
	})
	if err := r.rc.Start(); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(seq, ","); got != "perst-assert,clocks,perst-release" {
		t.Errorf("sequence %s", got)
	}
	bad := newRig(t, pcietest.Options{SoC: pcie.IMX6Q}, func(c *pcie.Config) {
		c.Clocks = func() error { return errors.New("PLL") }
	})
	if err := bad.rc.Start(); err == nil || !strings.Contains(err.Error(), "PLL") {
		t.Fatalf("clock failure: %v", err)
	}
}

func TestRestartAfterStop(t *testing.T) {
	r := newRig(t, pcietest.Options{SoC: pcie.IMX6Q}, nil)
	if err := r.rc.Start(); err != nil {
		t.Fatal(err)
	}
	r.rc.Stop()
	if r.rc.LinkUp() || r.h.LinkUp() {
		t.Fatal("link still up after Stop")
	}
	// A link left up by a boot loader is forced to Detect first.
	if err := r.rc.Start(); err != nil {
		t.Fatal(err)
	}
	if err := r.rc.Start(); err != nil {
		t.Fatal(err)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	h := pcietest.New(pcietest.Options{SoC: pcie.IMX7D})
	good := h.Config()
	cases := map[string]func(*pcie.Config){
		"glue":      func(c *pcie.Config) { c.SoC.Glue = 0 },
		"dbi":       func(c *pcie.Config) { c.DBI = nil },
		"src":       func(c *pcie.Config) { c.SRC = nil },
		"clock":     func(c *pcie.Config) { c.Nanotime = nil },
		"viewports": func(c *pcie.Config) { c.SoC.Viewports = 1 },
		"window":    func(c *pcie.Config) { c.SoC.BusMemSize = 1 },
		"4GiB":      func(c *pcie.Config) { c.SoC.BusMemBase = 0xF800_0000 },
		"gen":       func(c *pcie.Config) { c.MaxGen = 3 },
		"refclk":    func(c *pcie.Config) { c.PHYRefClock = 50_000_000 },
	}
	for name, mod := range cases {
		c := good
		mod(&c)
		if _, err := pcie.New(c); !errors.Is(err, pcie.ErrConfig) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if pcie.GlueIMX6SX.String() != "i.MX6SX" || pcie.Glue(9).String() != "Glue(9)" {
		t.Error("Glue names")
	}
}

func start(t *testing.T, r *rig) []*pcie.Device {
	t.Helper()
	if err := r.rc.Start(); err != nil {
		t.Fatal(err)
	}
	devs, err := r.rc.Enumerate()
	if err != nil {
		t.Fatal(err)
	}
	return devs
}

func TestEnumerateE1000eAndReadStatusThroughBAR(t *testing.T) {
	for _, soc := range socs() {
		t.Run(soc.Name, func(t *testing.T) {
			r := newRig(t, pcietest.Options{SoC: soc}, nil)
			f, regs := e1000e()
			r.h.Attach(0, f)
			devs := start(t, r)
			if len(devs) != 1 {
				t.Fatalf("%d devices", len(devs))
			}
			d := devs[0]
			if d.BDF != (pcie.BDF{Bus: 1}) || d.Vendor != 0x8086 || d.DeviceID != 0x10D3 || d.Class != 0x020000 {
				t.Fatalf("found %v", d)
			}
			b := d.BARs[0]
			if !b.Assigned || b.Size != 128<<10 || b.Addr < soc.BusMemBase || b.Addr+b.Size > soc.BusMemBase+soc.BusMemSize || b.Addr%b.Size != 0 {
				t.Fatalf("BAR0 %+v", b)
			}
			if got := f.BARAddr(0); got != b.Addr {
				t.Fatalf("device decodes %#x, driver assigned %#x", got, b.Addr)
			}
			if !d.BARs[2].IO || d.BARs[2].Assigned || d.BARs[2].Size != 32 {
				t.Errorf("I/O BAR %+v", d.BARs[2])
			}
			if f.Command()&2 == 0 || f.Command()&4 != 0 {
				t.Errorf("command %#x: want memory decode on, bus mastering off", f.Command())
			}
			w, err := r.rc.Map(d, 0, 0, 4096)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Release()
			if v := w.Read32(8); v != 0x0008_0283 {
				t.Fatalf("STATUS = %#x", v)
			}
			w.Write32(0, 0x0014_0241)
			if regs.regs[0] != 0x0014_0241 {
				t.Fatalf("CTRL write did not reach the BAR handler")
			}
			if d.PCIe == nil || d.PCIe.Type != pcie.TypeEndpoint || d.MSI == nil || !d.MSI.Is64 || d.MSIX == nil {
				t.Fatalf("capabilities %+v %+v %+v", d.PCIe, d.MSI, d.MSIX)
			}
			if x := d.MSIX; x.TableSize != 5 || x.TableBAR != 3 || x.PBABAR != 3 || x.PBAOffset != 0x2000 {
				t.Errorf("MSI-X %+v", x)
			}
			if d.Pin != 1 || d.IRQ != soc.INTxSPI[0]+32 {
				t.Errorf("pin %d irq %d", d.Pin, d.IRQ)
			}
			if s := d.String(); !strings.Contains(s, "01:00.0 8086:10d3") || !strings.Contains(s, "BAR0=") {
				t.Errorf("String %q", s)
			}
		})
	}
}

func TestEmptyBus(t *testing.T) {
	r := newRig(t, pcietest.Options{SoC: pcie.IMX7D}, nil)
	if devs := start(t, r); len(devs) != 0 {
		t.Fatalf("%v", devs)
	}
	cfg := r.h.Root().Config()
	if cfg[0x19] != 1 || cfg[0x1A] != 1 {
		t.Errorf("root port buses %d-%d", cfg[0x19], cfg[0x1A])
	}
}

// TestSwitchHierarchy: a switch (upstream port with two downstream ports)
// with an endpoint below each. Buses are numbered depth first, windows
// nest, BARs are reachable through both bridges, and INTx is swizzled.
// switchRig builds a switch below the root port as PLX-style switches
// number their ports: upstream port 01:00.0, downstream ports at device
// numbers 1 and 4 of the internal bus (none at 0), each with an endpoint
// whose BAR0 reads 0xAB00+i at 0x10, and an empty downstream port at
// device 5 that reports its link state (Data Link Layer Link Active).
func switchRig(t *testing.T, soc pcie.SoC, probe func(*pcie.Device) []int) (*rig, []*pcietest.Function) {
	r := newRig(t, pcietest.Options{SoC: soc}, func(c *pcie.Config) { c.ProbeDevices = probe })
	up := pcietest.NewBridge(0x10B5, 0x8608)
	up.AddPCIe(pcie.TypeUpstream, 2, 1)
	r.h.Attach(0, up)
	var eps []*pcietest.Function
	for i, dev := range switchPorts {
		down := pcietest.NewBridge(0x10B5, 0x8608)
		down.AddPCIe(pcie.TypeDownstream, 2, 1)
		down.ReportLinkActive()
		up.Attach(dev, 0, down)
		ep := pcietest.NewEndpoint(0x15B3, 0x1015, 0x020000)
		rf := newRegFile()
		rf.regs[0x10] = uint32(0xAB00 + i)
		ep.SetBAR(0, 4<<20, pcietest.Mem64Prefetch, rf)
		ep.SetPin(1)
		down.Attach(0, 0, ep)
		eps = append(eps, ep)
	}
	empty := pcietest.NewBridge(0x10B5, 0x8608)
	empty.AddPCIe(pcie.TypeDownstream, 2, 1)
	empty.ReportLinkActive()
	up.Attach(5, 0, empty)
	return r, eps
}

// switchPorts are the device numbers of switchRig's populated
// downstream ports.
var switchPorts = []int{1, 4}

// plxPorts is a board's Config.ProbeDevices for switchRig's switch.
func plxPorts(b *pcie.Device) []int {
	if b.Vendor == 0x10B5 && b.DeviceID == 0x8608 && b.PCIe != nil && b.PCIe.Type == pcie.TypeUpstream {
		return []int{1, 4, 5}
	}
	return nil
}

// TestSwitchHierarchy: a switch with downstream ports at device numbers
// other than 0, on every SoC. On the i.MX6Q and i.MX6SX, where reading a
// missing device is an imprecise abort, the internal bus is probed only
// at the device numbers the board names (Config.ProbeDevices), and the
// empty downstream port is not probed below because its Link Status says
// nothing is there: the model reports no access to a missing device. On
// the i.MX7D the whole internal bus is scanned. Everything found gets bus
// numbers, BARs reachable through the window, and INTx swizzled by the
// downstream ports' device numbers.
func TestSwitchHierarchy(t *testing.T) {
	for _, soc := range socs() {
		t.Run(soc.Name, func(t *testing.T) {
			r, eps := switchRig(t, soc, plxPorts)
			devs := start(t, r)
			want := []string{"01:00.0", "02:01.0", "03:00.0", "02:04.0", "04:00.0", "02:05.0"}
			if len(devs) != len(want) {
				t.Fatalf("%d devices: %v", len(devs), devs)
			}
			for i, d := range devs {
				if d.BDF.String() != want[i] {
					t.Errorf("device %d at %v, want %s", i, d.BDF, want[i])
				}
				if len(d.Problems) != 0 {
					t.Errorf("%v problems %v", d.BDF, d.Problems)
				}
			}
			if devs[0].Secondary != 2 || devs[0].Subordinate != 5 {
				t.Errorf("upstream port buses %d-%d", devs[0].Secondary, devs[0].Subordinate)
			}
			if e := devs[5]; e.Secondary != 5 || e.Subordinate != 5 {
				t.Errorf("empty downstream port buses %d-%d", e.Secondary, e.Subordinate)
			}
			// Both BARs fit every SoC's window: mapping the second while
			// the first is live needs no retargeting.
			w4, err := r.rc.Map(devs[4], 0, 0x10, 4)
			if err != nil {
				t.Fatal(err)
			}
			w2, err := r.rc.Map(devs[2], 0, 0x10, 4)
			if err != nil {
				t.Fatalf("second live window: %v", err)
			}
			if w2.Read32(0) != 0xAB00 || w4.Read32(0) != 0xAB01 {
				t.Fatalf("live windows read %#x %#x", w2.Read32(0), w4.Read32(0))
			}
			w2.Release()
			w4.Release()
			for i, idx := range []int{2, 4} {
				d := devs[idx]
				if !d.BARs[0].Assigned || !d.BARs[0].Is64 || !d.BARs[0].Prefetch {
					t.Fatalf("%v BAR0 %+v", d.BDF, d.BARs[0])
				}
				// INTA of the endpoint below the downstream port at
				// device k arrives as INTA+k (mod 4) at the root port
				// (PCI-to-PCI bridge swizzle).
				pin := switchPorts[i]%4 + 1
				if d.Pin != 1 || d.IRQ != soc.INTxSPI[pin-1]+32 {
					t.Errorf("%v pin %d irq %d, want INTx pin %d", d.BDF, d.Pin, d.IRQ, pin)
				}
				eps[i].SetINTx(true)
				if !r.h.INTx(pin) {
					t.Errorf("%v INTx not seen on pin %d", d.BDF, pin)
				}
				if on, err := d.INTxPending(); err != nil || !on {
					t.Errorf("INTxPending %v %v", on, err)
				}
				if err := d.SetINTx(false); err != nil {
					t.Fatal(err)
				}
				if r.h.INTx(pin) {
					t.Errorf("INTx still asserted with Interrupt Disable set")
				}
				eps[i].SetINTx(false)
			}
		})
	}
}

// TestSwitchInternalBusNotProbedWhereItAborts: on the i.MX6Q and i.MX6SX
// a board that names no device numbers (Config.ProbeDevices nil, or
// naming none for this switch) gets the upstream port with a Problem
// saying why nothing below it was scanned, and not one configuration
// read of a missing device (the model reports each as the imprecise
// abort it is on silicon; the old scan made 31 of them).
func TestSwitchInternalBusNotProbedWhereItAborts(t *testing.T) {
	for _, soc := range []pcie.SoC{pcie.IMX6Q, pcie.IMX6SX} {
		for name, probe := range map[string]func(*pcie.Device) []int{
			"nil":   nil,
			"none":  func(*pcie.Device) []int { return nil },
			"wrong": func(*pcie.Device) []int { return []int{-1, 32} },
		} {
			t.Run(soc.Name+"/"+name, func(t *testing.T) {
				r, _ := switchRig(t, soc, probe)
				devs := start(t, r)
				if len(devs) != 1 || devs[0].BDF.String() != "01:00.0" {
					t.Fatalf("devices %v", devs)
				}
				p := devs[0].Problems
				if len(p) == 0 || !strings.Contains(p[len(p)-1].Error(), "ProbeDevices") {
					t.Fatalf("problems %v", p)
				}
				if name == "wrong" && len(p) != 3 {
					t.Errorf("problems %v: want one per bad device number and the unscanned bus", p)
				}
			})
		}
	}
}

// TestBARLargerThanWindow: a 32 MiB 64-bit BAR behind the i.MX6Q's 15 MiB
// window is reached by retargeting the memory viewport (docs §1.2).
func TestBARLargerThanWindow(t *testing.T) {
	r := newRig(t, pcietest.Options{SoC: pcie.IMX6Q}, nil)
	f := pcietest.NewEndpoint(0x15B3, 0x1015, 0x020000)
	rf := newRegFile()
	rf.regs[0x0] = 0x0010_000E      // fw_rev at the start of the BAR
	rf.regs[31<<20+0x40] = 0xC0FFEE // a UAR page near its end
	f.SetBAR(0, 32<<20, pcietest.Mem64Prefetch, rf)
	r.h.Attach(0, f)
	d := start(t, r)[0]
	b := d.BARs[0]
	if !b.Assigned || b.Addr%(32<<20) != 0 || b.Addr+b.Size > 0x1000_0000 {
		t.Fatalf("BAR0 %+v: must be 32 MiB aligned and below DDR", b)
	}
	init, err := r.rc.Map(d, 0, 0, 0x2000)
	if err != nil {
		t.Fatal(err)
	}
	if v := init.Read32(0); v != 0x0010_000E {
		t.Fatalf("BAR0+0 = %#x", v)
	}
	// Another range in the same 15 MiB view shares the viewport.
	w2, err := r.rc.Map(d, 0, 0x1000, 4)
	if err != nil {
		t.Fatal(err)
	}
	w2.Release()
	if _, err := r.rc.Map(d, 0, 31<<20, 4096); !errors.Is(err, pcie.ErrWindowBusy) {
		t.Fatalf("mapping beyond the live window: %v", err)
	}
	init.Release()
	init.Release() // twice is harmless
	uar, err := r.rc.Map(d, 0, 31<<20, 4096)
	if err != nil {
		t.Fatal(err)
	}
	if v := uar.Read32(0x40); v != 0xC0FFEE {
		t.Fatalf("BAR0+31MiB+0x40 = %#x", v)
	}
	if uar.Bus() != b.Addr+31<<20 || uar.Size() != 4096 {
		t.Errorf("window at %#x size %d", uar.Bus(), uar.Size())
	}
	// Out of range and released accesses touch nothing.
	n := len(rf.reads)
	if v := uar.Read32(4096); v != 0xFFFF_FFFF {
		t.Errorf("read beyond the window = %#x", v)
	}
	uar.Write32(4094, 1)
	uar.Release()
	if v := uar.Read32(0); v != 0xFFFF_FFFF {
		t.Errorf("read after release = %#x", v)
	}
	if len(rf.reads) != n || r.rc.Stats().WindowOutRange != 3 {
		t.Errorf("out-of-range accesses reached the device (%d) or were not counted (%d)", len(rf.reads)-n, r.rc.Stats().WindowOutRange)
	}
	for _, bad := range [][3]uint64{{0, 32 << 20, 1}, {0, 0, 0}, {0, 0, 16 << 20}, {1, 0, 4}} {
		if _, err := r.rc.Map(d, int(bad[0]), bad[1], bad[2]); err == nil {
			t.Errorf("Map(BAR%d, %#x, %#x) succeeded", bad[0], bad[1], bad[2])
		}
	}
}

func TestBadBARs(t *testing.T) {
	r := newRig(t, pcietest.Options{SoC: pcie.IMX6Q}, nil)
	f := pcietest.NewEndpoint(0x1234, 0x5678, 0xFF0000)
	f.SetRawBAR(0, 0xFFF0_F000, 0)   // holes in the size mask
	f.SetRawBAR(1, 0xFFFF_FFF0, 0x6) // reserved memory type
	f.SetBAR(2, 4096, pcietest.Mem32, newRegFile())
	f.SetBAR(3, 512<<20, pcietest.Mem32, nil) // larger than the bus range
	f.SetRawBAR(4, 0xFFF0_FFFC, 1)            // I/O with holes
	f.SetRawBAR(5, 0xFFFF_F000, 0x4)          // 64-bit in the last slot
	r.h.Attach(0, f)
	d := start(t, r)[0]
	var bad, space int
	for _, p := range d.Problems {
		switch {
		case errors.Is(p, pcie.ErrBadBAR):
			bad++
		case errors.Is(p, pcie.ErrNoSpace):
			space++
		default:
			t.Errorf("unexpected problem %v", p)
		}
	}
	if bad != 4 || space != 1 {
		t.Fatalf("problems %v", d.Problems)
	}
	for _, i := range []int{0, 1, 3, 4, 5} {
		if d.BARs[i].Assigned {
			t.Errorf("bad BAR%d assigned: %+v", i, d.BARs[i])
		}
	}
	if !d.BARs[2].Assigned {
		t.Fatalf("the good BAR was not assigned")
	}
	if r.rc.Stats().BadBARs != 5 {
		t.Errorf("BadBARs = %d", r.rc.Stats().BadBARs)
	}
}

// mappedE1000E is a root complex on soc with an 82574L model enumerated
// and the first 4 KiB of its BAR0 mapped.
func mappedE1000E(t *testing.T, soc pcie.SoC) (*rig, *pcietest.Function, *pcie.Device, *pcie.Window) {
	t.Helper()
	r := newRig(t, pcietest.Options{SoC: soc}, nil)
	f, _ := e1000e()
	r.h.Attach(0, f)
	d := start(t, r)[0]
	w, err := r.rc.Map(d, 0, 0, 4096)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Release)
	return r, f, d, w
}

func TestVanishingDevice(t *testing.T) {
	r, f, d, w := mappedE1000E(t, pcie.IMX7D)
	f.Vanish()
	if d.Present() {
		t.Fatal("vanished device present")
	}
	if _, err := d.ReadConfig32(0); !errors.Is(err, pcie.ErrDeviceGone) {
		t.Errorf("ReadConfig32: %v", err)
	}
	if err := d.WriteConfig32(4, 0); !errors.Is(err, pcie.ErrDeviceGone) {
		t.Errorf("WriteConfig32: %v", err)
	}
	if err := d.SetBusMaster(true); !errors.Is(err, pcie.ErrDeviceGone) {
		t.Errorf("SetBusMaster: %v", err)
	}
	if _, err := d.Command(); !errors.Is(err, pcie.ErrDeviceGone) {
		t.Errorf("Command: %v", err)
	}
	// Its BAR no longer decodes: QEMU and the silicon abort; the model
	// reports it. The driver cannot prevent that read, only detect the
	// device's absence afterwards.
	_ = w.Read32(8)
	if v := r.h.Take(); len(v) != 1 || !strings.Contains(v[0], "no function decodes") {
		t.Fatalf("violations %v", v)
	}
	if _, err := d.ReadConfig32(0x1000); !errors.Is(err, pcie.ErrRange) {
		t.Errorf("offset check: %v", err)
	}
	if err := f.DMAWrite(0x1000, []byte{1}); !errors.Is(err, pcietest.ErrGone) {
		t.Errorf("DMA from a vanished function: %v", err)
	}
}

// The link goes down under a mapped BAR (the card loses power). BAR
// accesses look at the link only when the last look is older than the
// check interval, or after a read returns all-ones (the data path reads
// no PL DEBUG1 of its own; see TestLinkCheckOffTheDataPath): the first
// access after the interval finds it down before sending anything, so no
// TLP goes out on a dead link (an external abort on the i.MX6, a
// violation in the model); reads give all-ones, writes are dropped,
// configuration reads too, and the loss is counted once. Within the
// interval one read reaches the dead link, and its all-ones answer
// records the loss, so nothing after it does.
func TestLinkLossIsCaughtBeforeTheBus(t *testing.T) {
	for _, soc := range []pcie.SoC{pcie.IMX6Q, pcie.IMX7D} {
		for _, late := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/after-interval=%v", soc.Name, late), func(t *testing.T) {
				r, _, d, w := mappedE1000E(t, soc)
				if v := w.Read32(0); v == 0xFFFF_FFFF || !w.LinkUp() || !r.rc.LinkUp() {
					t.Fatalf("before: read %#x, link %v/%v", v, w.LinkUp(), r.rc.LinkUp())
				}
				r.h.DropLink()
				refused := 3
				if late {
					r.h.Delay(10 * time.Millisecond)
				} else {
					refused = 2
				}
				if v := w.Read32(0); v != 0xFFFF_FFFF {
					t.Errorf("BAR read with the link down: %#x", v)
				}
				if v := r.h.Take(); late && len(v) != 0 || !late && len(v) != 1 {
					t.Errorf("accesses that reached the dead link: %v", v)
				}
				w.Write32(0x8, 0)
				if v := r.rc.ReadConfig32(d.BDF, 0); v != 0xFFFF_FFFF {
					t.Errorf("config read with the link down: %#x", v)
				}
				if w.LinkUp() || r.rc.LinkUp() {
					t.Error("link still reported up")
				}
				if v := r.h.Take(); len(v) != 0 {
					t.Errorf("accesses reached the dead link once it was known down: %v", v)
				}
				if st := r.rc.Stats(); st.LinkLost != 1 || st.LinkDownAccess != refused {
					t.Errorf("stats %+v, want 1 loss and %d refused accesses", st, refused)
				}
			})
		}
	}
}

func TestDMANeedsBusMasterAndReachesMemory(t *testing.T) {
	r := newRig(t, pcietest.Options{SoC: pcie.IMX7D}, nil)
	f, _ := e1000e()
	r.h.Attach(0, f)
	d := start(t, r)[0]
	buf, err := r.mem.Alloc(256, dma.CacheLine, dma.Cached)
	if err != nil {
		t.Fatal(err)
	}
	r.mem.SyncForDevice(&buf, 0, buf.Len(), dma.FromDevice)
	msg := []byte("written by the device over PCIe")
	if err := f.DMAWrite(buf.Addr(), msg); !errors.Is(err, pcietest.ErrNoMaster) {
		t.Fatalf("DMA without bus mastering: %v", err)
	}
	if v := r.h.Take(); len(v) != 1 {
		t.Fatalf("violations %v", v)
	}
	if err := d.SetBusMaster(true); err != nil {
		t.Fatal(err)
	}
	if err := f.DMAWrite(buf.Addr(), msg); err != nil {
		t.Fatal(err)
	}
	r.mem.SyncForCPU(&buf, 0, buf.Len(), dma.FromDevice)
	if !bytes.Equal(buf.Bytes()[:len(msg)], msg) {
		t.Fatalf("memory holds %q", buf.Bytes()[:len(msg)])
	}
	got := make([]byte, len(msg))
	r.mem.SyncForDevice(&buf, 0, buf.Len(), dma.ToDevice)
	if err := f.DMARead(buf.Addr(), got); err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("DMA read %q %v", got, err)
	}
	// A bus address inside the root port window is peer-to-peer.
	if err := f.DMAWrite(dma.Addr(d.BARs[0].Addr), msg); !errors.Is(err, pcietest.ErrPeer) {
		t.Fatalf("DMA into the window: %v", err)
	}
	r.h.Take()
	if err := d.SetBusMaster(false); err != nil {
		t.Fatal(err)
	}
	if f.Command()&4 != 0 {
		t.Fatal("bus mastering still on")
	}
}

func TestMSI(t *testing.T) {
	r := newRig(t, pcietest.Options{SoC: pcie.IMX7D}, nil)
	f, _ := e1000e()
	r.h.Attach(0, f)
	d := start(t, r)[0]
	if err := d.EnableMSI(3); !errors.Is(err, pcie.ErrConfig) {
		t.Fatalf("MSI before the receiver: %v", err)
	}
	target, err := r.mem.Alloc(64, dma.CacheLine, dma.Coherent)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.rc.EnableMSI(target.Addr()); err != nil {
		t.Fatal(err)
	}
	if err := d.EnableMSI(7); err != nil {
		t.Fatal(err)
	}
	if f.Command()&(1<<10) == 0 {
		t.Error("INTx not disabled with MSI on")
	}
	if err := d.SetBusMaster(true); err != nil {
		t.Fatal(err)
	}
	if err := f.SignalMSI(); err != nil {
		t.Fatal(err)
	}
	if !r.h.MSILine() {
		t.Fatal("MSI line not raised")
	}
	var got []int
	if n := r.rc.ServeMSI(func(v int) { got = append(got, v) }); n != 1 || len(got) != 1 || got[0] != 7 {
		t.Fatalf("served %d: %v", n, got)
	}
	if r.h.MSILine() || r.rc.MSIPending() != 0 {
		t.Fatal("MSI still pending after ServeMSI")
	}
	if r.rc.ServeMSI(nil) != 0 {
		t.Fatal("spurious vector")
	}
	for _, v := range []int{-1, 32} {
		if err := d.EnableMSI(v); err == nil {
			t.Errorf("vector %d accepted", v)
		}
	}
	if err := r.rc.EnableMSI(2); err == nil {
		t.Error("unaligned MSI address accepted")
	}
}

func TestMSIX(t *testing.T) {
	r := newRig(t, pcietest.Options{SoC: pcie.IMX6Q}, nil)
	f := pcietest.NewEndpoint(0x15B3, 0x1015, 0x020000)
	table := newRegFile()
	for e := uint32(0); e < 4; e++ {
		table.regs[0x2000+16*e+12] = 1 // entries masked at reset
	}
	f.SetBAR(0, 32<<20, pcietest.Mem64Prefetch, table)
	f.AddPCIe(pcie.TypeEndpoint, 2, 1)
	f.AddMSIX(4, 0, 0x2000, 0, 0x3000)
	r.h.Attach(0, f)
	d := start(t, r)[0]
	if err := d.EnableMSIX(0, 1); !errors.Is(err, pcie.ErrConfig) {
		t.Fatalf("MSI-X before the receiver: %v", err)
	}
	target, _ := r.mem.Alloc(64, dma.CacheLine, dma.Coherent)
	if err := r.rc.EnableMSI(target.Addr()); err != nil {
		t.Fatal(err)
	}
	if err := d.EnableMSIX(4, 1); !errors.Is(err, pcie.ErrConfig) {
		t.Fatalf("entry beyond the table: %v", err)
	}
	if err := d.EnableMSIX(2, 9); err != nil {
		t.Fatal(err)
	}
	if err := d.SetBusMaster(true); err != nil {
		t.Fatal(err)
	}
	if err := f.SignalMSIX(1); !errors.Is(err, pcietest.ErrMasked) {
		t.Fatalf("unprogrammed entry: %v", err)
	}
	if err := f.SignalMSIX(2); err != nil {
		t.Fatal(err)
	}
	var got []int
	r.rc.ServeMSI(func(v int) { got = append(got, v) })
	if len(got) != 1 || got[0] != 9 {
		t.Fatalf("vectors %v", got)
	}
	if f.Command()&(1<<10) == 0 {
		t.Error("INTx not disabled")
	}
	cfg := f.Config()
	if ctl := uint16(cfg[d.MSIX.Offset+2]) | uint16(cfg[d.MSIX.Offset+3])<<8; ctl&0xC000 != 0x8000 {
		t.Errorf("MSI-X control %#x: want enabled, function mask off", ctl)
	}
	if err := (&pcie.Device{}).EnableMSIX(0, 0); !errors.Is(err, pcie.ErrNoCap) {
		t.Errorf("no capability: %v", err)
	}
}

func TestMSI32BitAndMultiFunction(t *testing.T) {
	r := newRig(t, pcietest.Options{SoC: pcie.IMX7D}, nil)
	f := pcietest.NewEndpoint(0x1AF4, 0x1041, 0x020000)
	f.AddMSI(false)
	g := pcietest.NewEndpoint(0x1AF4, 0x1042, 0x020000)
	f.SetMultiFunction()
	r.h.Attach(0, f)
	r.h.Attach(1, g)
	devs := start(t, r)
	if len(devs) != 2 || devs[1].BDF.String() != "01:00.1" {
		t.Fatalf("%v", devs)
	}
	target, _ := r.mem.Alloc(64, dma.CacheLine, dma.Coherent)
	if err := r.rc.EnableMSI(target.Addr()); err != nil {
		t.Fatal(err)
	}
	if err := devs[0].EnableMSI(0); err != nil {
		t.Fatal(err)
	}
	if err := devs[0].SetBusMaster(true); err != nil {
		t.Fatal(err)
	}
	if err := f.SignalMSI(); err != nil {
		t.Fatal(err)
	}
	if r.rc.MSIPending() != 1 {
		t.Fatalf("pending %#x", r.rc.MSIPending())
	}
	r.rc.AckMSI(1)
	if err := devs[1].EnableMSI(0); !errors.Is(err, pcie.ErrNoCap) {
		t.Fatalf("MSI on a function without the capability: %v", err)
	}
	if err := g.SignalMSI(); !errors.Is(err, pcietest.ErrNoMSI) {
		t.Fatal(err)
	}
}

// TestMultiFunctionOnIMX6: functions 1-7 are not probed where a missing
// one aborts, unless the board says so; the device records why.
func TestMultiFunctionOnIMX6(t *testing.T) {
	for _, probe := range []bool{false, true} {
		r := newRig(t, pcietest.Options{SoC: pcie.IMX6Q}, func(c *pcie.Config) { c.ProbeFunctions = probe })
		f := pcietest.NewEndpoint(0x1AF4, 0x1041, 0x020000)
		f.SetMultiFunction()
		r.h.Attach(0, f)
		for fn := 1; fn < 8; fn++ {
			r.h.Attach(fn, pcietest.NewEndpoint(0x1AF4, 0x1042, 0x020000))
		}
		devs := start(t, r)
		switch {
		case probe && len(devs) != 8:
			t.Fatalf("probing: %d functions", len(devs))
		case !probe && (len(devs) != 1 || len(devs[0].Problems) != 1):
			t.Fatalf("not probing: %v, problems %v", devs, devs[0].Problems)
		}
	}
}

// TestCapabilityLoop: a capability list that points back at itself is
// reported, and enumeration carries on.
func TestCapabilityLoop(t *testing.T) {
	r := newRig(t, pcietest.Options{SoC: pcie.IMX7D}, nil)
	f := pcietest.NewEndpoint(0x1234, 0x0001, 0x020000)
	off := f.AddMSI(false)
	exp := f.AddPCIe(pcie.TypeEndpoint, 1, 1)
	f.SetCapNext(exp, byte(off)) // PCIe capability's next -> MSI again
	r.h.Attach(0, f)
	d := start(t, r)[0]
	if len(d.Problems) != 1 || !errors.Is(d.Problems[0], pcie.ErrBadCap) {
		t.Fatalf("problems %v", d.Problems)
	}
	if d.MSI == nil || d.PCIe == nil || r.rc.Stats().BadCaps != 1 {
		t.Fatalf("caps before the loop lost: %v", d.Caps)
	}
}

// TestIMX6NeverProbesWhatAborts: on the i.MX6, reading a missing function
// aborts. With a single-function device on the link, the driver reads
// only 01:00.0 (never 01:01.0 or 01:00.1), and reads of the root port
// beyond 0x200 never reach the DBI.
func TestIMX6NeverProbesWhatAborts(t *testing.T) {
	r := newRig(t, pcietest.Options{SoC: pcie.IMX6Q}, nil)
	f, _ := e1000e()
	r.h.Attach(0, f)
	start(t, r)
	if v := r.rc.ReadConfig32(pcie.BDF{}, 0x200); v != 0xFFFF_FFFF {
		t.Errorf("root port config 0x200 = %#x", v)
	}
	if v := r.rc.ReadConfig32(pcie.BDF{Dev: 1}, 0); v != 0xFFFF_FFFF {
		t.Errorf("00:01.0 = %#x", v)
	}
	if v := r.rc.ReadConfig16(pcie.BDF{}, 2); v != 0xABCD {
		t.Errorf("root port device ID %#x", v)
	}
	// The model would report an abort here: the check is that the
	// driver's own scan above produced none (see the rig's cleanup).
}

func TestModelReportsDriverMistakes(t *testing.T) {
	h := pcietest.New(pcietest.Options{SoC: pcie.IMX6Q})
	mem, cfg, dbi := h.MemWindow(), h.ConfigWindow(), h.DBI()
	mem.Read32(0)             // no viewport
	dbi.Write32(0x300, 0)     // beyond the i.MX6Q's RC config space
	dbi.Write32(0x900, 7)     // viewport that does not exist
	dbi.Write32(0x904, 0)     //
	dbi.Write32(0x900, 1<<31) // inbound
	dbi.Write32(0x904, 0)     //
	dbi.Write32(0x900, 0)     //
	dbi.Write32(0x91C, 1)     // upper target
	dbi.Write32(0x830, 1)     // MSI bit not pending
	dbi.Read32(0x4000)        // beyond the DBI
	dbi.Read32(0x702)         // unaligned
	h.GPR().Read32(0x200)     // beyond the GPR block
	got := h.Take()
	if len(got) != 9 {
		t.Fatalf("%d violations:\n%s", len(got), strings.Join(got, "\n"))
	}
	// A correct start, then wrong configuration TLPs.
	rc, err := pcie.New(pcie.Config{SoC: pcie.IMX6Q, DBI: dbi, GPR: h.GPR(), Cfg: cfg, Mem: mem, Nanotime: h.Nanotime, Delay: h.Delay})
	if err != nil {
		t.Fatal(err)
	}
	if err := rc.Start(); err != nil {
		t.Fatal(err)
	}
	program := func(typ, target uint32) {
		dbi.Write32(0x900, 0)
		dbi.Write32(0x90C, uint32(pcie.IMX6Q.ConfigBase))
		dbi.Write32(0x910, 0)
		dbi.Write32(0x914, uint32(pcie.IMX6Q.ConfigBase)+0xFFF)
		dbi.Write32(0x918, target)
		dbi.Write32(0x91C, 0)
		dbi.Write32(0x904, typ)
		dbi.Write32(0x908, 1<<31)
		dbi.Read32(0x908) // takes effect when read back
	}
	program(5, 1<<24) // Type 1 to the root port's own secondary bus; nothing there
	cfg.Read32(0)
	program(4, 2<<24) // Type 0 beyond it
	cfg.Write32(0, 0)
	program(2, 1<<24) // I/O type
	cfg.Read32(0)
	program(0, 0x0100_0000) // memory, root port window closed
	cfg.Read32(0)
	got = h.Take()
	if len(got) != 6 {
		t.Fatalf("%d violations:\n%s", len(got), strings.Join(got, "\n"))
	}
}

func TestLinkDropsWhenGlueResets(t *testing.T) {
	r := newRig(t, pcietest.Options{SoC: pcie.IMX6SX}, nil)
	f, _ := e1000e()
	r.h.Attach(0, f)
	start(t, r)
	// Another driver asserting the PHY reset takes the link down; the
	// model then refuses TLPs and reports them.
	r.h.GPR().Write32(0x14, 1<<19)
	if r.h.LinkUp() {
		t.Fatal("link up with the PHY in reset")
	}
	_ = r.h.ConfigWindow().Read32(0)
	if v := r.h.Take(); len(v) != 1 || !strings.Contains(v[0], "link down") {
		t.Fatalf("violations %v", v)
	}
}

func TestCapabilitiesWalkerBounds(t *testing.T) {
	space := make([]byte, 4096)
	read := func(off int) uint32 {
		return uint32(space[off]) | uint32(space[off+1])<<8 | uint32(space[off+2])<<16 | uint32(space[off+3])<<24
	}
	// No capability list bit: nothing.
	if c, err := pcie.Capabilities(read, 4096); c != nil || err != nil {
		t.Fatal(c, err)
	}
	space[6] = 0x10
	space[0x34] = 0x40
	space[0x40], space[0x41] = 0x10, 0x00
	// Extended: 0x100 -> 0x200 -> 0x100 (loop).
	space[0x100], space[0x102], space[0x103] = 0x01, 0x01, 0x20
	space[0x200], space[0x203] = 0x02, 0x10
	caps, err := pcie.Capabilities(read, 4096)
	if !errors.Is(err, pcie.ErrBadCap) || len(caps) != 3 || !caps[1].Ext {
		t.Fatalf("%v %v", caps, err)
	}
	space[0x203] = 0
	caps, err = pcie.Capabilities(read, 4096)
	if err != nil || len(caps) != 3 {
		t.Fatalf("%v %v", caps, err)
	}
	if caps, _ := pcie.Capabilities(read, 0x100); len(caps) != 1 {
		t.Fatalf("limit 0x100: %v", caps)
	}
	if caps, _ := pcie.Capabilities(read, 0x20); caps != nil {
		t.Fatalf("limit 0x20: %v", caps)
	}
	space[0x34] = 0x3C // below 0x40
	if _, err := pcie.Capabilities(read, 4096); !errors.Is(err, pcie.ErrBadCap) {
		t.Fatal(err)
	}
}

func FuzzCapabilities(f *testing.F) {
	seed := make([]byte, 256)
	seed[6], seed[0x34], seed[0x40], seed[0x41] = 0x10, 0x40, 0x05, 0x40
	f.Add(seed, 4096)
	f.Add(make([]byte, 4096), 256)
	f.Fuzz(func(t *testing.T, data []byte, size int) {
		space := make([]byte, 4096)
		copy(space, data)
		reads := 0
		read := func(off int) uint32 {
			reads++
			if off < 0 || off > 4092 || off&3 != 0 {
				t.Fatalf("read at %#x", off)
			}
			return uint32(space[off]) | uint32(space[off+1])<<8 | uint32(space[off+2])<<16 | uint32(space[off+3])<<24
		}
		caps, _ := pcie.Capabilities(read, size)
		if len(caps) > 1024 || reads > 2048 {
			t.Fatalf("%d capabilities in %d reads", len(caps), reads)
		}
		seen := map[int]bool{}
		for _, c := range caps {
			if seen[c.Offset] {
				t.Fatalf("offset %#x twice", c.Offset)
			}
			seen[c.Offset] = true
		}
	})
}

// FuzzEnumerate: a function with an arbitrary configuration space and
// arbitrary writable bits (so BAR sizing sees any mask) is enumerated
// without a panic or a hang, and whatever BARs get assigned lie in the
// SoC's range, naturally aligned, without overlap.
func FuzzEnumerate(f *testing.F) {
	e, _ := e1000e()
	cfg := e.Config()
	wm := make([]byte, 64)
	for i := 0x10; i < 0x28; i++ {
		wm[i] = 0xFF
	}
	f.Add(cfg[:256], wm)
	f.Add([]byte{0x86, 0x80, 0xD3, 0x10, 0, 0, 0x10, 0, 0, 0, 0, 0, 0, 0, 0x81}, []byte{})
	f.Fuzz(func(t *testing.T, cfg, wmask []byte) {
		for _, soc := range []pcie.SoC{pcie.IMX7D, pcie.IMX6Q} {
			h := pcietest.New(pcietest.Options{SoC: soc})
			h.Attach(0, pcietest.NewRawFunction(cfg, wmask))
			rc, err := pcie.New(h.Config())
			if err != nil {
				t.Fatal(err)
			}
			if err := rc.Start(); err != nil {
				t.Fatal(err)
			}
			devs, err := rc.Enumerate()
			if err != nil {
				t.Fatal(err)
			}
			type span struct{ lo, hi uint64 }
			var used []span
			for _, d := range devs {
				_ = d.String()
				for _, b := range d.BARs {
					if !b.Assigned {
						continue
					}
					if b.Addr < soc.BusMemBase || b.Addr+b.Size > soc.BusMemBase+soc.BusMemSize || b.Addr%b.Size != 0 {
						t.Fatalf("%v BAR%d %#x/%#x outside the range or misaligned", d.BDF, b.Index, b.Addr, b.Size)
					}
					for _, u := range used {
						if b.Addr < u.hi && u.lo < b.Addr+b.Size {
							t.Fatalf("%v BAR%d %#x/%#x overlaps %#x-%#x", d.BDF, b.Index, b.Addr, b.Size, u.lo, u.hi)
						}
					}
					used = append(used, span{b.Addr, b.Addr + b.Size})
				}
			}
			h.Take()
		}
	})
}

// The iATU's minimum region is 64 KiB on the i.MX6Q (Linux boot log
// "iATU: unroll F, 4 ob, 4 ib, align 64K"; pcie-designware.c
// dw_pcie_prog_outbound_atu refuses unaligned addresses): a region enabled
// with a base or target below that granule would map elsewhere than
// programmed, and the limit's low bits read back as ones.
func TestModelIATURegionAlignment(t *testing.T) {
	h := pcietest.New(pcietest.Options{SoC: pcie.IMX6Q})
	dbi := h.DBI()
	program := func(base, target uint32) {
		dbi.Write32(0x900, 1)
		dbi.Write32(0x90C, base)
		dbi.Write32(0x910, 0)
		dbi.Write32(0x914, base+0xFFF)
		dbi.Write32(0x918, target)
		dbi.Write32(0x91C, 0)
		dbi.Write32(0x904, 0)
		dbi.Write32(0x908, 1<<31)
	}
	mb := uint32(pcie.IMX6Q.MemBase)
	program(mb, 0x0101_0000)
	if v := h.Take(); len(v) != 0 {
		t.Fatalf("aligned region reported: %v", v)
	}
	if got := dbi.Read32(0x914); got != mb+0xFFFF {
		t.Errorf("LIMIT reads %#x, want the low 16 bits hardwired: %#x", got, mb+0xFFFF)
	}
	program(mb, 0x0101_1000) // target 4 KiB aligned only
	program(mb+0x1000, 0x0101_0000)
	if v := h.Take(); len(v) != 2 {
		t.Fatalf("%d violations for two unaligned regions: %v", len(v), v)
	}
}

// An MSI whose data is 32 or more belongs to vector group data/32 of the
// DesignWare MSI controller; the model (like QEMU's designware.c) has one
// group, so such a message is lost and reported, not folded into group 0.
func TestModelMSIDataBeyondGroup0(t *testing.T) {
	r := newRig(t, pcietest.Options{SoC: pcie.IMX7D}, nil)
	f, _ := e1000e()
	r.h.Attach(0, f)
	d := start(t, r)[0]
	target, err := r.mem.Alloc(64, dma.CacheLine, dma.Coherent)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.rc.EnableMSI(target.Addr()); err != nil {
		t.Fatal(err)
	}
	if err := d.EnableMSI(7); err != nil {
		t.Fatal(err)
	}
	if err := d.SetBusMaster(true); err != nil {
		t.Fatal(err)
	}
	if err := f.DMAWrite(target.Addr(), []byte{39, 0, 0, 0}); err != nil {
		t.Fatal(err)
	}
	if r.h.MSILine() {
		t.Error("MSI data 39 raised a group-0 vector")
	}
	if v := r.h.Take(); len(v) != 1 || !strings.Contains(v[0], "group 1") {
		t.Fatalf("violations: %v", v)
	}
}

// The i.MX7D's ERR010728 PHY settings written while the PHY is still in
// reset are lost and reported; the PLL then never locks.
func TestModelPHYWriteInReset(t *testing.T) {
	h := pcietest.New(pcietest.Options{SoC: pcie.IMX7D})
	src, phy := h.SRC(), h.PHY()
	src.Write32(0x2C, 1<<1|1<<2) // PHY held in reset
	phy.Write32(0x14, 0x29)
	phy.Write32(0x90, 0x48)
	phy.Write32(0x98, 0xBC)
	src.Write32(0x2C, 0)
	if v := h.Take(); len(v) != 3 {
		t.Fatalf("%d violations: %v", len(v), v)
	}
	if got := h.GPR().Read32(0x58); got&(1<<31) != 0 {
		t.Fatal("PLL locked with the ERR010728 settings written in reset")
	}
	phy.Write32(0x14, 0x29)
	phy.Write32(0x90, 0x48)
	phy.Write32(0x98, 0xBC)
	if got := h.GPR().Read32(0x58); got&(1<<31) == 0 || len(h.Take()) != 0 {
		t.Fatal("PLL not locked after the settings written out of reset")
	}
}
