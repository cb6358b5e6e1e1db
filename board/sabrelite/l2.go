package sabrelite

import (
	"fmt"

	"github.com/tamanic/tamanic/internal/mmio"
)

// PL310 (L2C-310) control registers beyond the maintenance ones package
// dma drives (ARM CoreLink Level 2 Cache Controller L2C-310 TRM r3p3, 3.3
// "Register summary"). i.MX6Q maps it at 0x00A0_2000 (i.MX6DQ RM, 2.2
// "ARM platform memory map").
const (
	L2_CACHE_ID      = 0x000
	L2_CTRL          = 0x100
	L2_AUX_CTRL      = 0x104
	L2_TAG_LATENCY   = 0x108
	L2_DATA_LATENCY  = 0x10C
	L2_CACHE_SYNC    = 0x730
	L2_INV_WAY       = 0x77C
	L2_PREFETCH_CTRL = 0xF60

	L2_CTRL_EN = 1
	// AUX_CTRL: shared attribute override (22): non-cacheable shared
	// accesses are not turned into cacheable ones (needed for uncached
	// DMA memory, as Linux sets for i.MX6: "arm,shared-override"); data
	// and instruction prefetch (28, 29).
	L2_AUX_SHARED_OVERRIDE = 1 << 22
	L2_AUX_DATA_PREFETCH   = 1 << 28
	L2_AUX_INSTR_PREFETCH  = 1 << 29
	L2_AUX_ASSOC16         = 1 << 16

	// PREFETCH_CTRL bit 30: double linefill. ARM erratum 752271 (data
	// corruption) affects r3p0 to r3p1-50rel0, the i.MX6D/Q's revision
	// (CACHE_ID 0x410000C7; i.MX6DL/S/SX/QP have r3p2): Linux
	// cache-l2x0.c l2c310_fixup clears the bit for RTL releases r3p0 (5)
	// to below r3p2 (8), as NXP's kernel does in mach-imx/system.c
	// imx_init_l2cache ("Double linefill feature can cause data
	// corruption ... Fixed in r3p2").
	L2_PREFETCH_DBL_LINEFILL = 1 << 30
	L2_CACHE_ID_RTL_MASK     = 0x3F
	L2_RTL_R3P0              = 5
	L2_RTL_R3P2              = 8

	// RAM latencies of the i.MX6Q (Linux imx6qdl.dtsi: arm,tag-latency
	// and arm,data-latency = <4 2 3>, read/write/setup cycles), encoded
	// as cycles-1 in [6:4] read, [10:8] write, [2:0] setup.
	L2_LATENCY_IMX6Q = (4-1)<<4 | (2-1)<<8 | (3 - 1)
)

// EnableL2 turns the PL310 on unless a boot loader already has: latencies,
// auxiliary control (both only writable with the L2 off), double linefill
// off on r3p0-r3p1 (erratum 752271), invalidate by way (the L2 is off, so
// nothing dirty is lost), sync, enable: the order of Linux
// arch/arm/mm/cache-l2x0.c l2c_enable. Latencies 0x132 are U-Boot's and
// Linux imx6qdl.dtsi's <4 2 3>. It reports whether an L2 is present and on;
// QEMU's sabrelite has no PL310 and reads CACHE_ID as zero. polls bounds
// each wait.
func EnableL2(r mmio.Regs, polls int) (bool, error) {
	if r.Read32(L2_CACHE_ID) == 0 {
		return false, nil
	}
	if r.Read32(L2_CTRL)&L2_CTRL_EN != 0 {
		return true, nil
	}
	r.Write32(L2_TAG_LATENCY, L2_LATENCY_IMX6Q)
	r.Write32(L2_DATA_LATENCY, L2_LATENCY_IMX6Q)
	aux := r.Read32(L2_AUX_CTRL) | L2_AUX_SHARED_OVERRIDE | L2_AUX_DATA_PREFETCH | L2_AUX_INSTR_PREFETCH
	r.Write32(L2_AUX_CTRL, aux)
	if rtl := r.Read32(L2_CACHE_ID) & L2_CACHE_ID_RTL_MASK; rtl >= L2_RTL_R3P0 && rtl < L2_RTL_R3P2 {
		if p := r.Read32(L2_PREFETCH_CTRL); p&L2_PREFETCH_DBL_LINEFILL != 0 {
			r.Write32(L2_PREFETCH_CTRL, p&^L2_PREFETCH_DBL_LINEFILL)
		}
	}
	ways := uint32(0xFF)
	if aux&L2_AUX_ASSOC16 != 0 {
		ways = 0xFFFF
	}
	r.Write32(L2_INV_WAY, ways)
	if !wait(r, L2_INV_WAY, ways, polls) {
		return false, fmt.Errorf("sabrelite: PL310 invalidate by way did not complete after %d polls", polls)
	}
	r.Write32(L2_CACHE_SYNC, 0)
	if !wait(r, L2_CACHE_SYNC, 1, polls) {
		return false, fmt.Errorf("sabrelite: PL310 cache sync did not complete after %d polls", polls)
	}
	r.Write32(L2_CTRL, L2_CTRL_EN)
	return true, nil
}

// wait polls until the bits of mask in register off are clear.
func wait(r mmio.Regs, off, mask uint32, polls int) bool {
	for i := 0; i < polls; i++ {
		if r.Read32(off)&mask == 0 {
			return true
		}
	}
	return false
}
