package pcie

import (
	"fmt"
)

// atuGranule is the alignment the memory viewport is retargeted to: the
// DesignWare iATU's minimum region size is a synthesis parameter (4 KiB
// to 64 KiB); 64 KiB works for every value.
const atuGranule = 64 << 10

// Window is a CPU view of part of a BAR through the memory viewport. It
// is an mmio.Regs: offsets are from the start of the mapped range. An
// access beyond the mapped size touches nothing, reads all-ones and is
// counted in Stats.WindowOutRange; so does one made with the link known
// down (Stats.LinkDownAccess). The link state (PL DEBUG1) is not read
// before every access, which would double the cost of every register
// access a NIC driver makes: it is read when the last look is older than
// Config.LinkCheckInterval, when a read returns all-ones (what a read
// from a device that is gone returns), and on LinkUp, which drivers call
// on their error paths. A link in Recovery is waited out (see LinkUp).
type Window struct {
	rc   *RC
	cpu  uint32 // offset into the CPU memory window
	size uint32
	bus  uint64
	live bool
}

// Map makes n bytes at offset off of BAR bar of d reachable by the CPU.
// When the range lies inside what the memory viewport already maps, no
// register is touched. Otherwise the viewport is retargeted, which is
// only allowed while no other Window is live (ErrWindowBusy): this is the
// sub-window mapping that reaches BARs larger than the i.MX6's 15 MiB
// window (docs connectx-pcie.md §1.2). Release a Window when done.
func (rc *RC) Map(d *Device, bar int, off, n uint64) (*Window, error) {
	if d == nil || d.rc != rc || bar < 0 || bar > 5 {
		return nil, fmt.Errorf("pcie: map BAR%d: %w", bar, ErrRange)
	}
	b := d.BARs[bar]
	if !b.Assigned {
		return nil, fmt.Errorf("pcie: %v map BAR%d: not assigned: %w", d.BDF, bar, ErrNoDevice)
	}
	if n == 0 || off >= b.Size || n > b.Size-off {
		return nil, fmt.Errorf("pcie: %v map BAR%d+%#x len %#x (BAR is %#x): %w", d.BDF, bar, off, n, b.Size, ErrRange)
	}
	return rc.mapBus(b.Addr+off, n)
}

func (rc *RC) mapBus(a, n uint64) (*Window, error) {
	if n > rc.soc.MemSize {
		return nil, fmt.Errorf("pcie: map %#x len %#x: larger than the %#x-byte window: %w", a, n, rc.soc.MemSize, ErrNoSpace)
	}
	if rc.memTarget == 0 || a < rc.memTarget || a+n > rc.memTarget+rc.soc.MemSize {
		if rc.memUsers > 0 {
			return nil, fmt.Errorf("pcie: map %#x len %#x: viewport targets %#x with %d windows live: %w",
				a, n, rc.memTarget, rc.memUsers, ErrWindowBusy)
		}
		// The SoC's own mapping (1:1 on the i.MX7D) when the range
		// fits it, so every BAR that fits the window stays reachable
		// at once; otherwise a window starting at the range.
		t := rc.soc.BusMemBase
		if a < t || a+n > t+rc.soc.MemSize {
			t = a &^ (atuGranule - 1)
		}
		if a+n > t+rc.soc.MemSize {
			return nil, fmt.Errorf("pcie: map %#x len %#x: does not fit one window: %w", a, n, ErrNoSpace)
		}
		rc.memTarget = 0
		if err := rc.program(viewportMem, atuTypeMem, rc.soc.MemBase, rc.soc.MemSize, t); err != nil {
			return nil, fmt.Errorf("pcie: map %#x len %#x: %w", a, n, err)
		}
		rc.memTarget = t
	}
	rc.memUsers++
	return &Window{rc: rc, cpu: uint32(a - rc.memTarget), size: uint32(n), bus: a, live: true}, nil
}

// Release ends the mapping; the Window must not be used afterwards (its
// accesses then read all-ones and are counted).
func (w *Window) Release() {
	if w.live {
		w.live = false
		w.rc.memUsers--
	}
}

// Bus returns the bus address of the first byte.
func (w *Window) Bus() uint64 { return w.bus }

// Size returns the mapped length.
func (w *Window) Size() uint32 { return w.size }

func (w *Window) ok(off uint32) bool {
	if !w.live || off&3 != 0 || off >= w.size || w.size-off < 4 {
		w.rc.stats.WindowOutRange++
		return false
	}
	return true
}

// Read32 reads the register at off. With the link known down (lost since
// Start, see LinkUp) nothing goes out and it reads all-ones, as a read
// from a missing device does. A read that returns all-ones looks at the
// link, so a lost link is recorded at once and later accesses stay off
// the bus.
func (w *Window) Read32(off uint32) uint32 {
	if !w.ok(off) || !w.rc.pathOpen(false) {
		return 0xFFFF_FFFF
	}
	v := w.rc.mem.Read32(w.cpu + off)
	if v == 0xFFFF_FFFF {
		w.rc.linkNow()
	}
	return v
}

// Write32 writes the register at off; with the link known down it is
// dropped (counted). A link in Recovery does not drop it (see LinkUp).
func (w *Window) Write32(off, v uint32) {
	if w.ok(off) && w.rc.pathOpen(true) {
		w.rc.mem.Write32(w.cpu+off, v)
	}
}

// LinkUp reports whether the link the window is reached through is up
// now: it reads the core's link state (PL DEBUG1) whatever the interval,
// waiting out a link in Recovery for at most 100 ms (the 72 ms a Recovery
// may take, plus margin) and reporting false if it has not ended. Drivers call it on
// an error (a timeout, a register reading all-ones) to tell a dead link
// from a device fault.
func (w *Window) LinkUp() bool { return w.rc.linkNow() }
