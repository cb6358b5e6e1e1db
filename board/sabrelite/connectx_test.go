package sabrelite

import (
	"testing"

	"github.com/tamanic/tamanic/connectx"
	"github.com/tamanic/tamanic/connectx/connectxtest"
	"github.com/tamanic/tamanic/dma/dmatest"
	"github.com/tamanic/tamanic/internal/mmio"
	"github.com/tamanic/tamanic/pcie"
	"github.com/tamanic/tamanic/pcie/pcietest"
)

// cxBAR is a ConnectX model's BAR0 behind a root complex model's
// function: the function's configuration space is the root complex
// model's, so its Bus Master Enable is copied to the card model (which
// refuses DMA without it) before every BAR access.
type cxBAR struct {
	m *connectxtest.Model
	f *pcietest.Function
}

func (b cxBAR) sync() {
	cs := b.m.ConfigSpace()
	cs.Write32(4, cs.Read32(4)&^0xFFFF|uint32(b.f.Command()))
}
func (b cxBAR) Read32(off uint32) uint32 { b.sync(); return b.m.Read32(off) }
func (b cxBAR) Write32(off, v uint32)    { b.sync(); b.m.Write32(off, v) }

var _ mmio.Regs = cxBAR{}

// TestConnectXThroughSubWindow brings a ConnectX-4 Lx model up the way
// the SABRE Lite does: found on the i.MX6Q root complex model's bus, its
// 32 MiB BAR0 assigned above the 15 MiB CPU window, the first MiB reached
// through a retargeted viewport, then closed with nothing left behind.
func TestConnectXThroughSubWindow(t *testing.T) {
	h := pcietest.New(pcietest.Options{SoC: pcie.IMX6Q})
	mem := dmatest.New(t, dmatest.Options{CoherentSize: 4 << 20})
	m := connectxtest.New(connectxtest.Options{Mem: mem})
	f := pcietest.NewEndpoint(connectx.VendorMellanox, 0x1015, 0x020000)
	f.SetBAR(0, 32<<20, pcietest.Mem64Prefetch, cxBAR{m, f})
	f.AddPCIe(0, 2, 1)
	h.Attach(0, f)
	rc, devs, err := h.Up()
	if err != nil {
		t.Fatal(err)
	}
	d := FindConnectX(devs)
	if d == nil {
		t.Fatalf("no ConnectX among %v", devs)
	}
	nic, w, err := OpenConnectX(rc, d, mem, connectx.Config{})
	if err != nil {
		t.Fatal(err)
	}
	bar := d.BARs[0]
	if bar.Size != 32<<20 || bar.Addr%(32<<20) != 0 || bar.Addr+bar.Size <= pcie.IMX6Q.MemBase+pcie.IMX6Q.MemSize {
		t.Errorf("BAR0 %#x/%#x: want 32 MiB, aligned, beyond the CPU window", bar.Addr, bar.Size)
	}
	if w.Bus() != bar.Addr || w.Size() != cxBARMap {
		t.Errorf("window at bus %#x size %#x, want %#x size %#x", w.Bus(), w.Size(), bar.Addr, cxBARMap)
	}
	// The init segment read through the window is the card's (firmware
	// revision, command interface revision).
	for _, off := range []uint32{0, 4} {
		if got, want := w.Read32(off), m.Read32(off); got != want || got == 0 {
			t.Errorf("init segment %#x through the window %#x, card's %#x", off, got, want)
		}
	}
	if !nic.Link() {
		t.Errorf("link down after Open")
	}
	if err := nic.Close(); err != nil {
		t.Fatal(err)
	}
	w.Release()
	if st := m.State(); st.Enabled || st.Pages != 0 || st.Objects != 0 {
		t.Errorf("card left %+v after Close", st)
	}
	for _, v := range append(m.Violations(), h.Take()...) {
		t.Errorf("model: %s", v)
	}
	if rc.Stats().WindowOutRange != 0 {
		t.Errorf("%d accesses beyond the 1 MiB window", rc.Stats().WindowOutRange)
	}
}

func TestFindConnectX(t *testing.T) {
	devs := []*pcie.Device{
		{Vendor: connectx.VendorMellanox, DeviceID: 0x1015, Bridge: true},
		{Vendor: 0x8086, DeviceID: 0x10D3},
		{Vendor: connectx.VendorMellanox, DeviceID: 0x1003}, // ConnectX-3 (mlx4): not this driver's
		{Vendor: connectx.VendorMellanox, DeviceID: 0x1017},
	}
	if d := FindConnectX(devs); d != devs[3] {
		t.Errorf("found %+v, want the CX5 (15b3:1017)", d)
	}
	if FindConnectX(devs[:3]) != nil {
		t.Errorf("found a function among bridges, other vendors and mlx4")
	}
}
