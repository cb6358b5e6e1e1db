package netstack_test

import (
	"encoding/binary"
	"fmt"
	"sync"
	"testing"

	"github.com/tamanic/tamanic/fec/fectest"
	"github.com/tamanic/tamanic/internal/pkt"
)

// A data segment in every 64 is lost once on its way to a receiver that
// merges with GRO, over IPv4 and IPv6, without SACK (as the firmware runs).
// The sender must recover by fast retransmit, on the duplicate ACKs of the
// segments behind each hole: GRO must not fold them into one
// out-of-order segment, which draws one duplicate ACK and leaves the
// sender to its retransmission timeout (before groOrder: 4.4-9.9 s per
// 4 MiB in the stall campaign against 0.1-1.8 s without GRO).
func TestGROKeepsDuplicateACKsComing(t *testing.T) {
	for _, m := range modes {
		if !m.gro {
			continue
		}
		for _, v6 := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/v6=%v", m.name, v6), func(t *testing.T) {
				a, b, w := pair(t, hostOptions{mode: m, noTrace: true})
				var mu sync.Mutex
				seen, lost := 0, map[uint32]bool{}
				w.SetFilter(func(from int, f []byte) fectest.Action {
					if from != 0 {
						return fectest.Pass
					}
					proto, hdr, payload := l4(f)
					if proto != pkt.ProtoTCP || len(payload) == 0 {
						return fectest.Pass
					}
					seq := binary.BigEndian.Uint32(hdr[4:])
					mu.Lock()
					defer mu.Unlock()
					if seen++; seen%64 == 0 && !lost[seq] {
						lost[seq] = true
						return fectest.Drop
					}
					return fectest.Pass
				})
				if err := transfer(t, a, b, v6, 5001, 4<<20); err != nil {
					t.Fatal(err)
				}
				ts := a.s.Stats().TCP
				mu.Lock()
				n := len(lost)
				mu.Unlock()
				t.Logf("%d segments lost: sender timeouts %d, fast recoveries %d, retransmits %d; receiver bypassed GRO for %d",
					n, ts.Timeouts.Value(), ts.FastRecovery.Value(), ts.Retransmits.Value(), b.ep.Stats().RxGROBypass)
				if n < 20 {
					t.Fatalf("only %d segments lost: the test shows nothing", n)
				}
				if to := ts.Timeouts.Value(); to*4 > uint64(n) {
					t.Errorf("%d retransmission timeouts for %d lost segments: the losses were not recovered by duplicate ACKs", to, n)
				}
				drained(t, a, b)
			})
		}
	}
}
