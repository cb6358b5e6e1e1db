//go:build linux

package main

import (
	"bytes"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/tamanic/tamanic/connectx/connectxtest"
	"github.com/tamanic/tamanic/dma/dmatest"
)

// TestStalledPeer: a wire peer that connects and then never reads must not
// stop the card. The driver sends 64 MiB of full-size frames at it, far
// more than the loopback socket buffers hold, then asks the card a command
// (QUERY_VPORT_STATE, Check); both complete, and the frames the stalled
// wire could not take are counted as dropped, not lost silently. The
// bound only catches a hang.
func TestStalledPeer(t *testing.T) {
	mem := dmatest.New(t, dmatest.Options{CoherentSize: 4 << 20, CachedSize: 8 << 20})
	rig := connectxtest.NewRig(t, connectxtest.RigOptions{Mem: mem, MAC: [6]byte{2, 0xC7, 0, 0, 0, 1}})
	s := &sim{out: io.Discard, model: rig.Model}
	rig.Model.SetPeer(s.send)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go s.accept(l)
	conn, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	// Closing the peer at the end frees a send that is blocked on it
	// (today's defect), so the test ends either way.
	defer conn.Close()
	waitFor(t, "peer", func() bool { return s.counters().Peers == 1 })

	frame := bytes.Repeat([]byte{0x5A}, 1514)
	copy(frame, []byte{2, 0, 0, 0, 0, 2, 2, 0xC7, 0, 0, 0, 1, 0x88, 0xB5})
	const frames = 64 << 20 / 1514
	done := make(chan error, 1)
	sent := make(chan int, 1)
	go func() {
		n := 0
		defer func() { sent <- n }()
		for n < frames {
			err := rig.NIC.Transmit([][]byte{frame}, false, nil)
			if rig.NIC.Full(err) {
				rig.NIC.Poll()
				rig.Completions()
				continue
			}
			if err != nil {
				done <- err
				return
			}
			n++
		}
		done <- rig.NIC.Check()
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("after %d frames: %v", <-sent, err)
		}
	case <-time.After(60 * time.Second):
		conn.Close()
		t.Fatalf("the card hung on a stalled wire peer after %d of %d frames; sim %+v", <-sent, frames, s.counters())
	}
	rig.NIC.Poll()
	rig.Completions()
	c := s.counters()
	if c.WireTxQueueFull == 0 || c.WireTx+c.WireTxQueueFull+c.WireTxErrors > frames || c.Violations != 0 {
		t.Fatalf("%d frames sent at a stalled peer: %+v", frames, c)
	}
	// The peer reads again: what was queued reaches it.
	var hdr [4]byte
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(conn, hdr[:]); err != nil && !errors.Is(err, io.EOF) {
		t.Fatalf("reading the wire again: %v", err)
	}
	t.Logf("%d frames: %+v", frames, c)
}
