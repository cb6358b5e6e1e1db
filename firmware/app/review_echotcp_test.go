package app

import (
	"sync/atomic"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
)

// echoServerConn returns the server's side of the TCP echo's only place.
func echoServerConn(t *testing.T, r *limitsRig) *tcpConn {
	t.Helper()
	sv := &r.srv.svc.tcpEcho
	var c *tcpConn
	eventually(t, "one TCP echo place", func() bool {
		sv.mu.Lock()
		defer sv.mu.Unlock()
		for pl := range sv.places {
			c, _ = pl.conn.(*tcpConn)
		}
		return len(sv.places) == 1 && c != nil
	})
	return c
}

// TestReviewTCPEchoReceiveBufferBounded: Budget counts each echo place at
// echoBufferSize (16 KiB) of receive buffer, set on the listener. gVisor
// copies it into an accepted endpoint with notify=false (accept.go,
// createConnectingEndpoint: SetReceiveBufferSize(l.rcvWnd, false)), so
// OnSetReceiveBufferSize never sets RcvAutoParams.Disabled, and the
// stack's TCP protocol moderates receive buffers by default
// (moderateReceiveBuffer: true). The echo copies out everything it
// receives, so ModerateRecvBuf grows its buffer towards the stack's
// maximum (TCPReceiveBufferSize, 512 KiB). A peer that sends fast while
// reading, then stops reading and keeps sending, makes the place hold that
// much unread, past the budget's 16 KiB.
func TestReviewTCPEchoReceiveBufferBounded(t *testing.T) {
	r := newLimitsRig(t, Limits{})
	c := r.dial(t, EchoPort)
	s := echoServerConn(t, r)
	var reading atomic.Bool
	reading.Store(true)
	go func() {
		b := make([]byte, 64<<10)
		for reading.Load() {
			c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
			c.Read(b)
		}
	}()
	go func() {
		b := make([]byte, 64<<10)
		for {
			c.SetWriteDeadline(time.Now().Add(10 * time.Second))
			if _, err := c.Write(b); err != nil {
				return
			}
		}
	}()
	time.Sleep(2 * time.Second) // a fast exchange: the server copies out
	reading.Store(false)
	time.Sleep(2 * time.Second) // the client stops reading, keeps sending
	sz := s.ep.SocketOptions().GetReceiveBufferSize()
	q, terr := s.ep.GetSockOptInt(tcpip.ReceiveQueueSizeOption)
	if terr != nil {
		t.Fatal(terr)
	}
	if sz > echoBufferSize || q > echoBufferSize {
		t.Fatalf("TCP echo connection: receive buffer %d KiB, %d KiB held unread; Budget counts %d KiB",
			sz>>10, q>>10, echoBufferSize>>10)
	}
}
