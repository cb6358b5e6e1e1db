package pcie

import (
	"fmt"
)

// BDF names a function: bus, device, function.
type BDF struct {
	Bus uint8
	Dev uint8 // 0-31
	Fn  uint8 // 0-7
}

func (b BDF) String() string { return fmt.Sprintf("%02x:%02x.%d", b.Bus, b.Dev, b.Fn) }

func (b BDF) target() uint32 {
	return uint32(b.Bus)<<24 | uint32(b.Dev&31)<<19 | uint32(b.Fn&7)<<16
}

// program writes one outbound viewport, enable last (Linux programs it in
// this order), then reads the enable back before anything goes through
// the region: the DBI write is posted and the windows are reached on
// another AXI port, so an access right after it could be translated by
// the region as it was (Linux pcie-designware.c
// __dw_pcie_prog_outbound_atu: "Make sure ATU enable takes effect before
// any subsequent config and I/O accesses", up to 5 reads 9 ms apart).
func (rc *RC) program(region uint32, typ uint32, cpu, size, target uint64) error {
	rc.dbi.Write32(plIATUVR, region) // outbound (bit 31 clear)
	rc.dbi.Write32(plIATURLBA, uint32(cpu))
	rc.dbi.Write32(plIATURUBA, uint32(cpu>>32))
	rc.dbi.Write32(plIATURLA, uint32(cpu+size-1))
	rc.dbi.Write32(plIATURLTA, uint32(target))
	rc.dbi.Write32(plIATURUTA, uint32(target>>32))
	rc.dbi.Write32(plIATURC1, typ)
	rc.dbi.Write32(plIATURC2, atuRegionEnable)
	for i := 0; ; i++ {
		if rc.dbi.Read32(plIATURC2)&atuRegionEnable != 0 {
			return nil
		}
		if i == atuEnableTries-1 {
			rc.stats.ATUTimeouts++
			return fmt.Errorf("pcie: %s iATU region %d (type %#x, target %#x) not enabled after %d reads: %w",
				rc.soc.Name, region, typ, target, atuEnableTries, ErrATU)
		}
		rc.delay(atuEnableWait)
	}
}

// Outbound viewport plan (docs §6.5): 0 configuration, 1 memory.
const (
	viewportCfg = 0
	viewportMem = 1
)

// configTarget points the configuration viewport at b. Type 0 goes to the
// bus right below the root port (the device on the link), type 1 to buses
// beyond a bridge.
func (rc *RC) configTarget(b BDF) error {
	typ := uint32(atuTypeCfg1)
	if b.Bus == 1 {
		typ = atuTypeCfg0
	}
	t := b.target()
	if rc.cfgValid && rc.cfgTgt == t && rc.cfgType == typ {
		return nil
	}
	rc.cfgValid = false
	if err := rc.program(viewportCfg, typ, rc.soc.ConfigBase, 4096, uint64(t)); err != nil {
		return err
	}
	rc.cfgValid, rc.cfgTgt, rc.cfgType = true, t, typ
	return nil
}

// reachable says whether a configuration access to b may be issued at all.
// Bus 0 holds only the root port (DBI). With the link down no TLP leaves
// the root port. A link holds one device, 0; on SoCs where an Unsupported
// Request aborts, device numbers a link cannot hold are never probed.
func (rc *RC) reachable(b BDF, off int) bool {
	if off < 0 || off > 0xFFC {
		return false
	}
	if b.Bus == 0 {
		return b.Dev == 0 && b.Fn == 0 && off < int(rc.soc.RCConfigSize) && off < int(rc.soc.DBISize)
	}
	return rc.linkAlive()
}

// ReadConfig32 reads the dword at off (rounded down to 4) of b's
// configuration space. Unreachable functions and offsets read all-ones, as
// a missing device does; such reads are counted.
func (rc *RC) ReadConfig32(b BDF, off int) uint32 {
	off &^= 3
	if !rc.reachable(b, off) {
		rc.stats.ConfigAllOnes++
		return 0xFFFF_FFFF
	}
	var v uint32
	if b.Bus == 0 {
		v = rc.dbi.Read32(uint32(off))
	} else {
		if rc.configTarget(b) != nil {
			rc.stats.ConfigAllOnes++
			return 0xFFFF_FFFF
		}
		v = rc.cfg.Read32(uint32(off))
	}
	if v == 0xFFFF_FFFF {
		rc.stats.ConfigAllOnes++
	}
	return v
}

// WriteConfig32 writes the dword at off of b's configuration space.
// Writes to unreachable functions are dropped and reported.
func (rc *RC) WriteConfig32(b BDF, off int, v uint32) error {
	off &^= 3
	if !rc.reachable(b, off) {
		return fmt.Errorf("pcie: config write %v+%#x: %w", b, off, ErrNoDevice)
	}
	if b.Bus == 0 {
		rc.dbi.Write32(uint32(off), v)
		return nil
	}
	if err := rc.configTarget(b); err != nil {
		return fmt.Errorf("pcie: config write %v+%#x: %w", b, off, err)
	}
	rc.cfg.Write32(uint32(off), v)
	return nil
}

// ReadConfig16 reads a 16-bit field through a dword read.
func (rc *RC) ReadConfig16(b BDF, off int) uint16 {
	return uint16(rc.ReadConfig32(b, off) >> (8 * (off & 2)))
}

// writeConfig16 read-modify-writes a 16-bit field. For the command and
// status dword, the status half is written as zero so its write-1-to-clear
// bits are not cleared by accident.
func (rc *RC) writeConfig16(b BDF, off int, v uint16) error {
	d := rc.ReadConfig32(b, off)
	if d == 0xFFFF_FFFF && b.Bus != 0 {
		return fmt.Errorf("pcie: config write %v+%#x: %w", b, off, ErrDeviceGone)
	}
	sh := 8 * uint(off&2)
	d = d&^(0xFFFF<<sh) | uint32(v)<<sh
	if off&^3 == cfgCommand {
		d &= 0xFFFF
	}
	return rc.WriteConfig32(b, off, d)
}

// Capability is one entry of a capability list.
type Capability struct {
	ID     byte
	Offset int
	Ext    bool // PCI Express extended capability (offset 0x100 and up)
}

// walkCaps follows the capability list of a configuration space read
// through read (dword reads at 4-byte aligned offsets), up to limit bytes.
// It never loops: every dword is visited at most once, and pointers must
// lie in 0x40-0xFC (standard) or 0x100-0xFFC (extended). It returns what
// it found before the first malformed entry, with ErrBadCap.
func walkCaps(read func(off int) uint32, limit int) ([]Capability, error) {
	var caps []Capability
	if limit > 0x1000 {
		limit = 0x1000
	}
	if limit < 0x40 {
		return nil, nil
	}
	if read(cfgStatus&^3)>>16&statusCapList == 0 {
		return nil, nil
	}
	var seen [0x1000 / 4]bool
	ptr := int(read(cfgCapPtr) & 0xFF)
	for ptr != 0 {
		ptr &^= 3
		if ptr < 0x40 || ptr > 0xFC || ptr >= limit || seen[ptr/4] {
			return caps, fmt.Errorf("%w: pointer %#x after %d capabilities", ErrBadCap, ptr, len(caps))
		}
		seen[ptr/4] = true
		v := read(ptr)
		caps = append(caps, Capability{ID: byte(v), Offset: ptr})
		ptr = int(v>>8) & 0xFF
	}
	if limit <= 0x100 {
		return caps, nil
	}
	// Extended capabilities start at 0x100. An all-zero or all-ones
	// header means there are none.
	ptr = 0x100
	for {
		v := read(ptr)
		if v == 0 || v == 0xFFFF_FFFF {
			return caps, nil
		}
		seen[ptr/4] = true
		caps = append(caps, Capability{ID: byte(v), Offset: ptr, Ext: true})
		next := int(v>>20) &^ 3
		if next == 0 {
			return caps, nil
		}
		if next < 0x100 || next >= limit || seen[next/4] {
			return caps, fmt.Errorf("%w: extended pointer %#x after %d capabilities", ErrBadCap, next, len(caps))
		}
		ptr = next
	}
}

// Capabilities walks the capability list of any configuration space
// (size bytes long, read through read). It is exported for tools and
// fuzzing: it never loops and never panics on arbitrary contents.
func Capabilities(read func(off int) uint32, size int) ([]Capability, error) {
	return walkCaps(read, size)
}

// PCIeInfo is what the PCI Express capability says.
type PCIeInfo struct {
	Offset   int
	Type     int // TypeEndpoint, TypeRootPort, ...
	MaxSpeed int // Link Capabilities, Supported Link Speeds
	MaxWidth int
	Speed    int // Link Status, current speed (1 = 2.5 GT/s)
	Width    int
	// LinkActiveReporting: Link Capabilities bit 20, Data Link Layer
	// Link Active Reporting Capable (PCIe Base 3.0 7.8.6): a downstream
	// port that has it says in Link Status bit 13 whether anything is
	// on its link.
	LinkActiveReporting bool
}

// MSIInfo is what the MSI capability says.
type MSIInfo struct {
	Offset        int
	Is64          bool
	Vectors       int // requested by the function (Multiple Message Capable)
	PerVectorMask bool
}

// MSIXInfo is what the MSI-X capability says.
type MSIXInfo struct {
	Offset      int
	TableSize   int
	TableBAR    int
	TableOffset uint32
	PBABAR      int
	PBAOffset   uint32
}

// parseCaps decodes the capabilities the driver uses from a capability list.
func parseCaps(read func(off int) uint32, caps []Capability) (pcie *PCIeInfo, msi *MSIInfo, msix *MSIXInfo) {
	for _, c := range caps {
		if c.Ext {
			continue
		}
		switch c.ID {
		case CapPCIe:
			if pcie != nil || c.Offset+expLnkSta+2 > 0x100 {
				continue
			}
			hdr := read(c.Offset)
			lc := read(c.Offset + expLnkCap)
			ls := read(c.Offset+expLnkSta&^3) >> 16
			pcie = &PCIeInfo{Offset: c.Offset, Type: int(hdr>>20) & 0xF,
				MaxSpeed: int(lc & 0xF), MaxWidth: int(lc>>4) & 0x3F,
				Speed: int(ls & 0xF), Width: int(ls>>4) & 0x3F,
				LinkActiveReporting: lc&lnkCapDLLLARC != 0}
		case CapMSI:
			if msi != nil {
				continue
			}
			ctl := read(c.Offset) >> 16
			msi = &MSIInfo{Offset: c.Offset, Is64: ctl&(1<<7) != 0,
				Vectors: 1 << min((ctl>>1)&7, 5), PerVectorMask: ctl&(1<<8) != 0}
		case CapMSIX:
			if msix != nil || c.Offset+12 > 0x100 {
				continue
			}
			ctl := read(c.Offset) >> 16
			t, p := read(c.Offset+4), read(c.Offset+8)
			msix = &MSIXInfo{Offset: c.Offset, TableSize: int(ctl&0x7FF) + 1,
				TableBAR: int(t & 7), TableOffset: t &^ 7, PBABAR: int(p & 7), PBAOffset: p &^ 7}
		}
	}
	return pcie, msi, msix
}
