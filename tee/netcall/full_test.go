package netcall_test

import (
	"bytes"
	"sync"
	"sync/atomic"
	"testing"

	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/tamanic/tamanic/fec"
	"github.com/tamanic/tamanic/fec/fectest"
	"github.com/tamanic/tamanic/netstack"
	"github.com/tamanic/tamanic/tee/netcall"
)

// onFull is a Caller that runs f after the n-th StatusFull answer (the
// Secure World's staging buffers coming back at a moment the test picks,
// not at a time).
type onFull struct {
	c     netcall.Caller
	n     int64
	f     func()
	fulls atomic.Int64
}

func (o *onFull) Call(op netcall.Op, r1, r2, r3 uint32) (netcall.Status, uint32) {
	st, v := o.c.Call(op, r1, r2, r3)
	if st == netcall.StatusFull && o.fulls.Add(1) == o.n {
		o.f()
	}
	return st, v
}

// rawFrame is a 60-byte non-IP frame (EtherType 0x88B5, local
// experimental) carrying its sequence number.
func rawFrame(seq byte) []byte {
	f := make([]byte, 60)
	copy(f, []byte{2, 0, 0, 0, 0, 9, 2, 0, 0, 0, 0, 1, 0x88, 0xb5})
	f[14] = seq
	return f
}

// TestFullIsRetried (issue 26 item 4): when the Secure World answers
// StatusFull because its staging buffers are all with the hardware, the
// endpoint neither drops the packet nor reports ErrNoBufferSpace while
// the buffers can still come back: the device holds the refused frame,
// so the endpoint sees a packet held and waits for its completion, and
// every frame reaches the wire, in order, once the TX path moves again.
// Before the device held it, the third WritePackets returned
// ErrNoBufferSpace at once (nothing held: netstack's retryFull gives up).
func TestFullIsRetried(t *testing.T) {
	sec := newSecureWith(t, 1, netcall.ServerConfig{SmallSlots: 2})
	var mu sync.Mutex
	var wire [][]byte
	sec.rig.Model.SetPeer(func(f []byte) {
		mu.Lock()
		wire = append(wire, f)
		mu.Unlock()
	})
	sec.rig.Model.SetFaults(fectest.Faults{TxStalled: true})
	// The staging buffers come back after the second Full answer: the
	// first is the third frame's (held by the device), the second the
	// fourth frame's retry of it.
	c := &onFull{c: netcall.Direct{S: sec.srv}, n: 2, f: func() {
		sec.rig.Model.SetFaults(fectest.Faults{})
		sec.rig.Model.Write32(fec.ENETx_TDAR, fec.DAR_ACTIVE)
	}}
	dev, err := netcall.NewDevice(c, sec.region)
	if err != nil {
		t.Fatal(err)
	}
	ep, err := netstack.New(netstack.Options{Device: dev})
	if err != nil {
		t.Fatal(err)
	}
	defer ep.Close()
	const frames = 6
	for i := range frames {
		var l stack.PacketBufferList
		l.PushBack(stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buffer.MakeWithData(rawFrame(byte(i)))}))
		n, terr := ep.WritePackets(l)
		l.Reset()
		if n != 1 || terr != nil {
			t.Fatalf("frame %d: WritePackets = %d, %v (staging full, buffers coming back: must be retried)\ndevice %+v\nserver %+v",
				i, n, terr, dev.Stats(), sec.srv.Stats())
		}
	}
	sec.rig.NIC.Reclaim()
	mu.Lock()
	got := len(wire)
	for i, f := range wire {
		if !bytes.Equal(f[:60], rawFrame(byte(i))) {
			t.Errorf("wire frame %d is frame %d", i, f[14])
		}
	}
	mu.Unlock()
	if got != frames {
		t.Errorf("%d frames on the wire, want %d", got, frames)
	}
	ds, st := dev.Stats(), ep.Stats()
	if ds.Held != 1 || ds.Full != 2 || ds.Retried < 2 {
		t.Errorf("device counters %+v: want 1 held, 2 Full answers, the held frame retried", ds)
	}
	if st.TxHeld != 0 || st.TxPackets != frames || st.TxErrors != 0 {
		t.Errorf("endpoint after the retries: %d held, %d sent, %d errors", st.TxHeld, st.TxPackets, st.TxErrors)
	}
}

// TestWaitEndsWhenStagingComesBack: after a StatusFull answer, the idle
// wait (OpWait) ends with WaitFreed when a staging buffer comes back, so
// the Normal World retries the transmission it holds instead of sleeping
// out the wait; the device reports the wake-up. Before, the wait ran its
// full time and answered 0.
func TestWaitEndsWhenStagingComesBack(t *testing.T) {
	sec := newSecureWith(t, 1, netcall.ServerConfig{SmallSlots: 1})
	sec.rig.Model.SetPeer(func([]byte) {})
	sec.rig.Model.SetFaults(fectest.Faults{TxStalled: true})
	dev, err := netcall.NewDevice(netcall.Direct{S: sec.srv}, sec.region)
	if err != nil {
		t.Fatal(err)
	}
	var done []any
	dev.SetTxDone(func(c any, err error) {
		if err != nil {
			t.Errorf("completion %v: %v", c, err)
		}
		done = append(done, c)
	})
	for i := range 2 {
		if err := dev.Transmit([][]byte{rawFrame(byte(i))}, false, i); err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
	}
	if len(done) != 1 || dev.Stats().Held != 1 {
		t.Fatalf("after a Full answer: %d completions, device %+v", len(done), dev.Stats())
	}
	// The hardware moves; its completion interrupt hands the buffer back
	// while the Normal World waits.
	go func() {
		sec.rig.Model.SetFaults(fectest.Faults{})
		sec.rig.Model.Write32(fec.ENETx_TDAR, fec.DAR_ACTIVE)
	}()
	// A wait ends after MaxWaitMicros (100 ms) whatever happens: on a
	// loaded machine the goroutine above may not have run by then (seen
	// once); and the completion's interrupt also signals the receive side,
	// so a wait may end WaitRx first (3 runs in 40 under -race), after
	// which the Normal World waits again. Wait until the freed signal.
	st, v := netcall.StatusOK, uint32(0)
	for try := 0; try < 50 && st == netcall.StatusOK && v != netcall.WaitFreed; try++ {
		st, v = (netcall.Direct{S: sec.srv}).Call(netcall.OpWait, netcall.MaxWaitMicros, 0, 0)
	}
	if st != netcall.StatusOK || v != netcall.WaitFreed {
		t.Fatalf("wait with a staging buffer coming back: %v %d, want WaitFreed", st, v)
	}
	dev.Poll() // what the wake-up leads to: the held frame is retried
	if len(done) != 2 || done[1] != 1 {
		t.Fatalf("completions after the retry: %v", done)
	}
	if st := sec.srv.Stats(); st.WaitFreed != 1 || st.TxFrames != 2 {
		t.Errorf("server %+v", st)
	}
}
