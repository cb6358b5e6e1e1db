package pcie_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/tamanic/tamanic/pcie"
	"github.com/tamanic/tamanic/pcie/pcietest"
)

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
