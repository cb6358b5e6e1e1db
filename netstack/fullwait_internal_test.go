package netstack

import (
	"errors"
	"sync"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/tamanic/tamanic/tso"
)

var errRingFull = errors.New("fullDevice: ring full")

// fullDevice has a ring of one frame: Transmit is refused as full while a
// frame is queued, and complete finishes the queued one.
type fullDevice struct {
	mu     sync.Mutex
	queued any
	sent   int
	tries  int
	done   func(any, error)
}

func (d *fullDevice) Info() DeviceInfo {
	return DeviceInfo{MAC: [6]byte{2, 0, 0, 0, 0, 1}, MaxFrame: 1518}
}
func (d *fullDevice) SetTxDone(f func(any, error)) { d.done = f }
func (d *fullDevice) Full(err error) bool          { return errors.Is(err, errRingFull) }
func (d *fullDevice) Receive() (Frame, error)      { return nil, nil }
func (d *fullDevice) RxReady() <-chan struct{}     { return nil }
func (d *fullDevice) Poll()                        {}
func (d *fullDevice) Close() error                 { return nil }
func (d *fullDevice) TransmitGSO([]byte, [][]byte, tso.Options, any) error {
	return errors.New("unused")
}
func (d *fullDevice) Transmit(_ [][]byte, _ bool, cookie any) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.tries++
	if d.queued != nil {
		return errRingFull
	}
	d.queued = cookie
	d.sent++
	return nil
}

func (d *fullDevice) complete() {
	d.mu.Lock()
	c := d.queued
	d.queued = nil
	d.mu.Unlock()
	if c != nil {
		d.done(c, nil)
	}
}

func framePackets(n int) stack.PacketBufferList {
	var l stack.PacketBufferList
	for i := 0; i < n; i++ {
		l.PushBack(stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buffer.MakeWithData(make([]byte, 60))}))
	}
	return l
}

// TestFullRingWaitsForACompletion: a packet refused by a full ring is
// offered again when a completion frees the ring (within fullWait) instead
// of being refused to gVisor, which would drop it; the refusal is still
// counted. With nothing in flight no completion can come, and the refusal
// is immediate.
func TestFullRingWaitsForACompletion(t *testing.T) {
	dev := &fullDevice{}
	e, err := New(Options{Device: dev})
	if err != nil {
		t.Fatal(err)
	}
	l := framePackets(2)
	go func() {
		time.Sleep(5 * time.Millisecond)
		dev.complete()
	}()
	if n, err := e.WritePackets(l); n != 2 || err != nil {
		t.Fatalf("WritePackets: %d sent, %v; want both, the second after the first completed", n, err)
	}
	if st := e.Stats(); st.TxRingFull == 0 || st.TxPackets != 2 {
		t.Fatalf("stats %+v: want the refusal counted and both packets sent", st)
	}
	l.DecRef()

	// The second packet is still queued and nobody completes it: the next
	// one is refused after fullWait.
	l = framePackets(1)
	t0 := time.Now()
	if n, err := e.WritePackets(l); n != 0 || err == nil {
		t.Fatalf("WritePackets on a ring that never frees: %d sent, %v", n, err)
	} else if _, ok := err.(*tcpip.ErrNoBufferSpace); !ok {
		t.Fatalf("error %v, want ErrNoBufferSpace", err)
	}
	if d := time.Since(t0); d < fullWait {
		t.Fatalf("refused after %v, before fullWait", d)
	}
	dev.complete()
	if h := e.Stats().TxHeld; h != 0 {
		t.Fatalf("%d packets still held", h)
	}
	l.DecRef()

	// Nothing in flight: refused at once.
	dev.mu.Lock()
	dev.queued = "not the endpoint's"
	dev.mu.Unlock()
	l = framePackets(1)
	t0 = time.Now()
	if n, _ := e.WritePackets(l); n != 0 {
		t.Fatal("a packet was sent on a full ring")
	}
	if d := time.Since(t0); d >= fullWait {
		t.Fatalf("waited %v with nothing of the endpoint's in flight", d)
	}
	l.DecRef()
}
