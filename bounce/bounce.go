// Package bounce decides where each byte of an outbound frame comes from
// when a DMA engine has alignment rules: copied into aligned scratch memory
// or referenced in place. It is independent of any NIC: a driver supplies its
// alignment, its descriptor budget, and per-descriptor scratch memory, and
// gets back a Plan of descriptor-sized segments.
//
// Strategies:
//
//   - Bounce: the whole frame is copied into one aligned buffer and sent with
//     one descriptor (the baseline, as Linux's FEC driver did for every
//     misaligned frame).
//   - SG: each fragment is referenced in place. A fragment that starts
//     misaligned has only its head, up to the next alignment boundary, copied
//     into a small aligned slot; the aligned remainder is a second
//     descriptor pointing at the original memory. Small fragments (headers)
//     are copied whole into the slot when that lets the next fragment's head
//     share their descriptor, so a misaligned header and payload cost two
//     descriptors and header+15 bytes of copying. When every fragment is
//     aligned no byte is copied ("direct" SG).
//
// Frames shorter than MinFrame are copied and padded with zeros in both
// strategies, so no stale byte reaches the wire.
package bounce

import (
	"errors"
	"fmt"

	"github.com/tamanic/tamanic/dma"
)

// Strategy is a TX placement strategy.
type Strategy uint8

// Strategies; see the package comment.
const (
	Bounce Strategy = iota
	SG
)

func (s Strategy) String() string {
	switch s {
	case Bounce:
		return "bounce"
	case SG:
		return "sg"
	}
	return fmt.Sprintf("Strategy(%d)", uint8(s))
}

// ParseStrategy parses "bounce" or "sg".
func ParseStrategy(s string) (Strategy, error) {
	switch s {
	case "bounce":
		return Bounce, nil
	case "sg":
		return SG, nil
	}
	return 0, fmt.Errorf("bounce: unknown strategy %q (want bounce or sg)", s)
}

// MinFrame is the shortest Ethernet frame without FCS; shorter frames are
// padded with zeros.
const MinFrame = 60

// MaxSegs bounds the descriptors of one planned frame.
const MaxSegs = 64

// Errors.
var (
	ErrTooLong    = errors.New("bounce: frame longer than the bounce buffer")
	ErrEmpty      = errors.New("bounce: empty frame")
	ErrBadScratch = errors.New("bounce: scratch memory too small or misaligned")
)

// Segment is the bytes one descriptor sends.
type Segment struct {
	// Data is the CPU view of the bytes: a prefix of the j-th slot or bounce
	// buffer when Copied, else a sub-slice of a caller's fragment.
	Data []byte
	// Copied is set when Data lies in Scratch memory of this segment's index.
	Copied bool
}

// Plan is a frame laid out as descriptors. The zero Plan is ready to use; a
// Plan is reused across frames to avoid allocation.
type Plan struct {
	Segs   [MaxSegs]Segment
	N      int // segments used
	Len    int // wire length, padding included
	Copied int // bytes copied into scratch memory, padding included
	Bounce bool
}

// Segments returns the used segments.
func (p *Plan) Segments() []Segment { return p.Segs[:p.N] }

// reset empties the plan. Only the segments in use are cleared (dropping
// their references to caller memory): zeroing all MaxSegs of them, a
// kilobyte, cost a fifth of the placement time of every TSO segment.
func (p *Plan) reset() {
	// Field by field: clear() of a slice of Segments compiles to a
	// runtime.memclrHasPointers call, which on GOARM=7 cost about 200
	// instructions for the two segments of a TSO segment.
	for i := 0; i < p.N; i++ {
		p.Segs[i].Data = nil
		p.Segs[i].Copied = false
	}
	p.N, p.Len, p.Copied, p.Bounce = 0, 0, 0, false
}

// clearFrom clears segments from to to-1 (those of an earlier plan that
// the current one does not use).
func (p *Plan) clearFrom(from, to int) {
	for i := from; i < to; i++ {
		p.Segs[i].Data = nil
		p.Segs[i].Copied = false
	}
}

// Scratch is aligned memory a Placer copies into, indexed by the position of
// the descriptor within the frame. Slot and Bounce buffers of one index may
// alias: a frame uses one or the other for each index.
type Scratch interface {
	// Slot returns the small aligned buffer of the j-th descriptor.
	Slot(j int) []byte
	// Bounce returns the full-frame aligned buffer of the j-th descriptor.
	Bounce(j int) []byte
}

// Placer plans frames for one DMA engine.
type Placer struct {
	// Align is the start alignment the engine requires of a TX buffer (a
	// power of two; 1 for none).
	Align int
	// MaxDescs is the most descriptors one frame may use (at most MaxSegs).
	MaxDescs int
	// SmallFrag is the longest fragment SG copies whole into a slot to save
	// a descriptor (0 means 128).
	SmallFrag int
}

func (p *Placer) align() int {
	if p.Align < 1 {
		return 1
	}
	return p.Align
}

func (p *Placer) maxDescs() int {
	if p.MaxDescs <= 0 || p.MaxDescs > MaxSegs {
		return MaxSegs
	}
	return p.MaxDescs
}

func (p *Placer) smallFrag() int {
	if p.SmallFrag <= 0 {
		return 128
	}
	return p.SmallFrag
}

// Place lays out the frame made of frags (in wire order) with strategy s.
// SG falls back to Bounce for a frame that would need more than MaxDescs
// descriptors; plan.Bounce tells.
func (p *Placer) Place(s Strategy, frags [][]byte, sc Scratch, plan *Plan) error {
	plan.reset()
	total := 0
	for _, f := range frags {
		total += len(f)
	}
	if total == 0 {
		return ErrEmpty
	}
	if total < MinFrame {
		return p.copyAll(frags, total, sc.Slot(0), plan)
	}
	if s == SG {
		if p.sg(0, frags, sc, plan) {
			return nil
		}
		plan.reset()
	}
	return p.copyAll(frags, total, sc.Bounce(0), plan)
}

// PlaceAfterHeader lays out a frame whose first hdrLen bytes the caller has
// already written into sc.Slot(0) (a TSO segment header), followed by the
// payload frags, with SG. The payload's misaligned head joins the header's
// descriptor. It fails only if the frame would need more than MaxDescs
// descriptors or is shorter than MinFrame; the caller then flattens it.
func (p *Placer) PlaceAfterHeader(hdrLen int, frags [][]byte, sc Scratch, plan *Plan) error {
	return p.PlaceAfterHeaderIn(sc.Slot(0), hdrLen, frags, sc, plan)
}

// PlaceAfterHeaderIn is PlaceAfterHeader for a caller that already holds
// sc.Slot(0), the slot its header is in (a driver that built the header
// there): it saves the Scratch call.
func (p *Placer) PlaceAfterHeaderIn(slot []byte, hdrLen int, frags [][]byte, sc Scratch, plan *Plan) error {
	total := hdrLen
	for _, f := range frags {
		total += len(f)
	}
	if hdrLen <= 0 || hdrLen > len(slot) || dma.Misalignment(slot, p.align()) != 0 {
		plan.reset()
		return fmt.Errorf("%w: header %d bytes in a %d-byte slot", ErrBadScratch, hdrLen, len(slot))
	}
	if total < MinFrame {
		plan.reset()
		return fmt.Errorf("bounce: segment of %d bytes is shorter than %d", total, MinFrame)
	}
	// Not reset first: the previous plan's segments are overwritten here
	// and only those the new plan does not reuse are cleared (clearing
	// them all cost about 20 instructions per TSO segment on GOARM=7).
	old := plan.N
	plan.Segs[0] = Segment{Data: slot[:hdrLen], Copied: true}
	plan.N, plan.Copied, plan.Len, plan.Bounce = 1, hdrLen, hdrLen, false
	if len(frags) == 1 && p.afterHeaderOne(frags[0], slot, plan) {
		plan.clearFrom(plan.N, old)
		return nil
	}
	plan.clearFrom(1, old)
	if !p.sg(1, frags, sc, plan) {
		return fmt.Errorf("bounce: segment needs more than %d descriptors", p.maxDescs())
	}
	return nil
}

// afterHeaderOne is what sg(1, [f]) plans after a header in slot (plan
// holding just that header), for the commonest TSO segment: one payload
// view longer than SmallFrag, its misaligned head joining the header's
// slot. It avoids sg's closures and Scratch calls (about 300 instructions
// per segment on GOARM=7). It reports false, leaving the plan untouched,
// for any case it does not cover, which sg then plans.
// TestAfterHeaderOneMatchesSG checks it against sg.
func (p *Placer) afterHeaderOne(f, slot []byte, plan *Plan) bool {
	if len(f) <= p.smallFrag() || p.maxDescs() < 2 {
		return false
	}
	head := 0
	if mis := dma.Misalignment(f, p.align()); mis != 0 {
		head = min(p.align()-mis, len(f))
		hl := len(plan.Segs[0].Data)
		if hl+head > len(slot) {
			return false
		}
		plan.Segs[0].Data = slot[:hl+copy(slot[hl:], f[:head])]
		plan.Copied += head
	}
	plan.Len += len(f)
	if head < len(f) {
		plan.Segs[1].Data, plan.Segs[1].Copied = f[head:], false
		plan.N = 2
	}
	return true
}

// copyAll copies the frame into buf, zero-padded to MinFrame.
func (p *Placer) copyAll(frags [][]byte, total int, buf []byte, plan *Plan) error {
	n := max(total, MinFrame)
	if n > len(buf) {
		return fmt.Errorf("%w: %d bytes, buffer %d", ErrTooLong, total, len(buf))
	}
	if dma.Misalignment(buf, p.align()) != 0 {
		return fmt.Errorf("%w: bounce buffer misaligned", ErrBadScratch)
	}
	o := 0
	for _, f := range frags {
		o += copy(buf[o:], f)
	}
	clear(buf[o:n])
	plan.Segs[0] = Segment{Data: buf[:n], Copied: true}
	plan.N, plan.Len, plan.Copied, plan.Bounce = 1, n, n, true
	return nil
}

// sg appends the SG layout of frags to plan (which already holds `from`
// segments, the last possibly an open slot). It reports false when the
// descriptor budget is exceeded.
func (p *Placer) sg(from int, frags [][]byte, sc Scratch, plan *Plan) bool {
	a, maxd, small := p.align(), p.maxDescs(), p.smallFrag()
	// open is true while the last segment is a slot that may grow.
	open := from > 0 && plan.Segs[from-1].Copied
	appendSlot := func(b []byte) bool {
		if open {
			seg := &plan.Segs[plan.N-1]
			slot := sc.Slot(plan.N - 1)
			if len(seg.Data)+len(b) <= len(slot) {
				seg.Data = slot[:len(seg.Data)+copy(slot[len(seg.Data):], b)]
				plan.Copied += len(b)
				return true
			}
		}
		if plan.N == maxd {
			return false
		}
		slot := sc.Slot(plan.N)
		if len(b) > len(slot) {
			return false
		}
		plan.Segs[plan.N] = Segment{Data: slot[:copy(slot, b)], Copied: true}
		plan.N++
		plan.Copied += len(b)
		open = true
		return true
	}
	inPlace := func(b []byte) bool {
		if plan.N == maxd {
			return false
		}
		plan.Segs[plan.N] = Segment{Data: b}
		plan.N++
		open = false
		return true
	}
	for i, f := range frags {
		if len(f) == 0 {
			continue
		}
		plan.Len += len(f)
		mis := dma.Misalignment(f, a)
		if len(f) <= small && (mis != 0 || open || nextMisaligned(frags[i+1:], a)) {
			if !appendSlot(f) {
				return false
			}
			continue
		}
		if mis == 0 {
			if !inPlace(f) {
				return false
			}
			continue
		}
		head := min(a-mis, len(f))
		if !appendSlot(f[:head]) {
			return false
		}
		if head < len(f) && !inPlace(f[head:]) {
			return false
		}
	}
	return true
}

// nextMisaligned reports whether the next non-empty fragment starts
// misaligned.
func nextMisaligned(rest [][]byte, a int) bool {
	for _, f := range rest {
		if len(f) > 0 {
			return dma.Misalignment(f, a) != 0
		}
	}
	return false
}
