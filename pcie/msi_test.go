package pcie_test

import (
	"errors"
	"testing"

	"github.com/tamanic/tamanic/dma"
	"github.com/tamanic/tamanic/pcie"
	"github.com/tamanic/tamanic/pcie/pcietest"
)

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
