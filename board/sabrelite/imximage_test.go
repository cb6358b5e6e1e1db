package sabrelite

import (
	"testing"

	"github.com/tamanic/tamanic/board/internal/imximage"
)

// i.MX6DQ register blocks the DCD may write (RM, "AIPS memory maps").
var dcdBlocks = []struct {
	name       string
	start, end uint32
}{
	{"CCM", 0x020C4000, 0x020C8000},
	{"IOMUXC", 0x020E0000, 0x020E4000},
	{"MMDC_P0", 0x021B0000, 0x021B4000},
	{"MMDC_P1", 0x021B4000, 0x021B8000},
}

// MMDC registers (RM, MMDC chapter).
const (
	mmdcBase    = 0x021B0000
	mdctl       = mmdcBase + 0x00
	mdmisc      = mmdcBase + 0x18
	mdscr       = mmdcBase + 0x1C
	mdasp       = mmdcBase + 0x40
	mdscrConReq = 1 << 15
)

// TestDCD checks board/sabrelite/imximage.cfg: every write lands in a
// register block the boot ROM may configure, and the DDR it sets up
// (MDCTL's geometry, MDASP's chip select end) starts at RAMStart and holds
// the Go runtime's RAM and the DMA region.
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
	firstCtl, conReq := -1, -1
	for i, d := range c.DCD {
		if d.Op != imximage.Data || d.Width != 4 {
			t.Errorf("line %d: %s %d: want 32-bit DATA writes only", d.Line, d.Op, d.Width)
		}
		in := false
		for _, b := range dcdBlocks {
			in = in || d.Addr >= b.start && d.Addr < b.end
		}
		if !in {
			t.Errorf("line %d: %#08x is in none of CCM, IOMUXC, MMDC", d.Line, d.Addr)
		}
		if d.Addr == mdscr && d.Value&mdscrConReq != 0 && conReq < 0 {
			conReq = i
		}
		if d.Addr == mdctl && firstCtl < 0 {
			firstCtl = i
		}
	}
	// The MMDC is configured in configuration mode (MDSCR CON_REQ), which
	// the last MDSCR write leaves.
	if conReq < 0 || firstCtl < 0 || conReq > firstCtl {
		t.Errorf("MDSCR CON_REQ at command %d, MDCTL at %d: CON_REQ must come first", conReq, firstCtl)
	}
	if v, _ := c.Last(mdscr); v&mdscrConReq != 0 {
		t.Errorf("last MDSCR %#x leaves configuration mode on", v)
	}

	ctl, ok := c.Last(mdctl)
	if !ok {
		t.Fatal("no MDCTL write")
	}
	misc, _ := c.Last(mdmisc)
	if ctl&(1<<31) == 0 || ctl&(1<<30) != 0 {
		t.Errorf("MDCTL %#x: want chip select 0 only (SDE_0 on, SDE_1 off)", ctl)
	}
	rows := 11 + (ctl>>24)&7
	cols := map[uint32]uint32{0: 9, 1: 10, 2: 11, 3: 8, 4: 12}[(ctl>>20)&7]
	busBytes := uint64(2) << ((ctl >> 16) & 3) // DSIZ: 16, 32, 64 bits
	banks := uint64(8)
	if misc&(1<<5) != 0 { // MDMISC DDR_4_BANK
		banks = 4
	}
	size := uint64(1) << (rows + cols) * banks * busBytes
	if size != 1<<30 {
		t.Errorf("MDCTL %#x MDMISC %#x: %d rows, %d columns, %d banks, %d-byte bus = %d MiB, want the board's 1024",
			ctl, misc, rows, cols, banks, busBytes, size>>20)
	}
	asp, ok := c.Last(mdasp)
	if !ok {
		t.Fatal("no MDASP write")
	}
	// CS0_END is the chip select's last address in 32 MiB units, counted
	// from 0: the i.MX6's DDR window starts at 0x10000000.
	end := uint64(asp&0x7f+1) << 25
	if end != RAMStart+size {
		t.Errorf("MDASP CS0_END %#x ends DDR at %#x; RAMStart %#x + %d MiB = %#x",
			asp&0x7f, end, RAMStart, size>>20, RAMStart+size)
	}
	if DMAStart+DMASize > end {
		t.Errorf("DMA region ends at %#x, beyond DDR's end %#x", DMAStart+DMASize, end)
	}
}
