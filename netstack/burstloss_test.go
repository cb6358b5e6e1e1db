package netstack_test

import (
	"flag"
	"sync/atomic"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"

	"github.com/tamanic/tamanic/fec/fectest"
)

var burstReport = flag.Bool("burstloss", false, "run TestBurstLossRecovery, the campaign's stall reproducer")

// burstLoss sends 8 MiB from a to b over the ENET model, dropping burst
// consecutive data frames once, after 2000 frames: what an RX ring that
// overflowed for a moment does (the campaign's slow transfers had 14 to 76
// frames lost with no descriptor). It returns the sender's retransmission
// timeouts and retransmitted segments.
func burstLoss(t *testing.T, sack, both bool, burst int) (timeouts, retrans uint64) {
	t.Helper()
	a, b, w := pair(t, hostOptions{mode: modes[0], noTrace: true})
	for _, h := range []*host{a, b} {
		opt := tcpip.TCPSACKEnabled(sack)
		if err := h.s.SetTransportProtocolOption(tcp.ProtocolNumber, &opt); err != nil {
			t.Fatal(err)
		}
	}
	var k, dropped atomic.Int64
	w.SetFilter(func(from int, f []byte) fectest.Action {
		if from != 0 || len(f) < 1000 {
			return fectest.Pass
		}
		if i := k.Add(1); i > 2000 && i <= 2000+int64(burst) {
			dropped.Add(1)
			return fectest.Drop
		}
		return fectest.Pass
	})
	errc := make(chan error, 1)
	if both {
		go func() { errc <- transferWith(t, b, a, false, 5002, 8<<20, xfer{timeout: time.Minute}) }()
	} else {
		errc <- nil
	}
	if err := transferWith(t, a, b, false, 5001, 8<<20, xfer{timeout: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if dropped.Load() != int64(burst) {
		t.Fatalf("dropped %d frames, want %d", dropped.Load(), burst)
	}
	st := a.s.Stats().TCP
	return st.Timeouts.Value(), st.Retransmits.Value()
}

// TestBurstLossRecovery is the campaign's reproducer (issue 17): 60 data
// segments lost at once, one way or while the other direction carries a
// bulk transfer too, with SACK off (the firmware's setting) and on (gVisor's default). It
// checks every byte and logs the sender's retransmission timeouts; the
// watchdog logs both stacks' state if the transfer stops for 10 s. Run it
// with -burstloss: the stall it shows costs tens of seconds.
func TestBurstLossRecovery(t *testing.T) {
	if !*burstReport {
		t.Skip("the burst-loss reproducer runs with -burstloss")
	}
	const burst = 60
	for _, both := range []bool{false, true} {
		for _, sack := range []bool{false, true} {
			start := time.Now()
			to, re := burstLoss(t, sack, both, burst)
			t.Logf("%d segments lost at once, both directions %v, SACK %v: %d retransmission timeouts, %d retransmits, %v",
				burst, both, sack, to, re, time.Since(start).Round(time.Millisecond))
		}
	}
}

// TestGVisorBurstLossOnChannels is TestBurstLossRecovery on gVisor's own
// channel endpoints (no Ethernet, no driver, no endpoint of ours, nothing
// lost but the burst): the same 60 segments dropped once, with a bulk
// transfer the other way, SACK off and on.
func TestGVisorBurstLossOnChannels(t *testing.T) {
	if !*burstReport {
		t.Skip("the burst-loss reproducer runs with -burstloss")
	}
	for _, both := range []bool{false, true} {
		for _, sack := range []bool{false, true} {
			var k, dropped atomic.Int64
			a, b := channelPair(t, func(from int, p []byte) bool {
				if from != 0 || len(p) < 1000 {
					return false
				}
				if i := k.Add(1); i > 2000 && i <= 2060 {
					dropped.Add(1)
					return true
				}
				return false
			})
			for _, h := range []*host{a, b} {
				opt := tcpip.TCPSACKEnabled(sack)
				h.s.SetTransportProtocolOption(tcp.ProtocolNumber, &opt)
			}
			start := time.Now()
			errc := make(chan error, 1)
			if both {
				go func() { errc <- transferWith(t, b, a, false, 5002, 8<<20, xfer{timeout: time.Minute}) }()
			} else {
				errc <- nil
			}
			err := transferWith(t, a, b, false, 5001, 8<<20, xfer{timeout: time.Minute})
			if e := <-errc; err == nil {
				err = e
			}
			st := a.s.Stats().TCP
			t.Logf("channels, %d segments lost at once, both directions %v, SACK %v: %v; %d retransmission timeouts, %d retransmits, %v",
				dropped.Load(), both, sack, err, st.Timeouts.Value(), st.Retransmits.Value(), time.Since(start).Round(time.Millisecond))
		}
	}
}
