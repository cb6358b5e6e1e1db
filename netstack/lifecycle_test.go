package netstack_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/tamanic/tamanic/fec/fectest"
)

// udpFrame is an IPv4 UDP frame with valid checksums from 10.0.0.9 to dst.
func udpFrame(dstMAC [6]byte, dst tcpip.Address, payload int) []byte {
	f := make([]byte, header.EthernetMinimumSize+header.IPv4MinimumSize+header.UDPMinimumSize+payload)
	header.Ethernet(f).Encode(&header.EthernetFields{SrcAddr: "\x02\x00\x00\x00\x00\x09",
		DstAddr: tcpip.LinkAddress(dstMAC[:]), Type: header.IPv4ProtocolNumber})
	src := tcpip.AddrFrom4([4]byte{10, 0, 0, 9})
	ip := header.IPv4(f[header.EthernetMinimumSize:])
	ip.Encode(&header.IPv4Fields{TotalLength: uint16(len(ip)), TTL: 64, Protocol: uint8(header.UDPProtocolNumber),
		SrcAddr: src, DstAddr: dst})
	ip.SetChecksum(^ip.CalculateChecksum())
	u := header.UDP(ip[header.IPv4MinimumSize:])
	u.Encode(&header.UDPFields{SrcPort: 9, DstPort: 9, Length: uint16(len(u))})
	for i := range u.Payload() {
		u.Payload()[i] = byte(i)
	}
	xsum := header.PseudoHeaderChecksum(header.UDPProtocolNumber, src, dst, uint16(len(u)))
	u.SetChecksum(^u.CalculateChecksum(checksum.Checksum(u.Payload(), xsum)))
	return f
}

// RemoveNIC calls Attach(nil) with the stack's lock held while the receive
// goroutine may be delivering a packet that needs that lock. The endpoint
// must not wait for its goroutine there (it did, and make test deadlocked in
// a test's cleanup).
func TestRemoveNICWhileReceivingDoesNotDeadlock(t *testing.T) {
	for _, m := range []mode{modes[0], modes[3]} {
		t.Run(m.name, func(t *testing.T) {
			for i := 0; i < 10; i++ {
				h := newHost(t, 1, hostOptions{mode: m, noTrace: true})
				f := udpFrame(h.rig.Model.MAC(), h.v4, 64)
				var stop atomic.Bool
				var wg sync.WaitGroup
				wg.Add(1)
				go func() {
					defer wg.Done()
					for !stop.Load() {
						h.rig.Model.Deliver(f, fectest.RxOK)
					}
				}()
				// Let the receive goroutine get busy delivering.
				for h.ep.Stats().RxPackets < 50 {
					time.Sleep(time.Millisecond)
				}
				done := make(chan struct{})
				go func() { h.close(); close(done) }()
				select {
				case <-done:
				case <-time.After(30 * time.Second):
					t.Fatalf("iteration %d: RemoveNIC did not return while frames were arriving", i)
				}
				stop.Store(true)
				wg.Wait()
			}
		})
	}
}
