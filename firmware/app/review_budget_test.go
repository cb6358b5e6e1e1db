package app

import (
	"io"
	"sync/atomic"
	"testing"
	"time"
)

// TestReviewOrphanSendBufferWithinBudget: Budget counts each placeless
// orphan (and each iperf3 place) at TCPSendBufferSize, 128 KiB ("each
// holds at most its 128 KiB send buffer", DefaultLimits.MaxOrphans). But
// gVisor auto-tunes the send buffer of every connection whose owner did
// not set SO_SNDBUF: updateSndBufferUsage (endpoint.go) sets
// computeTCPSendBufferSize's max(InitialCwnd, SndCwnd) × MSS × 2, capped
// only at the stack's maximum (GetTCPSendBufferLimits), which is
// sourceSendBuffer, 1 MiB (TestTCPBuffersBounded asserts it). tcpListener
// sets SO_SNDBUF only for the source (sndBuf > 0), so an iperf3 stream
// (port 6000 here is such a listener) that has run fast grows its send
// buffer past 128 KiB, queues that much under a zero window and keeps it
// as an orphan after Close: Budget undercounts each orphan and iperf3
// stream by up to 896 KiB (16 orphans and 32 streams: 42 MiB over a 176
// MiB budget the defaults already fill to 173 MiB). The places' part of
// the assumption predates da71b51; the orphans' term is new in it.
func TestReviewOrphanSendBufferWithinBudget(t *testing.T) {
	r := newLimitsRig(t, Limits{})
	ln, err := r.srv.listenTCP(6000)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	c := r.dial(t, 6000)
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	// A fast transfer (the client reads 32 MiB at once), then the client
	// stops reading and the server queues what it can.
	const fast = 32 << 20
	var written atomic.Int64
	// Deadlines only against a hang: the 32 MiB take seconds under the
	// race detector on a loaded machine, and a 5 s write deadline ended
	// the server's writes before the client had read them (the client
	// then timed out: seen with other tests running beside it).
	go func() {
		s.SetWriteDeadline(time.Now().Add(time.Minute))
		for {
			n, err := s.Write(Pattern)
			written.Add(int64(n))
			if err != nil {
				return
			}
		}
	}()
	c.SetReadDeadline(time.Now().Add(time.Minute))
	if _, err := io.CopyN(io.Discard, c, fast); err != nil {
		t.Fatal(err)
	}
	// Settle: the server fills its buffer against the stopped reader.
	prev := int64(-1)
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end) && written.Load() != prev; time.Sleep(100 * time.Millisecond) {
		prev = written.Load()
	}
	// What the server's stack holds, at least: written, less what the
	// client read and what its receive buffer (at most
	// TCPReceiveBufferSize: the client's stack is NewStack's) can hold.
	held := written.Load() - fast - TCPReceiveBufferSize
	s.Close() // an orphan now (no place), in the reaper's closing list
	sz := s.(*tcpConn).ep.SocketOptions().GetSendBufferSize()
	if sz > TCPSendBufferSize || held > TCPSendBufferSize {
		t.Fatalf("a connection without SO_SNDBUF: send buffer %d KiB, server holding at least %d KiB queued when closed (closing %+v); Budget counts %d KiB per orphan and iperf3 place",
			sz>>10, held>>10, r.srv.closeStats(), TCPSendBufferSize>>10)
	}
}
