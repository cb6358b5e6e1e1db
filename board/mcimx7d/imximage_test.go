package mcimx7d

import (
	"testing"

	"github.com/tamanic/tamanic/board/internal/imximage"
)

// i.MX 7Dual register blocks the DCD may write (RM, memory map).
var dcdBlocks = []struct {
	name       string
	start, end uint32
}{
	{"IOMUXC_GPR", GPRBase, GPRBase + 0x10000},
	{"CCM", CCMBase, CCMBase + 0x10000},
	{"SRC", SRCBase, SRCBase + 0x10000},
	{"DDR_PHY", ddrPHYBase, ddrPHYBase + 0x10000},
	{"DDRC", ddrcBase, ddrcBase + 0x10000},
}

// DDR controller and PHY (U-Boot arch/arm/include/asm/arch-mx7/mx7-ddr.h).
const (
	ddrPHYBase   = 0x30790000
	ddrcBase     = 0x307A0000
	ddrcMSTR     = ddrcBase + 0x000
	ddrcADDRMAP1 = ddrcBase + 0x204
	ddrcADDRMAP5 = ddrcBase + 0x214
	ddrcADDRMAP6 = ddrcBase + 0x218
	srcDDRCRCR   = SRCBase + 0x1000
	// ddrBase is where the i.MX7D maps DDR (RM memory map: 0x8000_0000
	// to 0xFFFF_FFFF).
	ddrBase = 0x80000000
)

// TestDCD checks board/mcimx7d/imximage.cfg: every write lands in a
// register block the boot ROM may configure, the DDR controller is set up
// while held in reset, and the DDR it describes starts at RAMStart and
// holds the Go runtime's RAM and the DMA region.
func TestDCD(t *testing.T) {
	c, err := imximage.ParseFile("imximage.cfg")
	if err != nil {
		t.Fatal(err)
	}
	if c.Version != 2 || c.BootFrom != "sd" {
		t.Errorf("IMAGE_VERSION %d BOOT_FROM %q, want 2 sd", c.Version, c.BootFrom)
	}
	if n := c.DCDSize(); n > imximage.MaxDCDSize {
		t.Errorf("DCD is %d bytes, the boot ROM takes %d", n, imximage.MaxDCDSize)
	}
	if RAMStart != ddrBase {
		t.Errorf("RAMStart %#x is not the i.MX7D's DDR base %#x", uint32(RAMStart), uint32(ddrBase))
	}
	inReset := false
	for _, d := range c.DCD {
		if d.Width != 4 {
			t.Errorf("line %d: width %d, want 4", d.Line, d.Width)
		}
		in := false
		for _, b := range dcdBlocks {
			in = in || d.Addr >= b.start && d.Addr < b.end
		}
		if !in {
			t.Errorf("line %d: %#08x is in none of IOMUXC_GPR, CCM, SRC, DDR_PHY, DDRC", d.Line, d.Addr)
		}
		if d.Op == imximage.Data && d.Addr == srcDDRCRCR {
			inReset = d.Value&2 != 0 // SRC_DDRC_RCR DDRC_CORE_RST
		}
		// The controller's static registers are written in reset; STAT
		// (0x004) is polled after it.
		if d.Op == imximage.Data && d.Addr >= ddrcBase && d.Addr < ddrcBase+0x10000 && !inReset {
			t.Errorf("line %d: DDRC register %#x written out of core reset", d.Line, d.Addr)
		}
	}
	if inReset {
		t.Error("the DCD leaves the DDRC in reset")
	}
	last := c.DCD[len(c.DCD)-1]
	if last.Op != imximage.CheckBitsSet || last.Addr != ddrcBase+4 {
		t.Errorf("last command %+v: want a wait on DDRC_STAT operating mode", last)
	}

	mstr, _ := c.Last(ddrcMSTR)
	if mstr&1 == 0 || (mstr>>24)&0xf != 1 || (mstr>>12)&3 != 0 {
		t.Errorf("MSTR %#x: want DDR3, one rank, full (32-bit) bus", mstr)
	}
	// Address map: bank bits are used unless their field is 31, row bits
	// unless 15 (uMCTL2 ADDRMAP1, ADDRMAP5, ADDRMAP6).
	am1, _ := c.Last(ddrcADDRMAP1)
	am5, _ := c.Last(ddrcADDRMAP5)
	am6, _ := c.Last(ddrcADDRMAP6)
	banks := 0
	for i := 0; i < 3; i++ {
		if (am1>>(8*i))&0x1f != 0x1f {
			banks++
		}
	}
	rows := 0
	for i, n := range []int{1, 1, 9, 1} { // ROW_B0, B1, B2_10, B11
		if (am5>>(8*i))&0xf != 0xf {
			rows += n
		}
	}
	for i := 0; i < 4; i++ { // ROW_B12..B15
		if (am6>>(8*i))&0xf != 0xf {
			rows++
		}
	}
	// 10 column bits: JEDEC DDR3 x16 parts of 1 to 4 Gbit (the SABRE's
	// 1 GiB is two 4 Gbit x16 DDR3L parts).
	size := uint64(1) << (rows + banks + 10) * 4
	if size != 1<<30 {
		t.Errorf("ADDRMAP %#x %#x %#x: %d row bits, %d bank bits = %d MiB, want the board's 1024",
			am1, am5, am6, rows, banks, size>>20)
	}
	if uint64(DMAStart+DMASize) > ddrBase+size {
		t.Errorf("DMA region ends at %#x, beyond DDR's end %#x", uint64(DMAStart+DMASize), ddrBase+size)
	}
}
