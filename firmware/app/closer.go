package app

import (
	"net"
	"sync"
	"sync/atomic"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
)

// What a closed TCP connection keeps holding, and how the firmware bounds
// it.
//
// gVisor closes a connection as Linux does: Close queues a FIN behind the
// bytes not yet delivered and returns; the endpoint goes on sending on its
// own (an orphan) and, when it closed first, then waits in TIME-WAIT for
// 60 s (tcp.DefaultTCPTimeWaitTimeout). gVisor bounds neither. An orphan
// under a zero window probes for ever and keeps its send buffer (1 MiB on
// the source), after its service has given the place back, so a peer that
// reconnects makes the firmware hold without bound; a peer that opens and
// closes connections leaves an endpoint in TIME-WAIT per connection for a
// minute. Linux bounds both (tcp_max_orphans and tcp_orphan_retries,
// tcp_max_tw_buckets); the reaper does it here:
//
//   - a connection the firmware gives up on (an idle timeout, an
//     eviction) is reset (Abort): nothing it queued is wanted;
//   - a connection closed with bytes in flight keeps its service place
//     until they and its FIN are acknowledged, for Limits.Linger at most;
//     then it is reset (counted in linger_reset);
//   - connections closed without a place (iperf3's, whose own bounds
//     give their places back at Close, and those a full service refused,
//     which are closed, not reset, so that their clients read EOF)
//     linger as well, MaxOrphans of them at most; past it the oldest is
//     reset (orphan_reset);
//   - at most MaxTimeWait endpoints wait in FIN-WAIT-2 or TIME-WAIT; past
//     it the oldest is reset (time_wait_reset), as Linux destroys a
//     TIME-WAIT socket past tcp_max_tw_buckets.

// minReapTick and maxReapTick bound how often the reaper looks at
// lingering connections (only while there are some): soon after a close
// (most are delivered within a round trip, and a place should not wait
// long), less often while nothing changes.
const (
	minReapTick = time.Millisecond
	maxReapTick = 16 * time.Millisecond
)

// CloseStats is the /stats "limits" member "closing".
type CloseStats struct {
	// Linger, MaxOrphans and MaxTimeWait are the limits (Limits).
	LingerMs    int64 `json:"linger_ms"`
	MaxOrphans  int   `json:"max_orphans"`
	MaxTimeWait int   `json:"max_time_wait"`
	// Lingering connections now (with or without a place) and
	// endpoints tracked in FIN-WAIT-2 or TIME-WAIT.
	Lingering int `json:"lingering"`
	TimeWait  int `json:"time_wait"`
	// Reset connections given up on; LingerReset not delivered within
	// Linger; OrphanReset past MaxOrphans; TimeWaitReset past
	// MaxTimeWait.
	Reset         int64 `json:"reset"`
	LingerReset   int64 `json:"linger_reset"`
	OrphanReset   int64 `json:"orphan_reset"`
	TimeWaitReset int64 `json:"time_wait_reset"`
}

// lingering is a closed connection still delivering.
type lingering struct {
	ep       tcpip.Endpoint
	release  func() // gives its place back; nil without one
	deadline time.Time
}

// reaper bounds closed connections (see above). One per Server.
type reaper struct {
	linger            time.Duration
	maxOrphans, maxTW int

	mu      sync.Mutex
	closing []*lingering     // oldest first
	tw      []tcpip.Endpoint // FIN-WAIT-2 or TIME-WAIT, oldest first
	wake    chan struct{}

	reset, lingerReset, orphanReset, twReset atomic.Int64
}

func newReaper(l Limits) *reaper {
	r := &reaper{linger: l.Linger, maxOrphans: l.MaxOrphans, maxTW: l.MaxTimeWait, wake: make(chan struct{}, 1)}
	go r.run()
	return r
}

func (r *reaper) stats() CloseStats {
	if r == nil {
		return CloseStats{}
	}
	r.mu.Lock()
	r.pruneLocked()
	n, tw := len(r.closing), len(r.tw)
	r.mu.Unlock()
	return CloseStats{LingerMs: r.linger.Milliseconds(), MaxOrphans: r.maxOrphans, MaxTimeWait: r.maxTW,
		Lingering: n, TimeWait: tw, Reset: r.reset.Load(), LingerReset: r.lingerReset.Load(),
		OrphanReset: r.orphanReset.Load(), TimeWaitReset: r.twReset.Load()}
}

// delivered reports whether an endpoint in state st has nothing left to
// deliver: its FIN is acknowledged (FIN-WAIT-2, TIME-WAIT) or it is gone.
func delivered(st tcp.EndpointState) bool {
	return st == tcp.StateFinWait2 || st == tcp.StateTimeWait || st == tcp.StateClose ||
		st == tcp.StateError
}

// waiting reports whether an endpoint in state st is one the TIME-WAIT
// bound covers.
func waiting(st tcp.EndpointState) bool {
	return st == tcp.StateFinWait2 || st == tcp.StateTimeWait
}

// close closes c (see above); it never waits for the peer.
func (r *reaper) close(c *tcpConn) error {
	release := c.takeRelease()
	c.mu.Lock()
	c.closed = true
	gu := c.givenUp
	c.mu.Unlock()
	if gu {
		c.ep.Abort()
		err := c.TCPConn.Close()
		r.reset.Add(1)
		if release != nil {
			release()
		}
		return err
	}
	err := c.TCPConn.Close()
	full := false
	r.mu.Lock()
	if release == nil {
		n := 0
		for _, o := range r.closing {
			if o.release == nil {
				n++
			}
		}
		full = n >= r.maxOrphans
	}
	if !full {
		r.closing = append(r.closing, &lingering{ep: c.ep, release: release, deadline: time.Now().Add(r.linger)})
	}
	r.mu.Unlock()
	if full {
		// Past MaxOrphans the connection being closed is reset, as
		// Linux's __tcp_close does past tcp_max_orphans (tcp_check_oom,
		// TCPABORTONMEMORY): never an older one still delivering, which
		// another peer's closes would otherwise cut.
		c.ep.Abort()
		r.orphanReset.Add(1)
		return err
	}
	c.registered()
	select {
	case r.wake <- struct{}{}:
	default:
	}
	return err
}

// run looks at the lingering connections every reapTick while there are
// any.
func (r *reaper) run() {
	tick := minReapTick
	for {
		r.mu.Lock()
		n := len(r.closing)
		r.mu.Unlock()
		if n == 0 {
			<-r.wake
			tick = minReapTick
			continue
		}
		select {
		case <-r.wake:
			tick = minReapTick
		case <-time.After(tick):
			tick = min(2*tick, maxReapTick)
		}
		r.scan(time.Now())
	}
}

// resetNow resets ep at once if it is lingering (an evicted place's
// connection that its handler had already closed).
func (r *reaper) resetNow(ep tcpip.Endpoint) {
	var o *lingering
	r.mu.Lock()
	for i, l := range r.closing {
		if l.ep == ep {
			o = l
			r.closing = append(r.closing[:i], r.closing[i+1:]...)
			break
		}
	}
	r.mu.Unlock()
	if o == nil {
		return
	}
	o.ep.Abort()
	r.reset.Add(1)
	if o.release != nil {
		o.release()
	}
}

// scan gives back the places of the connections that delivered, tracks
// those now waiting, and resets those past their deadline.
func (r *reaper) scan(now time.Time) {
	var done, late []*lingering
	r.mu.Lock()
	keep := r.closing[:0]
	for _, o := range r.closing {
		switch {
		case delivered(tcp.EndpointState(o.ep.State())):
			done = append(done, o)
		case now.After(o.deadline):
			late = append(late, o)
		default:
			keep = append(keep, o)
		}
	}
	clear(r.closing[len(keep):])
	r.closing = keep
	r.mu.Unlock()
	for _, o := range late {
		o.ep.Abort()
		r.lingerReset.Add(1)
		if o.release != nil {
			o.release()
		}
	}
	for _, o := range done {
		if o.release != nil {
			o.release()
		}
		if waiting(tcp.EndpointState(o.ep.State())) {
			r.track(o.ep)
		}
	}
}

// track adds ep to the endpoints waiting in FIN-WAIT-2 or TIME-WAIT; past
// MaxTimeWait ep itself is reset instead, as Linux declines TIME-WAIT to
// the socket being closed past tcp_max_tw_buckets (inet_twsk_alloc
// returns NULL, TCPTIMEWAITOVERFLOW). gVisor has no such choice, so the
// endpoint is aborted: its peer, which has closed, ignores the RST.
func (r *reaper) track(ep tcpip.Endpoint) {
	r.mu.Lock()
	r.pruneLocked()
	full := len(r.tw) >= r.maxTW
	if !full {
		r.tw = append(r.tw, ep)
	}
	r.mu.Unlock()
	if full && waiting(tcp.EndpointState(ep.State())) {
		ep.Abort()
		r.twReset.Add(1)
	}
}

// pruneLocked forgets the tracked endpoints that no longer wait, wherever
// they are in the list (one reset by its peer leaves from the middle).
func (r *reaper) pruneLocked() {
	keep := r.tw[:0]
	for _, ep := range r.tw {
		if waiting(tcp.EndpointState(ep.State())) {
			keep = append(keep, ep)
		}
	}
	clear(r.tw[len(keep):])
	r.tw = keep
}

// tcpConn is an accepted connection whose Close goes through the reaper.
type tcpConn struct {
	*gonet.TCPConn
	ep   tcpip.Endpoint
	r    *reaper
	once sync.Once

	// mu orders giveUp against Close (a review found giveUp seeing the
	// connection closed before Close had handed it to the reaper, so
	// neither reset it): givenUp, closed and lingering change under it.
	mu        sync.Mutex
	givenUp   bool // to be reset
	closed    bool // Close has begun
	lingering bool // in the reaper's list
	release   func()
}

// registered records that c is in the reaper's list; if it was given up
// on meanwhile, it is reset now.
func (c *tcpConn) registered() {
	c.mu.Lock()
	c.lingering = true
	gu := c.givenUp
	c.mu.Unlock()
	if gu {
		c.r.resetNow(c.ep)
	}
}

// setRelease makes f give c's place back once c has delivered what it
// queued (or has been reset).
func (c *tcpConn) setRelease(f func()) {
	c.mu.Lock()
	c.release = f
	c.mu.Unlock()
}

func (c *tcpConn) takeRelease() func() {
	c.mu.Lock()
	defer c.mu.Unlock()
	f := c.release
	c.release = nil
	return f
}

// Close closes c once: reset if it was given up on, else it lingers in
// the reaper. It never waits for the peer.
//
// It first clears c's deadlines. gonet arms a runtime timer for each
// deadline (time.AfterFunc) and stops it only when the deadline is set
// again, not on Close: every connection the services closed (their idle
// deadlines are IdleTimeout ahead) left two timers pending for a minute,
// and each pending timer made every later wake-up of the firmware dearer
// (the Go runtime's timer heap: timers.adjust, siftDown). After 150 TCP
// echo connections a UDP echo transaction cost 182 k guest instructions
// instead of 109 k (tamanic-bench's request/response rows, icount).
func (c *tcpConn) Close() error {
	err := net.ErrClosed
	c.once.Do(func() {
		c.TCPConn.SetDeadline(time.Time{})
		err = c.r.close(c)
	})
	return err
}

// giveUp marks c, or the connection it wraps, to be reset when it is
// closed.
func giveUp(c net.Conn) {
	switch v := c.(type) {
	case *tcpConn:
		v.mu.Lock()
		first := !v.givenUp
		v.givenUp = true
		lingering := v.lingering
		v.mu.Unlock()
		if first && lingering {
			// Already closed and lingering (an evicted place whose
			// handler had finished): reset it now. One whose Close has
			// begun but not yet registered it is reset by registered.
			v.r.resetNow(v.ep)
		}
	case *idleConn:
		giveUp(v.Conn)
	case *countedConn:
		giveUp(v.Conn)
	}
}
