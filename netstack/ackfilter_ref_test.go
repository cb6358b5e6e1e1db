package netstack

import (
	"math/rand"
	"testing"
)

// refFilterACKs is the filter's definition, compared pair by pair: a
// frame is dropped when a later pure ACK of its connection in the batch
// acknowledges strictly more and passed its checksums.
func refFilterACKs(batch []Frame, bad map[int]bool) []bool {
	cls := make([]pureACK, len(batch))
	for i, f := range batch {
		cls[i] = classifyACK(f.Bytes())
	}
	drop := make([]bool, len(batch))
	for i := range batch {
		if !cls[i].ok {
			continue
		}
		for j := i + 1; j < len(batch); j++ {
			if cls[j].ok && cls[j].key == cls[i].key && seqAfter(cls[j].ack, cls[i].ack) && !bad[j] {
				drop[i] = true
				break
			}
		}
	}
	return drop
}

// TestFilterACKsMatchesDefinition checks the one-look-up filter against
// the pairwise definition on random batches: up to twelve connections
// (more than maxBest), acknowledgement numbers that go back, repeat and
// wrap around zero, ACKs with bad checksums, and frames that are not pure
// ACKs; and that each frame's checksums are asked about at most once, and
// only for pure ACKs.
func TestFilterACKsMatchesDefinition(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for iter := 0; iter < 3000; iter++ {
		n := 1 + rng.Intn(64)
		conns := 1 + rng.Intn(12)
		base := rng.Uint32()
		if iter%3 == 0 {
			base = 0xFFFFFFFF - uint32(rng.Intn(3000)) // wraps within the batch
		}
		batch := make([]Frame, n)
		bad := map[int]bool{}
		for i := range batch {
			c := rng.Intn(conns)
			s := seg{sport: uint16(1000 + c), dport: 80, ack: base + uint32(rng.Intn(4000)) - 1000, flags: 0x10}
			switch r := rng.Intn(20); {
			case r == 0:
				s.data = 10 // not a pure ACK
			case r == 1:
				s.badCsum = true
				bad[i] = true
			case r == 2:
				s.v6 = true
			case r < 8:
				s.opts = tsOpt
			}
			batch[i] = &testFrame{b: ackFrame(s)}
		}
		want := refFilterACKs(batch, bad)
		slots := make([]ackSlot, n)
		asked := map[Frame]int{}
		idx := map[Frame]int{}
		for i, f := range batch {
			idx[f] = i
		}
		got := filterACKs(batch, slots, func(f Frame) bool {
			asked[f]++
			if !slots[idx[f]].ok {
				t.Fatalf("checksums asked of frame %d, not a pure ACK", idx[f])
			}
			return !bad[idx[f]]
		})
		nwant := 0
		for i := range batch {
			if slots[i].drop != want[i] {
				t.Fatalf("iteration %d, frame %d of %d (%d connections): drop %v, the definition says %v", iter, i, n, conns, slots[i].drop, want[i])
			}
			if want[i] {
				nwant++
			}
		}
		if got != nwant {
			t.Fatalf("iteration %d: reported %d drops, marked %d", iter, got, nwant)
		}
		for f, c := range asked {
			if c > 1 {
				t.Fatalf("checksums of frame %d asked %d times", idx[f], c)
			}
		}
	}
}

// BenchmarkFilterACKs is one receive batch of the sg+tso guest->host
// transfer: 45 pure ACKs of one connection with timestamps.
func BenchmarkFilterACKs(b *testing.B) {
	batch := make([]Frame, 45)
	for i := range batch {
		batch[i] = &testFrame{b: ackFrame(seg{sport: 1000, dport: 80, ack: uint32(1 + 1448*i), flags: 0x10, opts: tsOpt})}
	}
	slots := make([]ackSlot, len(batch))
	trusted := func(Frame) bool { return true }
	b.ReportAllocs()
	for b.Loop() {
		filterACKs(batch, slots, trusted)
	}
}
