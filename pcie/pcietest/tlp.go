package pcietest

import (
	"github.com/tamanic/tamanic/internal/mmio"
)

// checkRegion reports an enabled outbound region whose base or target is
// not a multiple of the iATU's minimum region size: the silicon ignores
// those low bits (they are not implemented), so the region would start
// elsewhere than programmed and translate to the wrong bus address
// (Linux pcie-designware.c dw_pcie_prog_outbound_atu refuses it).
func (h *Host) checkRegion(vp *viewport) {
	a := h.opts.RegionAlign - 1
	if vp.lba&a != 0 || vp.lta&a != 0 {
		h.violate("iATU region %d enabled with base %#x / target %#x not aligned to the %#x-byte minimum region (low bits not implemented: the window maps elsewhere)",
			h.vpIndex, vp.lba, vp.lta, h.opts.RegionAlign)
	}
}

// ConfigWindow returns the CPU view of the configuration window
// (offsets from SoC.ConfigBase).
func (h *Host) ConfigWindow() mmio.Regs { return h.window(h.soc.ConfigBase) }

// MemWindow returns the CPU view of the memory window (offsets from
// SoC.MemBase).
func (h *Host) MemWindow() mmio.Regs { return h.window(h.soc.MemBase) }

func (h *Host) window(base uint64) mmio.Regs {
	return regs{h, func(off uint32) uint32 { return h.cpu(base+uint64(off), 0, false) },
		func(off, v uint32) { h.cpu(base+uint64(off), v, true) }}
}

// cpu performs a CPU access at physical address a through the iATU.
func (h *Host) cpu(a uint64, v uint32, write bool) uint32 {
	what := "read"
	if write {
		what = "write"
	}
	for _, vp := range h.active {
		if vp.cr2&(1<<31) == 0 {
			continue
		}
		base := uint64(vp.uba)<<32 | uint64(vp.lba)
		limit := base&^0xFFFF_FFFF | uint64(vp.la|(h.opts.RegionAlign-1))
		if a < base || a > limit {
			continue
		}
		if !h.linkUp {
			// The request gets no completion and the AXI slave port
			// answers with an error: an external abort on the i.MX6
			// (Linux pci-imx6.c imx6q_pcie_abort_handler exists for it).
			h.violate("CPU %s at %#x: TLP with the link down (abort)", what, a)
			return 0xFFFF_FFFF
		}
		h.tlps++
		target := uint64(vp.uta)<<32 | uint64(vp.lta)
		if vp.cr1&0x1F == 0 {
			return h.memTLP(target+(a-base), v, write)
		}
		if t := vp.cr1 & 0x1F; t != 4 && t != 5 {
			h.violate("iATU region type %#x at %#x: neither MEM nor CFG0/CFG1", t, a)
			return 0xFFFF_FFFF
		}
		return h.cfgTLP(vp.cr1&0x1F, uint32(target), int(a-base)&0xFFF, v, write)
	}
	h.violate("CPU %s at %#x: no enabled outbound viewport covers it (data abort)", what, a)
	return 0xFFFF_FFFF
}

// findBus returns the bridge whose secondary bus is n.
func (h *Host) findBus(n int) *Function {
	var walk func(br *Function) *Function
	walk = func(br *Function) *Function {
		if int(br.cfg[0x19]) == n && n != 0 {
			return br
		}
		sec, sub := int(br.cfg[0x19]), int(br.cfg[0x1A])
		if n <= sec || n > sub {
			return nil
		}
		for d := range br.children {
			for _, c := range br.children[d] {
				if c != nil && !c.gone && c.cfg[0x0E]&0x7F == 1 {
					if r := walk(c); r != nil {
						return r
					}
				}
			}
		}
		return nil
	}
	return walk(h.root)
}

func (h *Host) cfgTLP(typ, target uint32, off int, v uint32, write bool) uint32 {
	bus, dev, fn := int(target>>24), int(target>>19)&31, int(target>>16)&7
	if target&0xFFFF != 0 {
		h.violate("configuration target %#x has low bits set", target)
	}
	sec := int(h.root.cfg[0x19])
	if sec == 0 {
		h.violate("configuration TLP to %02x:%02x.%d before the root port's secondary bus is set", bus, dev, fn)
		return 0xFFFF_FFFF
	}
	if bus == sec && typ != 4 {
		h.violate("Type 1 configuration TLP to %02x:%02x.%d on the root port's own secondary bus (must be Type 0)", bus, dev, fn)
	}
	if bus != sec && typ != 5 {
		h.violate("Type 0 configuration TLP to %02x:%02x.%d beyond the root port's secondary bus %d (must be Type 1)", bus, dev, fn, sec)
	}
	var f *Function
	if br := h.findBus(bus); br != nil {
		f = br.children[dev][fn]
	}
	if f == nil || f.gone {
		// Linux pci-imx6.c hooks imx6q_pcie_abort_handler for the
		// imprecise external abort a UR completion raises on i.MX6.
		if h.soc.AbortsOnUR {
			h.violate("configuration access to missing %02x:%02x.%d: Unsupported Request, an imprecise external abort on %s", bus, dev, fn, h.soc.Name)
		}
		return 0xFFFF_FFFF
	}
	if write {
		f.writeConfig(off, v, false)
		return 0
	}
	return f.readConfig(off)
}

func (h *Host) memTLP(a uint64, v uint32, write bool) uint32 {
	r := h.root
	lo, hi, ok := r.window()
	if r.get16(0x04)&2 == 0 || !ok || a < lo || a > hi {
		h.violate("memory TLP to %#x not forwarded by the root port (command %#x, window %#x-%#x): abort", a, r.get16(0x04), lo, hi)
		return 0xFFFF_FFFF
	}
	reg, off, found := h.route(r, a)
	if !found {
		h.violate("memory TLP to %#x: no function decodes it (Unsupported Request, abort)", a)
		return 0xFFFF_FFFF
	}
	if reg == nil {
		return 0
	}
	// The handler runs with the model unlocked: it may be a device model
	// of its own that calls back (DMA, interrupts).
	h.mu.Unlock()
	defer h.mu.Lock()
	if write {
		reg.Write32(off, v)
		return 0
	}
	return reg.Read32(off)
}

// route finds what decodes a below bridge br.
func (h *Host) route(br *Function, a uint64) (mmio.Regs, uint32, bool) {
	for d := range br.children {
		for _, c := range br.children[d] {
			if c == nil || c.gone {
				continue
			}
			if c.cfg[0x0E]&0x7F == 1 {
				if lo, hi, ok := c.window(); ok && c.get16(0x04)&2 != 0 && a >= lo && a <= hi {
					return h.route(c, a)
				}
				continue
			}
			if reg, off, ok := c.decode(a); ok {
				return reg, off, true
			}
		}
	}
	return nil, 0, false
}

// upstream checks a memory request from f to a.
func (h *Host) upstream(f *Function, a uint64, n int, write bool) error {
	if f.gone {
		return ErrGone
	}
	if !h.linkUp {
		return ErrLinkDown
	}
	if !f.busMaster() {
		h.violate("%04x:%04x memory request to %#x with bus mastering disabled on its path", f.get16(0), f.get16(2), a)
		return ErrNoMaster
	}
	if lo, hi, ok := h.root.window(); ok && h.root.get16(0x04)&2 != 0 && a+uint64(n) > lo && a <= hi {
		h.violate("device DMA to %#x inside the root port window %#x-%#x: peer-to-peer, never reaches memory", a, lo, hi)
		return ErrPeer
	}
	return nil
}

func (h *Host) isMSI(a uint64, n int) bool {
	return h.msiEnable != 0 && a == h.msiAddr && n == 4
}

// rootMSIEnabled reports the gate in front of the MSI receiver: the MSI
// Enable bit (Message Control bit 0) of the root port's own MSI
// capability. On the i.MX6 it gates MSIs from the devices below the port,
// and Linux sets it for every i.MX variant (pci-imx6.c imx6_pcie_probe:
// "val |= PCI_MSI_FLAGS_ENABLE" in the root port's MSI capability, once
// PCIE_RC_IMX6_MSI_CAP = 0x50). That the i.MX7D core gates the same way
// is UNCONFIRMED; the model takes the strict reading for every SoC. QEMU
// 7.2's designware.c does not gate (it looks only at PL_MSI_CTRL_INT0_EN).
func (h *Host) rootMSIEnabled() bool {
	off := h.root.capability(0x05)
	return off != 0 && h.root.get16(off+2)&1 != 0
}

func (h *Host) msiMatches(a uint64) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.isMSI(a, 4)
}

// msiWrite catches an MSI: data n sets bit n%32 of the status of group
// n/32 (Linux pcie-designware-host.c dw_handle_msi_irq walks
// PCIE_MSI_INTR0_STATUS + group*12 for num_vectors/32 groups). The model,
// like QEMU 7.2's designware.c (status |= BIT(val) & enable, one 32-bit
// group), has group 0 only: data of 32 or more is an interrupt the driver
// never sees, so it is reported instead of being folded into group 0.
func (h *Host) msiWrite(data uint32) {
	if data >= 32 {
		h.violate("MSI data %#x selects vector %d of group %d; only group 0 (PL_MSI_CTRL_INT0_*) is modelled and enabled: the interrupt is lost", data, data%32, data/32)
		return
	}
	h.msiSta |= (1 << data) & h.msiEnable
}
