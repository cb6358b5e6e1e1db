package qemu

import "testing"

// TestCSUDeniedRangesWholeDDRWindow: on the i.MX6ULL every address from
// 0x8000_0000 to the top of the 32-bit space goes to the MMDC through the
// TZASC (IMX6ULLRM Table 2-1: the DDR window is 0x8000_0000-0xFFFF_FFFF),
// and TZASC region 0 (every address, Secure only) refuses the Normal World
// all of it but its region 1 (teemap.NormalStart + NormalSize). Beyond
// the EVK's 512 MiB an access is still refused on silicon (and the MMDC
// decodes only the row/column/bank bits, so it would alias real DRAM):
// the plugin must be told so, not only up to 0xA000_0000.
func TestCSUDeniedRangesWholeDDRWindow(t *testing.T) {
	ds, err := CSUDeniedRanges("nw")
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range []uint64{0x9fff_fffc, 0xa000_0000, 0xc000_0000, 0xffff_fffc} {
		denied := false
		for _, d := range ds {
			if d.Read && d.Write && (d.World == "" || d.World == "nw") && a >= d.Lo && a < d.Hi {
				denied = true
			}
		}
		if !denied {
			t.Errorf("Normal World access at %#x (DDR window, TZASC region 0) not in the denied ranges", a)
		}
	}
}
