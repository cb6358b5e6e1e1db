package netstack_test

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/network/arp"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"

	"github.com/tamanic/tamanic/netstack"
	"github.com/tamanic/tamanic/tso"
)

// floodDevice always has a frame waiting: a TCP SYN to a closed port, which
// gVisor answers with a reset (looking up a route under the stack's lock).
// Transmits complete at once. After Close it fails every call, and counts
// the receive calls that still came.
type floodDevice struct {
	syn      []byte
	ready    chan struct{}
	txDone   func(any, error)
	closed   atomic.Bool
	late     atomic.Int64 // Receive calls after Close
	received atomic.Int64
}

var errFloodClosed = errors.New("floodDevice: closed")

func (d *floodDevice) Info() netstack.DeviceInfo {
	return netstack.DeviceInfo{MAC: padHostMAC, MaxFrame: 1518}
}
func (d *floodDevice) SetTxDone(f func(any, error)) { d.txDone = f }
func (d *floodDevice) Full(error) bool              { return false }
func (d *floodDevice) RxReady() <-chan struct{}     { return d.ready }
func (d *floodDevice) Poll()                        {}
func (d *floodDevice) Close() error                 { d.closed.Store(true); return nil }
func (d *floodDevice) Transmit(_ [][]byte, _ bool, cookie any) error {
	if d.closed.Load() {
		return errFloodClosed
	}
	d.txDone(cookie, nil)
	return nil
}
func (d *floodDevice) TransmitGSO([]byte, [][]byte, tso.Options, any) error {
	return errors.New("floodDevice: no GSO")
}
func (d *floodDevice) Receive() (netstack.Frame, error) {
	if d.closed.Load() {
		d.late.Add(1)
		return nil, errFloodClosed
	}
	d.received.Add(1)
	return scriptFrame(d.syn), nil
}

// Stack.Wait calls each NIC's link endpoint's Wait with the stack's lock
// held (after RemoveNIC's Attach(nil), before the endpoint's Close, which
// it defers until the lock is released). A receive goroutine in the middle
// of a batch needs that lock to send the reset a SYN to a closed port
// draws, so a Wait that waits for it never returns: Stack.Close then
// Stack.Wait while frames arrive deadlocked (Wait had not returned in 5 s).
// Each round floods a fresh stack and tears it down one of three ways
// (Close+Wait as Stack.Destroy does, Close+RemoveNIC+Wait, RemoveNIC+
// Close+Wait); every teardown must return, and once it has, the endpoint's
// receive goroutine must be gone (the device sees no receive after Close).
func TestStackCloseWaitUnderReceiveFlood(t *testing.T) {
	rounds := 100
	if testing.Short() {
		rounds = 20
	}
	syn := tcpFrame(1000, 0, header.TCPFlagSyn, nil, nil)
	for i := 0; i < rounds; i++ {
		for _, gro := range []bool{false, true} {
			ready := make(chan struct{})
			close(ready) // always ready: a flood
			dev := &floodDevice{syn: syn, ready: ready}
			ep, err := netstack.New(netstack.Options{Device: dev, GRO: gro})
			if err != nil {
				t.Fatal(err)
			}
			s := stack.New(stack.Options{
				NetworkProtocols:   []stack.NetworkProtocolFactory{ipv4.NewProtocol, arp.NewProtocol},
				TransportProtocols: []stack.TransportProtocolFactory{tcp.NewProtocol, udp.NewProtocol},
			})
			if err := s.CreateNIC(1, ep); err != nil {
				t.Fatal(err)
			}
			if err := s.AddProtocolAddress(1, tcpip.ProtocolAddress{Protocol: ipv4.ProtocolNumber,
				AddressWithPrefix: tcpip.AddressWithPrefix{Address: padHostAddr, PrefixLen: 24}}, stack.AddressProperties{}); err != nil {
				t.Fatal(err)
			}
			s.SetRouteTable([]tcpip.Route{{Destination: header.IPv4EmptySubnet, NIC: 1}})
			if err := s.AddStaticNeighbor(1, ipv4.ProtocolNumber, padPeerAddr, tcpip.LinkAddress(padPeerMAC[:])); err != nil {
				t.Fatal(err)
			}
			for dev.received.Load() < 100 { // the receive goroutine is busy
				time.Sleep(100 * time.Microsecond)
			}
			done := make(chan struct{})
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				switch i % 3 {
				case 0:
					s.Close()
					s.Wait()
				case 1:
					s.Close()
					s.RemoveNIC(1)
					s.Wait()
				case 2:
					s.RemoveNIC(1)
					s.Close()
					s.Wait()
				}
				close(done)
			}()
			select {
			case <-done:
			case <-time.After(20 * time.Second):
				// Only a failed run waits this long; a deadlock never ends.
				t.Fatalf("round %d (gro %v): the stack's teardown did not return while frames arrived (endpoint %+v)", i, gro, ep.Stats())
			}
			wg.Wait()
			if !dev.closed.Load() {
				t.Fatalf("round %d: the device was not closed", i)
			}
			if n := dev.late.Load(); n != 0 {
				t.Fatalf("round %d: the receive goroutine called Receive %d times after Close", i, n)
			}
			if st := ep.Stats(); st.TxHeld != 0 {
				t.Fatalf("round %d: %d packets still held", i, st.TxHeld)
			}
		}
	}
}
