package netstack_test

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/tamanic/tamanic/fec/fectest"
	"github.com/tamanic/tamanic/netstack"
	"github.com/tamanic/tamanic/tso"
)

// failingDevice is a NIC that has stopped: every Receive fails, and it
// always says frames may be waiting.
type failingDevice struct {
	calls atomic.Int64
	ready chan struct{}
}

var errDeviceClosed = errors.New("failingDevice: closed")

func (d *failingDevice) Info() netstack.DeviceInfo {
	return netstack.DeviceInfo{MAC: [6]byte{2, 0, 0, 0, 0, 7}, MaxFrame: 1518}
}
func (d *failingDevice) SetTxDone(func(any, error))         {}
func (d *failingDevice) Transmit([][]byte, bool, any) error { return errDeviceClosed }
func (d *failingDevice) Full(error) bool                    { return false }
func (d *failingDevice) RxReady() <-chan struct{}           { return d.ready }
func (d *failingDevice) Poll()                              {}
func (d *failingDevice) Close() error                       { return nil }
func (d *failingDevice) Receive() (netstack.Frame, error) {
	d.calls.Add(1)
	return nil, errDeviceClosed
}
func (d *failingDevice) TransmitGSO([]byte, [][]byte, tso.Options, any) error { return errDeviceClosed }

// A device whose Receive fails forever (a closed NIC) made the receive
// goroutine spin: 5.8 million calls in 200 ms, and the stop signal was
// never looked at while it did. Errors end the batch and the loop backs
// off, so it makes a bounded number of calls, and it still stops.
func TestReceiveLoopBacksOffOnPersistentErrors(t *testing.T) {
	dev := &failingDevice{ready: make(chan struct{})}
	close(dev.ready) // always "ready"
	ep, err := netstack.New(netstack.Options{Device: dev})
	if err != nil {
		t.Fatal(err)
	}
	s := stack.New(stack.Options{NetworkProtocols: []stack.NetworkProtocolFactory{ipv4.NewProtocol}})
	if err := s.CreateNIC(1, ep); err != nil {
		t.Fatal(err)
	}
	for dev.calls.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	// Eight calls, then backing off from 100 µs to 10 ms, make about 35
	// calls in 200 ms; a thousand allows for any scheduler. Spinning made
	// hundreds of thousands.
	if n := dev.calls.Load(); n > 1000 {
		t.Fatalf("%d Receive calls in 200 ms on a failing device: the receive loop spins", n)
	}
	done := make(chan struct{})
	go func() { s.RemoveNIC(1); ep.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the receive goroutine did not stop")
	}
	s.Close()
	if st := ep.Stats(); st.RxNICErrors == 0 {
		t.Fatal("errors were not counted")
	}
}

// SetLinkAddress wrote the address the receive path reads for every frame,
// without a lock: a data race (run under -race, as make test does).
func TestSetLinkAddressWhileReceiving(t *testing.T) {
	h := newHost(t, 1, hostOptions{mode: modes[0], noTrace: true})
	defer h.close()
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
	mac := h.rig.Model.MAC()
	for h.ep.Stats().RxPackets < 20 {
		time.Sleep(time.Millisecond)
	}
	for i := 0; i < 200; i++ {
		h.ep.SetLinkAddress(tcpip.LinkAddress(mac[:]))
		if i%20 == 0 {
			time.Sleep(time.Millisecond) // let frames through in between
		}
	}
	stop.Store(true)
	wg.Wait()
	if got := h.ep.LinkAddress(); got != tcpip.LinkAddress(mac[:]) {
		t.Fatalf("link address %v", got)
	}
}
