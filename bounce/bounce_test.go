package bounce

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/tamanic/tamanic/dma"
)

// scratch hands out aligned slots and bounce buffers from the heap.
type scratch struct {
	slots, bounces [][]byte
}

func alignedBuf(n, align int) []byte {
	b := make([]byte, n+align)
	o := dma.Misalignment(b, align)
	if o != 0 {
		o = align - o
	}
	return b[o : o+n]
}

func newScratch(n int) *scratch {
	s := &scratch{}
	for i := 0; i < n; i++ {
		s.slots = append(s.slots, alignedBuf(256, 64))
		s.bounces = append(s.bounces, alignedBuf(2048, 64))
		for k := range s.slots[i] {
			s.slots[i][k] = 0xEE // stale bytes
		}
		for k := range s.bounces[i] {
			s.bounces[i][k] = 0xEE
		}
	}
	return s
}

func (s *scratch) Slot(j int) []byte   { return s.slots[j] }
func (s *scratch) Bounce(j int) []byte { return s.bounces[j] }

// at returns n bytes of b starting at misalignment mis (mod 64).
func at(b []byte, mis int) []byte {
	buf := alignedBuf(len(b)+64, 64)[mis:]
	return buf[:copy(buf, b)]
}

func flatten(p *Plan) []byte {
	var out []byte
	for _, s := range p.Segments() {
		out = append(out, s.Data...)
	}
	return out
}

// check asserts the invariants of any plan: the concatenation equals the
// frame padded with zeros, every segment starts aligned, copied segments
// lie in their own index's scratch memory and in-place ones in the caller's
// fragments, and Copied counts exactly the copied bytes.
func check(t *testing.T, p *Plan, frags [][]byte, sc *scratch, align int) {
	t.Helper()
	var want []byte
	for _, f := range frags {
		want = append(want, f...)
	}
	if len(want) < MinFrame {
		want = append(want, make([]byte, MinFrame-len(want))...)
	}
	if got := flatten(p); !bytes.Equal(got, want) {
		t.Fatalf("plan bytes differ:\n got %x\nwant %x", got, want)
	}
	if p.Len != len(want) {
		t.Fatalf("Len %d want %d", p.Len, len(want))
	}
	copied := 0
	for j, s := range p.Segments() {
		if len(s.Data) == 0 {
			t.Fatalf("segment %d empty", j)
		}
		if dma.Misalignment(s.Data, align) != 0 {
			t.Fatalf("segment %d starts misaligned for %d", j, align)
		}
		if s.Copied {
			copied += len(s.Data)
			if !within(s.Data, sc.slots[j]) && !within(s.Data, sc.bounces[j]) {
				t.Fatalf("copied segment %d outside its own scratch", j)
			}
		} else {
			ok := false
			for _, f := range frags {
				ok = ok || within(s.Data, f)
			}
			if !ok {
				t.Fatalf("in-place segment %d does not point into a fragment", j)
			}
		}
	}
	if copied != p.Copied {
		t.Fatalf("Copied %d, counted %d", p.Copied, copied)
	}
}

// within reports whether s lies inside b (same backing array).
func within(s, b []byte) bool {
	for i := range b {
		if &b[i] == &s[0] {
			return i+len(s) <= len(b)
		}
	}
	return false
}

func TestHeaderAndPayloadShareOneSlot(t *testing.T) {
	sc := newScratch(8)
	p := &Placer{Align: 16}
	hdr := at(bytes.Repeat([]byte{1}, 54), 6)
	pay := at(bytes.Repeat([]byte{2}, 1460), 10)
	var plan Plan
	if err := p.Place(SG, [][]byte{hdr, pay}, sc, &plan); err != nil {
		t.Fatal(err)
	}
	check(t, &plan, [][]byte{hdr, pay}, sc, 16)
	if plan.N != 2 || plan.Copied != 54+6 {
		t.Fatalf("want 2 descriptors and 60 bytes copied, got %d and %d", plan.N, plan.Copied)
	}
}

func TestAlignedFragmentsAreDirect(t *testing.T) {
	sc := newScratch(8)
	p := &Placer{Align: 16}
	f := [][]byte{at(make([]byte, 200), 0), at(make([]byte, 1000), 32)}
	var plan Plan
	p.Place(SG, f, sc, &plan)
	check(t, &plan, f, sc, 16)
	if plan.Copied != 0 || plan.N != 2 {
		t.Fatalf("aligned fragments copied %d bytes in %d descriptors", plan.Copied, plan.N)
	}
}

func TestBounceCopiesTheWholeFrame(t *testing.T) {
	sc := newScratch(8)
	p := &Placer{Align: 16}
	f := [][]byte{at(make([]byte, 100), 3), at(make([]byte, 900), 5)}
	var plan Plan
	p.Place(Bounce, f, sc, &plan)
	check(t, &plan, f, sc, 16)
	if plan.N != 1 || plan.Copied != 1000 || !plan.Bounce {
		t.Fatalf("plan %+v", plan)
	}
}

func TestShortFramesArePaddedWithZeros(t *testing.T) {
	sc := newScratch(8)
	p := &Placer{Align: 16}
	for _, s := range []Strategy{Bounce, SG} {
		f := [][]byte{at([]byte("abcdefghijklmn"), 1), at([]byte("xyz"), 0)}
		var plan Plan
		p.Place(s, f, sc, &plan)
		check(t, &plan, f, sc, 16)
	}
}

func TestTooManyDescriptorsFallsBackToBounce(t *testing.T) {
	sc := newScratch(64)
	p := &Placer{Align: 16, MaxDescs: 4}
	var f [][]byte
	for i := 0; i < 10; i++ {
		f = append(f, at(make([]byte, 200), 3))
	}
	var plan Plan
	if err := p.Place(SG, f, sc, &plan); err != nil {
		t.Fatal(err)
	}
	check(t, &plan, f, sc, 16)
	if !plan.Bounce {
		t.Fatal("did not fall back")
	}
}

func TestErrors(t *testing.T) {
	sc := newScratch(4)
	p := &Placer{Align: 16}
	var plan Plan
	if err := p.Place(SG, nil, sc, &plan); err != ErrEmpty {
		t.Fatalf("empty: %v", err)
	}
	if err := p.Place(Bounce, [][]byte{make([]byte, 3000)}, sc, &plan); err == nil {
		t.Fatal("3000-byte frame fit a 2048-byte bounce buffer")
	}
	if _, err := ParseStrategy("nonsense"); err == nil {
		t.Fatal("parsed nonsense")
	}
	for _, s := range []Strategy{Bounce, SG} {
		if got, _ := ParseStrategy(s.String()); got != s {
			t.Fatal(s)
		}
	}
	if Strategy(9).String() == "" {
		t.Fatal("no name for unknown strategy")
	}
}

func TestPlaceAfterHeader(t *testing.T) {
	sc := newScratch(8)
	p := &Placer{Align: 16}
	hdr := bytes.Repeat([]byte{7}, 66)
	copy(sc.slots[0], hdr)
	pay := [][]byte{at(make([]byte, 700), 9), at(make([]byte, 748), 4)}
	var plan Plan
	if err := p.PlaceAfterHeader(66, pay, sc, &plan); err != nil {
		t.Fatal(err)
	}
	check(t, &plan, append([][]byte{hdr}, pay...), sc, 16)
	// The header, the first payload's 7-byte head (joining the header's
	// descriptor) and the second payload's 12-byte head in a slot of its own.
	if plan.Copied != 66+7+12 || plan.N != 4 {
		t.Fatalf("copied %d", plan.Copied)
	}
	if err := p.PlaceAfterHeader(0, pay, sc, &plan); err == nil {
		t.Fatal("empty header accepted")
	}
	if err := p.PlaceAfterHeader(20, nil, sc, &plan); err == nil {
		t.Fatal("runt segment accepted")
	}
}

func FuzzPlace(f *testing.F) {
	f.Add(uint64(1), uint8(16), uint8(3), false)
	f.Add(uint64(2), uint8(1), uint8(1), true)
	f.Add(uint64(3), uint8(64), uint8(9), false)
	f.Fuzz(func(t *testing.T, seed uint64, alignExp uint8, nfrag uint8, bounce bool) {
		rng := rand.New(rand.NewPCG(seed, 0))
		align := 1 << (alignExp % 7)
		sc := newScratch(MaxSegs)
		p := &Placer{Align: align, MaxDescs: 1 + rng.IntN(MaxSegs)}
		var frags [][]byte
		total := 0
		for i := 0; i < int(nfrag%16); i++ {
			n := rng.IntN(400)
			if total+n > 2000 {
				break
			}
			total += n
			b := make([]byte, n)
			for k := range b {
				b[k] = byte(rng.IntN(256))
			}
			frags = append(frags, at(b, rng.IntN(64)))
		}
		s := SG
		if bounce {
			s = Bounce
		}
		var plan Plan
		err := p.Place(s, frags, sc, &plan)
		if total == 0 {
			if err == nil {
				t.Fatal("empty frame placed")
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		check(t, &plan, frags, sc, align)
		if plan.N > p.MaxDescs {
			t.Fatalf("%d descriptors, budget %d", plan.N, p.MaxDescs)
		}
	})
}

// TestAfterHeaderOneMatchesSG: PlaceAfterHeader's single-view fast path
// plans exactly what sg plans (segments, their memory, copied bytes, slot
// contents), for random header lengths, payload lengths and alignments,
// engine alignments, descriptor budgets and SmallFrag settings, including
// the cases it hands back to sg.
func TestAfterHeaderOneMatchesSG(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	fast, ref := newScratch(4), newScratch(4)
	taken := 0
	for iter := 0; iter < 20000; iter++ {
		p := Placer{Align: []int{1, 4, 16, 64}[rng.IntN(4)], MaxDescs: rng.IntN(4), SmallFrag: []int{0, 8, 40, 300}[rng.IntN(4)]}
		hdrLen := 1 + rng.IntN(256)
		buf := make([]byte, 4000)
		for k := range buf {
			buf[k] = byte(rng.Uint32())
		}
		off := rng.IntN(100)
		f := buf[off : off+rng.IntN(3000)]
		for _, sc := range []*scratch{fast, ref} {
			for k := range sc.slots[0] {
				sc.slots[0][k] = byte(k)
			}
		}
		var pf, pr Plan
		errF := p.PlaceAfterHeader(hdrLen, [][]byte{f}, fast, &pf)
		// The reference: PlaceAfterHeader's steps with sg alone.
		pr.reset()
		var errR error
		if hdrLen+len(f) < MinFrame {
			errR = ErrTooLong // any error: both must fail
		} else {
			pr.Segs[0] = Segment{Data: ref.slots[0][:hdrLen], Copied: true}
			pr.N, pr.Copied, pr.Len = 1, hdrLen, hdrLen
			if !p.sg(1, [][]byte{f}, ref, &pr) {
				errR = ErrTooLong
			}
		}
		if (errF == nil) != (errR == nil) {
			t.Fatalf("iter %d (%+v, hdr %d, payload %d at %d): fast err %v, sg err %v", iter, p, hdrLen, len(f), off, errF, errR)
		}
		if errF != nil {
			continue
		}
		if len(f) > p.smallFrag() && p.maxDescs() >= 2 {
			taken++
		}
		if pf.N != pr.N || pf.Len != pr.Len || pf.Copied != pr.Copied || pf.Bounce != pr.Bounce {
			t.Fatalf("iter %d (%+v, hdr %d, payload %d at %d): fast %d segs len %d copied %d; sg %d segs len %d copied %d",
				iter, p, hdrLen, len(f), off, pf.N, pf.Len, pf.Copied, pr.N, pr.Len, pr.Copied)
		}
		for j := 0; j < pf.N; j++ {
			a, b := pf.Segs[j], pr.Segs[j]
			if a.Copied != b.Copied || !bytes.Equal(a.Data, b.Data) {
				t.Fatalf("iter %d: segment %d differs", iter, j)
			}
			if !a.Copied && &a.Data[0] != &b.Data[0] {
				t.Fatalf("iter %d: segment %d references other memory", iter, j)
			}
		}
		if !bytes.Equal(fast.slots[0], ref.slots[0]) {
			t.Fatalf("iter %d: slot contents differ", iter)
		}
	}
	if taken < 1000 {
		t.Fatalf("only %d iterations took the fast path", taken)
	}
}

// TestPlaceAfterHeaderInReusesPlan: a plan reused for a shorter layout keeps
// no segment of the earlier one past N (no stale slice pinning caller
// memory), and no field of it (Bounce) leaks into the new plan.
func TestPlaceAfterHeaderInReusesPlan(t *testing.T) {
	sc := newScratch(8)
	p := &Placer{Align: 16}
	hdr := bytes.Repeat([]byte{7}, 54)
	var plan Plan
	plan.Bounce = true
	long := [][]byte{at(make([]byte, 700), 9), at(make([]byte, 748), 4)}
	copy(sc.slots[0], hdr)
	if err := p.PlaceAfterHeaderIn(sc.slots[0], 54, long, sc, &plan); err != nil {
		t.Fatal(err)
	}
	check(t, &plan, append([][]byte{hdr}, long...), sc, 16)
	if plan.N < 3 || plan.Bounce {
		t.Fatalf("plan of %d segments, bounce %v", plan.N, plan.Bounce)
	}
	for _, pay := range [][][]byte{{at(make([]byte, 1448), 3)}, {at(make([]byte, 60), 5)}} {
		copy(sc.slots[0], hdr)
		if err := p.PlaceAfterHeaderIn(sc.slots[0], 54, pay, sc, &plan); err != nil {
			t.Fatal(err)
		}
		check(t, &plan, append([][]byte{hdr}, pay...), sc, 16)
		for i := plan.N; i < MaxSegs; i++ {
			if plan.Segs[i].Data != nil || plan.Segs[i].Copied {
				t.Fatalf("%d-byte payload: segment %d of %d still set", len(pay[0]), i, plan.N)
			}
		}
	}
}
