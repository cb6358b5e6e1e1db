package mcimx7d

import "testing"

// TestENETAXIRate: the ENET_AXI root's rate from its CCM target register,
// and that every rate it can give keeps MDC at or under 2.5 MHz with the
// driver's MII_SPEED = ceil(ipg / 5 MHz) - 1 (6 bits).
func TestENETAXIRate(t *testing.T) {
	for _, c := range []struct {
		target uint32
		want   uint32
	}{
		{0, 24_000_000},                      // reset value (QEMU 7.2 reads 0): the oscillator
		{3 << 24, 250_000_000},               // PLL_ENET 250 MHz, undivided (Linux's set-up)
		{1<<24 | 1<<16, 135_000_000},         // PFD2 270 MHz / 2
		{2<<24 | 1<<16 | 1, 133_250_000},     // PLL_DRAM 533 MHz / 2 / 2
		{4<<24 | 7<<16 | 0x3F, 468_750},      // 240 MHz / 8 / 64
		{5 << 24, unknownParentHz},           // audio PLL: not known here
		{7<<24 | 3<<16 | 9, unknownParentHz}, // PFD4: not known here, dividers ignored
		{0xF8F8_FFC0 | 3<<24, 250_000_000},   // other bits ignored
	} {
		if got := enetAXIRate(c.target); got != c.want {
			t.Errorf("target %#08x: %d Hz, want %d", c.target, got, c.want)
		}
	}
	for mux := uint32(0); mux < 8; mux++ {
		for pre := uint32(0); pre < 8; pre++ {
			r := enetAXIRate(mux<<24 | pre<<16)
			speed := (r+4_999_999)/5_000_000 - 1
			if mux == 2 && pre == 0 {
				// PLL_DRAM undivided (533 MHz) is beyond MII_SPEED: the
				// driver refuses it (fec.New), it does not run MDC fast.
				if speed <= 63 {
					t.Errorf("533 MHz gives MII_SPEED %d", speed)
				}
				continue
			}
			if speed > 63 {
				t.Errorf("mux %d pre %d: %d Hz needs MII_SPEED %d", mux, pre, r, speed)
			} else if mdc := r / (2 * (speed + 1)); mdc > 2_500_000 {
				t.Errorf("mux %d pre %d: %d Hz gives MDC %d Hz", mux, pre, r, mdc)
			}
		}
	}
}
