package netstack_test

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tamanic/tamanic/fec"
	"github.com/tamanic/tamanic/fec/fectest"
	"github.com/tamanic/tamanic/internal/pkttest"
)

// bulk is the per-direction TCP transfer size: 64 MiB, or 4 MiB under the
// race detector (which runs about 20 times slower); -short cuts it too.
func bulk() int64 {
	if raceEnabled || testing.Short() {
		return 4 << 20
	}
	return 64 << 20
}

// wireCheck verifies every frame on the wire with gopacket: it decodes,
// fits the MTU plus the Ethernet header, and carries valid IPv4 header and
// TCP/UDP checksums (UDP fragments excepted: their checksum covers the
// reassembled datagram).
type wireCheck struct {
	mu      sync.Mutex
	frames  int
	tooBig  int
	bad     []string
	maxSize int
}

func (c *wireCheck) filter(_ int, f []byte) fectest.Action {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.frames++
	c.maxSize = max(c.maxSize, len(f))
	if len(f) > 1514 {
		c.tooBig++
	}
	if err := pkttest.Checksums(f); err != nil && len(c.bad) < 5 {
		c.bad = append(c.bad, err.Error())
	}
	return fectest.Pass
}

// counts returns the frames seen and the largest one.
func (c *wireCheck) counts() (frames, largest int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.frames, c.maxSize
}

func (c *wireCheck) verify(t testing.TB) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.tooBig > 0 || len(c.bad) > 0 {
		t.Fatalf("%d of %d frames over 1514 bytes (max %d); bad checksums: %v", c.tooBig, c.frames, c.maxSize, c.bad)
	}
}

// drained waits until no host holds packet references or DMA mappings for
// TX. Both must reach zero together: the stacks are still running, and a
// late ACK sent between two readings is mapped while it is held, so a
// mapping seen once is a leak only if it outlives the deadline.
func drained(t testing.TB, hs ...*host) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for _, h := range hs {
		for {
			held := h.ep.Stats().TxHeld
			live := h.rig.Mem.LiveMappings()
			if held == 0 && len(live) == 0 {
				break
			}
			if time.Now().After(deadline) {
				if held != 0 {
					t.Fatalf("%d TX packets still held: %s", held, h.rig.NIC.DumpTx())
				}
				t.Fatalf("DMA mappings leaked: %v", live[:min(3, len(live))])
			}
			h.rig.NIC.Reclaim()
			time.Sleep(time.Millisecond)
		}
	}
}

func TestTCPBothWaysEveryModeIPv4AndIPv6(t *testing.T) {
	n := bulk()
	for _, m := range modes {
		for _, v6 := range []bool{false, true} {
			name := fmt.Sprintf("%s/ipv4", m.name)
			if v6 {
				name = fmt.Sprintf("%s/ipv6", m.name)
			}
			t.Run(name, func(t *testing.T) {
				a, b, w := pair(t, hostOptions{mode: m, noTrace: true})
				wc := &wireCheck{}
				w.SetFilter(wc.filter)
				start := time.Now()
				var wg sync.WaitGroup
				errs := make([]error, 2)
				wg.Add(2)
				go func() { defer wg.Done(); errs[0] = transfer(t, a, b, v6, 5001, n) }()
				go func() { defer wg.Done(); errs[1] = transfer(t, b, a, v6, 5002, n) }()
				wg.Wait()
				if err := errors.Join(errs...); err != nil {
					t.Fatal(err)
				}
				el := time.Since(start)
				wc.verify(t)
				drained(t, a, b)
				sa := a.ep.Stats()
				if m.tso && sa.TxGSOPackets == 0 {
					t.Fatal("TSO mode sent no GSO packets")
				}
				if !m.tso && sa.TxGSOPackets != 0 {
					t.Fatal("GSO packets without TSO")
				}
				frames, largest := wc.counts()
				t.Logf("RX frames with no descriptor: a %d, b %d", a.rig.Model.Stats().RxNoDescriptor, b.rig.Model.Stats().RxNoDescriptor)
				t.Logf("%d MiB each way in %v (%.0f Mbit/s per direction); %d frames on the wire, largest %d; a sent %d packets (%d GSO)",
					n>>20, el.Round(time.Millisecond), float64(n*8)/el.Seconds()/1e6, frames, largest, sa.TxPackets, sa.TxGSOPackets)
			})
		}
	}
}

func TestTCPSurvivesLossDuplicationAndReordering(t *testing.T) {
	for _, m := range []mode{modes[1], modes[3], modes[4], modes[5]} {
		t.Run(m.name, func(t *testing.T) {
			a, b, w := pair(t, hostOptions{mode: m})
			var k atomic.Int64
			var drops, dups, delays atomic.Int64
			w.SetFilter(func(_ int, f []byte) fectest.Action {
				switch i := k.Add(1); {
				case i%97 == 0:
					drops.Add(1)
					return fectest.Drop
				case i%89 == 0:
					dups.Add(1)
					return fectest.Duplicate
				case i%83 == 0:
					delays.Add(1)
					return fectest.Delay
				}
				return fectest.Pass
			})
			for _, v6 := range []bool{false, true} {
				if err := transfer(t, a, b, v6, 6001, 2<<20); err != nil {
					t.Fatal(err)
				}
			}
			if drops.Load() == 0 || dups.Load() == 0 || delays.Load() == 0 {
				t.Fatalf("faults not injected: %d %d %d", drops.Load(), dups.Load(), delays.Load())
			}
			drained(t, a, b)
		})
	}
}

func TestFullTXRingAppliesBackPressureAndLosesNothing(t *testing.T) {
	// A 64-descriptor ring fits one 64 KiB TSO packet at most: the ring is
	// full constantly and every byte must still be delivered.
	a, b, _ := pair(t, hostOptions{mode: modes[2], txRing: 64})
	// Hold a's uDMA off for 2 ms in every 3 (as PAUSE frames would), so
	// descriptors pile up, then let it run again with a kick.
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			a.rig.Model.SetFaults(fectest.Faults{TxStalled: true})
			select {
			case <-stop:
			case <-time.After(2 * time.Millisecond):
			}
			a.rig.Model.SetFaults(fectest.Faults{})
			a.rig.Model.Write32(fec.ENETx_TDAR, fec.DAR_ACTIVE)
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	err := transfer(t, a, b, false, 7001, 8<<20)
	close(stop)
	<-done
	if err != nil {
		t.Fatal(err)
	}
	st := a.ep.Stats()
	if st.TxRingFull == 0 {
		t.Fatal("the ring never filled: the test shows nothing")
	}
	// A refused packet is offered again as completions free the ring
	// (retryFull), for up to 100 ms: with the uDMA held off 2 ms at a time
	// it must go out, not be dropped into TCP's loss recovery. Without the
	// retry every refusal is a drop (23-37 of 23-37 here, and 177-303
	// retransmissions); a drop with it means the host starved the test for
	// 100 ms, so a few are tolerated.
	ts := a.s.Stats().TCP
	dropped := a.s.Stats().NICs.TxPacketsDroppedNoBufferSpace.Value()
	t.Logf("ring full %d times; dropped sends %d; TCP timeouts %d, retransmits %d, fast recoveries %d",
		st.TxRingFull, dropped, ts.Timeouts.Value(), ts.Retransmits.Value(), ts.FastRecovery.Value())
	if dropped*10 > uint64(st.TxRingFull) {
		t.Errorf("%d of %d refused sends dropped: the full ring was not waited out", dropped, st.TxRingFull)
	}
	drained(t, a, b)
}
