package app

import (
	"errors"
	"net"
	"os"
	"time"
)

// The TCP echo (RFC 862, TCP port 7): what a peer sends on a connection
// is sent back, until the peer closes. It is the request/response
// service of the benchmarks (tamanic-bench -rr: one small request
// outstanding at a time, TCP_RR in netperf's terms). Its bounds:
//
//   - places: Limits.EchoMaxConns connections, shared between peers like
//     every TCP service's (places.go);
//   - time: a connection that moves no byte for Limits.IdleTimeout is
//     closed, and every connection is closed Limits.EchoLifetime after it
//     was accepted, however it trickles: the idle deadline alone is
//     renewed by every byte, so one byte a minute would hold a place for
//     ever;
//   - bytes: each connection has echoBufferSize of receive and of send
//     buffer (set on the listener and on each accepted connection) and
//     reads into an echoReadSize block, so a peer that sends and never
//     reads stops, once both buffers are full, on a closed window; its
//     write then times out like an idle read (budget.go counts the
//     buffers).
const (
	// echoBufferSize is each echo connection's receive and send buffer:
	// room for a few hundred small requests in flight, far more than a
	// request/response client keeps (one).
	echoBufferSize = 16 << 10
	// echoReadSize is the block each connection reads into and echoes.
	echoReadSize = 4 << 10
)

// serveTCPEcho echoes c until the peer closes it or a deadline passes:
// the idle timeout from the last byte moved, or the connection's
// lifetime, whichever is first.
func (s *Server) serveTCPEcho(c net.Conn) {
	defer c.Close()
	l := s.limits()
	end := time.Now().Add(l.EchoLifetime)
	sv := &s.svc.tcpEcho
	// deadline is the next deadline and whether it is the lifetime's.
	deadline := func() (time.Time, bool) {
		d := time.Now().Add(l.IdleTimeout)
		if !end.After(d) {
			return end, true
		}
		return d, false
	}
	timedOut := func(err error, life bool) {
		var ne net.Error
		if errors.Is(err, os.ErrDeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
			if life {
				sv.expired.Add(1)
			} else {
				sv.idleClosed.Add(1)
			}
			giveUp(c)
		}
	}
	buf := make([]byte, echoReadSize)
	rec := s.svc.tcpEchoBusy.recorder(s.Ctl)
	for {
		d, life := deadline()
		c.SetReadDeadline(d)
		n, err := c.Read(buf)
		if n > 0 {
			d, life := deadline()
			c.SetWriteDeadline(d)
			if _, werr := c.Write(buf[:n]); werr != nil {
				timedOut(werr, life)
				return
			}
			rec.answered()
		}
		if err != nil {
			timedOut(err, life)
			return
		}
	}
}
