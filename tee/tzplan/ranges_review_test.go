package tzplan

import "testing"

// covered reports whether block's ranges in SlotRanges cover [lo, hi).
func covered(block string, lo, hi uint64) bool {
	for a := lo; a < hi; {
		next := a
		for _, r := range SlotRanges()[block] {
			if a >= uint64(r.Base) && a < r.End() {
				next = r.End()
			}
		}
		if next == a {
			return false
		}
		a = next
	}
	return true
}

// TestSlotRangesOCRAMAlias: the i.MX6UL/ULL OCRAM (128 KiB at 0x0090_0000)
// is aliased up to 0x0097_FFFF (the memory map's "OCRAM aliased" entry;
// QEMU 7.2 models it too: hw/arm/fsl-imx6ul.c maps imx6ul.ocram_alias,
// FSL_IMX6UL_OCRAM_ALIAS_ADDR 0x00920000, 384 KiB, onto the same RAM). An
// access through the alias reaches the OCRAM, which CSL39 slot 1 keeps
// Secure; SlotRanges gives only the first 128 KiB, so a Normal World
// access through the alias is refused on silicon yet passes
// TestTEENormalWorldCSU under QEMU.
func TestSlotRangesOCRAMAlias(t *testing.T) {
	if !covered("OCRAM", 0x00900000, 0x00980000) {
		t.Errorf("OCRAM ranges %+v leave the alias 0x00920000-0x0097FFFF out", SlotRanges()["OCRAM"])
	}
}

// TestSlotRangesANATOPStricter: SlotRanges takes the stricter reading
// where a slot's extent is not confirmed (the SNVS LP registers), but not
// for ANATOP: its 16 KiB AIPS slot (0x020C8000) also decodes USBPHY1 and
// USBPHY2 (Linux imx6ul.dtsi usbphy@20c9000, usbphy@20ca000), which no
// other CSL slot names (TamaGo soc/nxp/csu's table: USB is CSL8 slot 0,
// the OTG controllers). Taken as ANATOP's, as SNVS is.
func TestSlotRangesANATOPStricter(t *testing.T) {
	if !covered("ANATOP", 0x020c8000, 0x020cc000) {
		t.Errorf("ANATOP ranges %+v leave USBPHY1/2 out (not the stricter reading)", SlotRanges()["ANATOP"])
	}
}
