package pcie_test

import (
	"strings"
	"testing"

	"github.com/tamanic/tamanic/dma"
	"github.com/tamanic/tamanic/pcie"
	"github.com/tamanic/tamanic/pcie/pcietest"
)

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
