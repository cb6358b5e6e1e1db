package pcie

import (
	"fmt"
	"sort"
)

// BAR is one base address register of a function.
type BAR struct {
	Index    int    // 0-5; a 64-bit BAR also uses Index+1
	Addr     uint64 // bus address once assigned
	Size     uint64 // 0: not implemented
	Is64     bool
	Prefetch bool
	IO       bool // I/O BARs are sized but never assigned (no I/O window)
	Assigned bool
}

// Device is one function found by Enumerate.
type Device struct {
	BDF
	Vendor, DeviceID uint16
	Class            uint32 // base class, sub-class, programming interface
	Revision         uint8
	HeaderType       uint8 // bits 6:0; 1 = bridge
	Bridge           bool
	Secondary        uint8 // bridges: secondary and subordinate bus
	Subordinate      uint8

	BARs [6]BAR
	Caps []Capability
	PCIe *PCIeInfo
	MSI  *MSIInfo
	MSIX *MSIXInfo

	// Pin is the INTx pin (1 = INTA ... 4 = INTD, 0 = none); IRQ is the
	// GIC interrupt ID it reaches after swizzling through bridges, or -1.
	Pin int
	IRQ int

	// Problems holds what enumeration refused (bad BARs, BARs that did
	// not fit, malformed capability lists); the device is still listed.
	Problems []error

	parent *Device
	rc     *RC
}

// Enumerate scans the hierarchy below the root port, numbers the buses,
// sizes every BAR and assigns bus addresses from the SoC's range,
// programs bridge and root port windows, and turns on memory decoding of
// every function with an assigned memory BAR. Bus mastering stays off
// until SetBusMaster. With the link down it returns ErrLinkDown and
// touches nothing beyond the root port.
func (rc *RC) Enumerate() ([]*Device, error) {
	if !rc.linkUp {
		return nil, fmt.Errorf("pcie: %s enumerate: %w", rc.soc.Name, ErrLinkDown)
	}
	rc.devices = nil
	rc.nextBus = 1
	// Root port: primary 0, secondary 1, subordinate 0xFF while scanning.
	rc.dbi.Write32(cfgBusNumbers, rc.dbi.Read32(cfgBusNumbers)&0xFF00_0000|0x00FF_0100)
	last := rc.scanBus(1, nil)
	rc.dbi.Write32(cfgBusNumbers, rc.dbi.Read32(cfgBusNumbers)&0xFF00_0000|uint32(last)<<16|0x0100)
	lo, hi := rc.assign()
	// Root port: memory window over everything assigned, no prefetchable
	// or I/O window, then memory decode, bus mastering (forwarding of
	// device DMA upstream) and SERR.
	rc.dbi.Write32(cfgMemBaseLimit, windowReg(lo, hi))
	rc.dbi.Write32(cfgPrefBase, 0x0000_FFF0)
	rc.dbi.Write32(cfgPrefBaseHi, 0)
	rc.dbi.Write32(cfgPrefLimitHi, 0)
	rc.dbi.Write32(cfgIOBaseLimit, rc.dbi.Read32(cfgIOBaseLimit)&0xFFFF_0000|0x00F0)
	cmd := rc.dbi.Read32(cfgCommand) & 0xFFFF
	rc.dbi.Write32(cfgCommand, cmd|cmdMemory|cmdBusMaster|cmdSERR)
	for _, d := range rc.devices {
		if d.Bridge {
			continue
		}
		var c uint16
		for _, b := range d.BARs {
			if b.Assigned {
				c |= cmdMemory
			}
		}
		if c != 0 {
			if err := d.setCommand(cmdMemory, c); err != nil {
				d.Problems = append(d.Problems, err)
			}
		}
	}
	return rc.devices, nil
}

// Devices returns what the last Enumerate found.
func (rc *RC) Devices() []*Device { return rc.devices }

// windowReg encodes a type 1 memory base/limit register for [lo, hi); an
// empty range is encoded as base above limit (closed).
func windowReg(lo, hi uint64) uint32 {
	if hi <= lo {
		return 0x0000_FFF0
	}
	return uint32(lo>>16)&0xFFF0 | uint32((hi-1)>>16)&0xFFF0<<16
}

// scanBus probes bus n (below parent, or below the root port when parent
// is nil) and returns the highest bus number used below it.
func (rc *RC) scanBus(n int, parent *Device) int {
	last := n
	for _, dev := range rc.busDevices(parent) {
		fns := 1
		for fn := 0; fn < fns; fn++ {
			b := BDF{Bus: uint8(n), Dev: uint8(dev), Fn: uint8(fn)}
			id := rc.ReadConfig32(b, cfgVendorID)
			if id == 0xFFFF_FFFF || id&0xFFFF == 0xFFFF || id == 0 {
				continue
			}
			d := rc.probe(b, id, parent)
			if fn == 0 && d.HeaderType&0x80 != 0 {
				if rc.soc.AbortsOnUR && !rc.probeFn {
					d.Problems = append(d.Problems, fmt.Errorf("pcie: %v: multi-function device: functions 1-7 not probed on %s, where reading a missing one aborts (Config.ProbeFunctions)", b, rc.soc.Name))
				} else {
					fns = 8
				}
			}
			d.HeaderType &= 0x7F
			rc.devices = append(rc.devices, d)
			if d.Bridge && rc.nextBus < 0xFF {
				last = rc.scanBridge(d)
			}
		}
	}
	if rc.nextBus-1 > last {
		last = rc.nextBus - 1
	}
	return last
}

// busDevices returns the device numbers to probe on the bus below parent
// (nil: below the root port). A link holds device 0 only (the bus below
// the root port, whose link is up, or a downstream port). Any other bus
// (a switch's internal bus, a conventional PCI bus) may hold devices at
// any of 32 numbers, and reading a missing one ends in Unsupported
// Request, which on SoCs with AbortsOnUR is an imprecise external abort
// that takes the firmware down: there only what Config.ProbeDevices
// names is probed, and nothing when it names nothing.
func (rc *RC) busDevices(parent *Device) []int {
	if parent == nil || parent.PCIe != nil && parent.PCIe.Type == TypeRootPort {
		return []int{0}
	}
	if parent.PCIe != nil && parent.PCIe.Type == TypeDownstream {
		// An empty slot below a downstream port answers Unsupported
		// Request too; a port that reports its link state says so.
		if rc.soc.AbortsOnUR && parent.PCIe.LinkActiveReporting &&
			rc.ReadConfig16(parent.BDF, parent.PCIe.Offset+expLnkSta)&lnkStaDLLLA == 0 {
			return nil
		}
		return []int{0}
	}
	if !rc.soc.AbortsOnUR {
		all := make([]int, 32)
		for i := range all {
			all[i] = i
		}
		return all
	}
	var devs []int
	if rc.probeDevs != nil {
		seen := uint32(0)
		for _, d := range rc.probeDevs(parent) {
			if d < 0 || d > 31 || seen&(1<<d) != 0 {
				parent.Problems = append(parent.Problems, fmt.Errorf("pcie: %v: Config.ProbeDevices gave device %d for bus %02x: not probed", parent.BDF, d, parent.Secondary))
				continue
			}
			seen |= 1 << d
			devs = append(devs, d)
		}
	}
	if len(devs) == 0 {
		parent.Problems = append(parent.Problems, fmt.Errorf("pcie: %v: bus %02x below it not scanned: it is not a link, and on %s reading a missing device aborts (Config.ProbeDevices names the devices to probe)", parent.BDF, parent.Secondary, rc.soc.Name))
	}
	return devs
}

// scanBridge numbers the bus behind bridge d and scans it.
func (rc *RC) scanBridge(d *Device) int {
	rc.nextBus++
	sec := rc.nextBus
	d.Secondary = uint8(sec)
	v := rc.ReadConfig32(d.BDF, cfgBusNumbers) & 0xFF00_0000
	_ = rc.WriteConfig32(d.BDF, cfgBusNumbers, v|0xFF<<16|uint32(sec)<<8|uint32(d.Bus))
	last := rc.scanBus(sec, d)
	d.Subordinate = uint8(last)
	_ = rc.WriteConfig32(d.BDF, cfgBusNumbers, v|uint32(last)<<16|uint32(sec)<<8|uint32(d.Bus))
	return last
}

// probe reads a function's header, sizes its BARs and walks its
// capabilities.
func (rc *RC) probe(b BDF, id uint32, parent *Device) *Device {
	d := &Device{BDF: b, Vendor: uint16(id), DeviceID: uint16(id >> 16), parent: parent, rc: rc, IRQ: -1}
	cr := rc.ReadConfig32(b, cfgClassRev)
	d.Class, d.Revision = cr>>8, uint8(cr)
	d.HeaderType = uint8(rc.ReadConfig32(b, cfgHeaderType&^3) >> 16)
	d.Bridge = d.HeaderType&0x7F == 1
	read := func(off int) uint32 { return rc.ReadConfig32(b, off) }
	caps, err := walkCaps(read, 0x1000)
	if err != nil {
		rc.stats.BadCaps++
		d.Problems = append(d.Problems, fmt.Errorf("pcie: %v: %w", b, err))
	}
	d.Caps = caps
	d.PCIe, d.MSI, d.MSIX = parseCaps(read, caps)
	nbars := 6
	if d.Bridge {
		nbars = 2
	} else if d.HeaderType&0x7F != 0 {
		nbars = 0
		d.Problems = append(d.Problems, fmt.Errorf("pcie: %v: header type %#x not supported", b, d.HeaderType))
	}
	// Decoding off while BARs are sized (PCI 3.0 6.2.5.1).
	cmd := rc.ReadConfig16(b, cfgCommand)
	_ = rc.writeConfig16(b, cfgCommand, cmd&^(cmdMemory|cmdIO))
	for i := 0; i < nbars; i++ {
		if err := rc.sizeBAR(d, i); err != nil {
			rc.stats.BadBARs++
			d.Problems = append(d.Problems, err)
		}
		if d.BARs[i].Is64 {
			i++
		}
	}
	if d.Bridge {
		// Closed windows until assign opens them.
		_ = rc.WriteConfig32(b, cfgMemBaseLimit, 0x0000_FFF0)
		_ = rc.WriteConfig32(b, cfgPrefBase, 0x0000_FFF0)
		_ = rc.WriteConfig32(b, cfgPrefBaseHi, 0)
		_ = rc.WriteConfig32(b, cfgPrefLimitHi, 0)
	} else {
		_ = rc.WriteConfig32(b, cfgDeviceROM, 0) // expansion ROM stays off
	}
	d.Pin = int(rc.ReadConfig32(b, cfgIntLine)>>8) & 0xFF
	if d.Pin >= 1 && d.Pin <= 4 {
		d.IRQ = rc.soc.INTxSPI[d.swizzle()-1] + 32
	} else {
		d.Pin = 0
	}
	return d
}

// swizzle returns the INTx pin (1-4) d's pin arrives as at the root port:
// each bridge crossed rotates it by the device number (PCI-to-PCI Bridge
// Architecture 1.2, 9.1).
func (d *Device) swizzle() int {
	pin := d.Pin
	for c := d; c.parent != nil; c = c.parent {
		pin = (pin-1+int(c.Dev))%4 + 1
	}
	return pin
}

// sizeBAR sizes BAR i of d by writing all-ones and reading back
// (PCI 3.0 6.2.5.1), restoring the old value.
func (rc *RC) sizeBAR(d *Device, i int) error {
	off := cfgBAR0 + 4*i
	b := &d.BARs[i]
	b.Index = i
	old := rc.ReadConfig32(d.BDF, off)
	_ = rc.WriteConfig32(d.BDF, off, 0xFFFF_FFFF)
	mask := rc.ReadConfig32(d.BDF, off)
	_ = rc.WriteConfig32(d.BDF, off, old)
	if mask == 0 {
		return nil // not implemented
	}
	if mask == 0xFFFF_FFFF && old == 0xFFFF_FFFF {
		return fmt.Errorf("pcie: %v BAR%d: %w", d.BDF, i, ErrDeviceGone)
	}
	if mask&barIO != 0 {
		b.IO = true
		sz := ^(mask & 0xFFFF_FFFC) + 1
		if mask>>16 == 0 {
			sz &= 0xFFFF // 16-bit I/O decoder
		}
		b.Size = uint64(sz)
		if !pow2(b.Size) {
			*b = BAR{Index: i}
			return fmt.Errorf("pcie: %v BAR%d I/O mask %#08x: %w", d.BDF, i, mask, ErrBadBAR)
		}
		return nil
	}
	b.Prefetch = mask&barPrefetch != 0
	size := uint64(mask & barMemMask32)
	switch mask & barTypeMask {
	case barType32:
		size |= 0xFFFF_FFFF_0000_0000
	case barType64:
		if i == 5 || (d.Bridge && i == 1) {
			*b = BAR{Index: i}
			return fmt.Errorf("pcie: %v BAR%d: 64-bit BAR in the last slot: %w", d.BDF, i, ErrBadBAR)
		}
		b.Is64 = true
		hoff := off + 4
		hold := rc.ReadConfig32(d.BDF, hoff)
		_ = rc.WriteConfig32(d.BDF, hoff, 0xFFFF_FFFF)
		hi := rc.ReadConfig32(d.BDF, hoff)
		_ = rc.WriteConfig32(d.BDF, hoff, hold)
		size |= uint64(hi) << 32
	default:
		*b = BAR{Index: i}
		return fmt.Errorf("pcie: %v BAR%d mask %#08x: reserved type: %w", d.BDF, i, mask, ErrBadBAR)
	}
	b.Size = ^size + 1
	if size == 0 || !pow2(b.Size) || b.Size < 16 {
		// A mask with holes (not all ones above the size bit) is no
		// size at all; placing such a BAR could overlap another one.
		bad := mask
		*b = BAR{Index: i, Is64: b.Is64}
		return fmt.Errorf("pcie: %v BAR%d mask %#08x: size is not a power of two: %w", d.BDF, i, bad, ErrBadBAR)
	}
	return nil
}

func pow2(n uint64) bool { return n != 0 && n&(n-1) == 0 }

// assign places every memory BAR in the SoC's bus range, largest first
// (so each is naturally aligned with no waste between them), bridge by
// bridge: each bridge's children are packed into a 1 MiB-aligned window.
// It returns the range the root port must forward.
func (rc *RC) assign() (lo, hi uint64) {
	base := rc.soc.BusMemBase
	end := base + rc.soc.BusMemSize
	next := base
	lo, hi = rc.assignBelow(nil, &next, end)
	return lo, hi
}

// assignBelow assigns the BARs of the functions directly below parent and
// recursively below their bridges, from *next on; it returns the range used.
func (rc *RC) assignBelow(parent *Device, next *uint64, end uint64) (lo, hi uint64) {
	type req struct {
		d *Device
		b *BAR
	}
	var reqs []req
	var bridges []*Device
	for _, d := range rc.devices {
		if d.parent != parent {
			continue
		}
		if d.Bridge {
			bridges = append(bridges, d)
		}
		for i := range d.BARs {
			if b := &d.BARs[i]; b.Size != 0 && !b.IO {
				reqs = append(reqs, req{d, b})
			}
		}
	}
	sort.SliceStable(reqs, func(i, j int) bool { return reqs[i].b.Size > reqs[j].b.Size })
	lo = *next
	// Bridges first: their windows are 1 MiB aligned, and their
	// children are at least as large as a 1 MiB granule allows.
	for _, br := range bridges {
		*next = alignUp(*next, 1<<20)
		blo, bhi := rc.assignBelow(br, next, end)
		if bhi > blo {
			*next = alignUp(bhi, 1<<20)
		}
		_ = rc.WriteConfig32(br.BDF, cfgMemBaseLimit, windowReg(blo, alignUp(bhi, 1<<20)))
		if bhi > blo {
			_ = br.setCommand(cmdMemory|cmdBusMaster, cmdMemory|cmdBusMaster)
		}
	}
	for _, r := range reqs {
		a := alignUp(*next, r.b.Size)
		if a+r.b.Size > end || a+r.b.Size < a || a+r.b.Size > 1<<32 {
			rc.stats.BadBARs++
			r.d.Problems = append(r.d.Problems, fmt.Errorf("pcie: %v BAR%d (%d bytes): %w", r.d.BDF, r.b.Index, r.b.Size, ErrNoSpace))
			continue
		}
		r.b.Addr, r.b.Assigned = a, true
		off := cfgBAR0 + 4*r.b.Index
		old := rc.ReadConfig32(r.d.BDF, off) & 0xF
		_ = rc.WriteConfig32(r.d.BDF, off, uint32(a)|old)
		if r.b.Is64 {
			_ = rc.WriteConfig32(r.d.BDF, off+4, uint32(a>>32))
		}
		*next = a + r.b.Size
	}
	if *next == lo {
		return lo, lo
	}
	return lo, *next
}

func alignUp(v, a uint64) uint64 { return (v + a - 1) &^ (a - 1) }

// setCommand read-modify-writes the command register bits in mask.
func (d *Device) setCommand(mask, val uint16) error {
	c := d.rc.ReadConfig16(d.BDF, cfgCommand)
	if c == 0xFFFF {
		return fmt.Errorf("pcie: %v command: %w", d.BDF, ErrDeviceGone)
	}
	return d.rc.writeConfig16(d.BDF, cfgCommand, c&^mask|val&mask)
}

// Present reports whether the function still answers configuration reads.
func (d *Device) Present() bool {
	id := d.rc.ReadConfig32(d.BDF, cfgVendorID)
	return id != 0xFFFF_FFFF && uint16(id) == d.Vendor
}

// ReadConfig32 reads a dword of the function's configuration space. A
// read of all-ones from a function that no longer answers is ErrDeviceGone.
func (d *Device) ReadConfig32(off int) (uint32, error) {
	if off < 0 || off > 0xFFC {
		return 0, fmt.Errorf("pcie: %v config %#x: %w", d.BDF, off, ErrRange)
	}
	v := d.rc.ReadConfig32(d.BDF, off)
	if v == 0xFFFF_FFFF && !d.Present() {
		return v, fmt.Errorf("pcie: %v config %#x: %w", d.BDF, off, ErrDeviceGone)
	}
	return v, nil
}

// WriteConfig32 writes a dword of the function's configuration space.
func (d *Device) WriteConfig32(off int, v uint32) error {
	if off < 0 || off > 0xFFC {
		return fmt.Errorf("pcie: %v config %#x: %w", d.BDF, off, ErrRange)
	}
	if !d.Present() {
		return fmt.Errorf("pcie: %v config %#x: %w", d.BDF, off, ErrDeviceGone)
	}
	return d.rc.WriteConfig32(d.BDF, off, v)
}

// SetBusMaster lets the function (and every bridge above it) issue DMA, or
// stops it.
func (d *Device) SetBusMaster(on bool) error {
	v := uint16(0)
	if on {
		v = cmdBusMaster
	}
	if err := d.setCommand(cmdBusMaster, v); err != nil {
		return err
	}
	if on {
		for p := d.parent; p != nil; p = p.parent {
			if err := p.setCommand(cmdBusMaster, cmdBusMaster); err != nil {
				return err
			}
		}
	}
	return nil
}

// Command returns the command register.
func (d *Device) Command() (uint16, error) {
	v, err := d.ReadConfig32(cfgCommand)
	return uint16(v), err
}

// String is one line for logs and /stats: BDF, IDs, class, BARs, link.
func (d *Device) String() string {
	s := fmt.Sprintf("%v %04x:%04x class %06x", d.BDF, d.Vendor, d.DeviceID, d.Class)
	if d.Bridge {
		s += fmt.Sprintf(" bridge %02x-%02x", d.Secondary, d.Subordinate)
	}
	for _, b := range d.BARs {
		switch {
		case b.Assigned:
			s += fmt.Sprintf(" BAR%d=%#x/%d", b.Index, b.Addr, b.Size)
		case b.Size != 0:
			s += fmt.Sprintf(" BAR%d=unassigned/%d", b.Index, b.Size)
		}
	}
	if d.PCIe != nil && d.PCIe.Speed > 0 {
		s += fmt.Sprintf(" link Gen%d x%d", d.PCIe.Speed, d.PCIe.Width)
	}
	if d.IRQ >= 0 {
		s += fmt.Sprintf(" INT%c irq %d", 'A'+d.Pin-1, d.IRQ)
	}
	return s
}
