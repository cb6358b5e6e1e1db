package app

import (
	"io"
	"testing"
)

// TestPatternCheckFindsTheChangedBytes: a sink transfer of the pattern
// with one 64-byte run changed, fed in pieces that cut through it, is
// recorded with that run's extent; an intact one counts as checked only.
func TestPatternCheckFindsTheChangedBytes(t *testing.T) {
	const n = 200 << 10
	data, err := io.ReadAll(PatternStream(n))
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{}
	for _, corrupt := range []bool{false, true} {
		b := append([]byte(nil), data...)
		if corrupt {
			for i := 70000; i < 70064; i++ {
				b[i] ^= 0x5A
			}
		}
		var pc patternCheck
		for off := 0; off < len(b); off += 1000 {
			pc.add(b[off:min(off+1000, len(b))])
		}
		s.recordPattern(&pc)
	}
	sp := s.sinkPattern
	want := PatternDiff{Bytes: n, First: 70000, Last: 70063, Count: 64}
	if sp.Checked != 2 || sp.Mismatched != 1 || len(sp.Recent) != 1 || sp.Recent[0] != want {
		t.Fatalf("sink pattern stats %+v, want 2 checked, 1 mismatched: %+v", sp, want)
	}
}
