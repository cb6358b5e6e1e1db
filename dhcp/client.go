package dhcp

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"
	"gvisor.dev/gvisor/pkg/waiter"
)

// State is where the client is in RFC 2131's state machine (§4.4,
// figure 5).
type State int32

// States.
const (
	Init State = iota
	Selecting
	Requesting
	Bound
	Renewing
	Rebinding
	Stopped
)

var stateNames = [...]string{"init", "selecting", "requesting", "bound", "renewing", "rebinding", "stopped"}

func (s State) String() string {
	if s >= 0 && int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("state %d", int32(s))
}

// Clock is the client's time source; tests run it faster than real time.
type Clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// Timing constants (RFC 2131).
const (
	// FirstTimeout is the first retransmission timeout; it doubles up to
	// MaxTimeout (§4.1).
	FirstTimeout = 4 * time.Second
	// MaxTimeout caps the retransmission timeout (§4.1).
	MaxTimeout = 64 * time.Second
	// Jitter is the random spread added to each timeout (±, §4.1).
	Jitter = time.Second
	// MinRenewWait is the least the client waits between DHCPREQUESTs in
	// RENEWING and REBINDING (§4.4.5).
	MinRenewWait = 60 * time.Second
	// DeclineWait is how long the client waits after declining an
	// address in use before it starts again (RFC 2131 §3.1 step 5).
	DeclineWait = 10 * time.Second
	// MinSendInterval is the least time between any two messages the
	// client sends, whatever the servers answer: a floor under every
	// other timer, so that no reply (a lease of a second, a T1 of 0, an
	// ACK to every REQUEST at once) can make the client broadcast faster
	// than once a second. RFC 2131's own timers never go below it (the
	// first retransmission waits 4 ± 1 s, §4.1); it costs at most a
	// second between an OFFER and the REQUEST that follows.
	MinSendInterval = time.Second
	// RequestTries is how many DHCPREQUESTs REQUESTING sends before it
	// goes back to INIT.
	RequestTries = 4
	// maxDNS bounds the DNS servers kept from option 6.
	maxDNS = 8
	// rxQueue bounds the replies waiting for the state machine.
	rxQueue = 16
)

// Infinite is the lease duration of option 51 = 0xffffffff (RFC 2131
// §3.3): the address is never renewed.
const Infinite = time.Duration(1<<63 - 1)

// Lease is what a DHCPACK granted.
type Lease struct {
	Addr    netip.Prefix
	Gateway netip.Addr // invalid when the server sent no router
	DNS     []netip.Addr
	Server  netip.Addr // the server identifier (option 54)
	// Duration, T1 and T2 are relative to Start; T1 and T2 default to
	// 0.5 and 0.875 of Duration (§4.4.5).
	Duration, T1, T2 time.Duration
	Start            time.Time // when the DHCPREQUEST that got the ACK was sent (§4.4.1)
}

// Stats counts the client's traffic and every reply it dropped.
type Stats struct {
	Discovers   uint64 `json:"discovers"`
	Requests    uint64 `json:"requests"`
	Retransmits uint64 `json:"retransmits"`
	Offers      uint64 `json:"offers"`
	Acks        uint64 `json:"acks"`
	Naks        uint64 `json:"naks"`
	Leases      uint64 `json:"leases"`   // DHCPACKs that bound from INIT
	Renewals    uint64 `json:"renewals"` // DHCPACKs in RENEWING
	Rebinds     uint64 `json:"rebinds"`  // DHCPACKs in REBINDING
	Expiries    uint64 `json:"expiries"`
	Conflicts   uint64 `json:"conflicts"` // ACKed addresses another host answered ARP for
	Declines    uint64 `json:"declines"`
	// Dropped replies, by reason.
	Garbage    uint64 `json:"garbage"`      // undecodable (Parse failed)
	NotReply   uint64 `json:"not_reply"`    // op is not BOOTREPLY
	WrongXID   uint64 `json:"wrong_xid"`    // no transaction of ours
	WrongCHAdr uint64 `json:"wrong_chaddr"` // someone else's hardware address
	Unexpected uint64 `json:"unexpected"`   // type not expected in this state, or from another server
	BadReply   uint64 `json:"bad_reply"`    // missing server id or lease time, unusable address (network, broadcast)
	BadRouter  uint64 `json:"bad_router"`   // DHCPACKs whose routers were all outside the subnet (lease kept, no default route)
	Paced      uint64 `json:"paced"`        // messages held back to keep MinSendInterval
	Overflow   uint64 `json:"rx_overflow"`  // replies dropped because the queue was full
	SendErrors uint64 `json:"send_errors"`
	LastError  string `json:"last_error,omitempty"`
}

// Status is a snapshot of the client, JSON-encodable for /stats.
type Status struct {
	State   string   `json:"state"`
	Address string   `json:"address,omitempty"`
	Gateway string   `json:"gateway,omitempty"`
	DNS     []string `json:"dns,omitempty"`
	Server  string   `json:"server,omitempty"`
	LeaseS  float64  `json:"lease_s,omitempty"` // -1: infinite
	T1S     float64  `json:"t1_s,omitempty"`
	T2S     float64  `json:"t2_s,omitempty"`
	// AgeS is how long ago the lease started.
	AgeS  float64 `json:"age_s,omitempty"`
	Stats Stats   `json:"stats"`
}

// Config configures a Client.
type Config struct {
	Stack *stack.Stack
	NIC   tcpip.NICID
	// Hostname, if set, is sent as option 12.
	Hostname string
	// Clock defaults to the real clock.
	Clock Clock
	// Rand draws transaction ids and jitter; nil: seeded from crypto/rand.
	Rand *rand.Rand
	// Log, if set, receives one line per state change.
	Log func(format string, args ...any)
	// DefaultRoute, if set, is asked before a lease's router becomes the
	// NIC's default route; false: the lease is installed without one.
	// With a client on each NIC of a stack, it lets the first lease that
	// brings a router keep the default route (gVisor takes the first of
	// several default routes, and a renewal re-adds its route last). It
	// is called with the client's lock held and must not call the client.
	DefaultRoute func(nic tcpip.NICID, gw netip.Addr) bool
}

// Client is a DHCPv4 client on one NIC of a gVisor stack. It owns the
// NIC's IPv4 address and IPv4 routes while it runs.
type Client struct {
	cfg   Config
	mac   [6]byte
	clock Clock
	rnd   *rand.Rand

	ep   tcpip.Endpoint
	conn *gonet.UDPConn
	rx   chan *Message

	state atomic.Int32
	bound chan struct{} // closed at the first bind
	once  sync.Once

	mu       sync.Mutex
	lease    Lease
	have     bool // lease is valid and installed
	stats    Stats
	unspec   bool // 0.0.0.0 is on the NIC
	xid      uint32
	xidValid bool

	// lastSend is when the last message went out (MinSendInterval);
	// only Run's goroutine uses it.
	lastSend time.Time
}

// New opens the client's UDP endpoint (port 68 on cfg.NIC) and returns a
// client ready to Run.
func New(cfg Config) (*Client, error) {
	if cfg.Stack == nil {
		return nil, errors.New("dhcp: no stack")
	}
	info, ok := cfg.Stack.NICInfo()[cfg.NIC]
	if !ok {
		return nil, fmt.Errorf("dhcp: no NIC %d", cfg.NIC)
	}
	if len(info.LinkAddress) != 6 {
		return nil, fmt.Errorf("dhcp: NIC %d has link address %q, not Ethernet", cfg.NIC, info.LinkAddress)
	}
	c := &Client{cfg: cfg, clock: cfg.Clock, rnd: cfg.Rand, rx: make(chan *Message, rxQueue), bound: make(chan struct{})}
	copy(c.mac[:], info.LinkAddress)
	if c.clock == nil {
		c.clock = realClock{}
	}
	if c.rnd == nil {
		var seed [32]byte
		if _, err := crand.Read(seed[:]); err != nil {
			return nil, fmt.Errorf("dhcp: seeding: %w", err)
		}
		c.rnd = rand.New(rand.NewChaCha8(seed))
	}
	var wq waiter.Queue
	ep, terr := cfg.Stack.NewEndpoint(udp.ProtocolNumber, ipv4.ProtocolNumber, &wq)
	if terr != nil {
		return nil, fmt.Errorf("dhcp: UDP endpoint: %v", terr)
	}
	ep.SocketOptions().SetBroadcast(true)
	// Bound to the NIC's device, so that a client on each NIC of one
	// stack can have port 68 (a NIC in the bind address alone does not
	// reserve the port per device).
	if terr := ep.SocketOptions().SetBindToDevice(int32(cfg.NIC)); terr != nil {
		ep.Close()
		return nil, fmt.Errorf("dhcp: bind to NIC %d: %v", cfg.NIC, terr)
	}
	if terr := ep.Bind(tcpip.FullAddress{NIC: cfg.NIC, Port: ClientPort}); terr != nil {
		ep.Close()
		return nil, fmt.Errorf("dhcp: bind port %d: %v", ClientPort, terr)
	}
	c.ep, c.conn = ep, gonet.NewUDPConn(&wq, ep)
	return c, nil
}

// Bound is closed when the client first binds a lease.
func (c *Client) Bound() <-chan struct{} { return c.bound }

// State returns the current state.
func (c *Client) State() State { return State(c.state.Load()) }

// Lease returns the lease in force, ok false when there is none.
func (c *Client) Lease() (l Lease, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lease, c.have
}

// Stats returns the counters.
func (c *Client) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}

// Status returns a snapshot for /stats.
func (c *Client) Status() Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := Status{State: c.State().String(), Stats: c.stats}
	if !c.have {
		return st
	}
	l := c.lease
	st.Address, st.Server = l.Addr.String(), l.Server.String()
	if l.Gateway.IsValid() {
		st.Gateway = l.Gateway.String()
	}
	for _, d := range l.DNS {
		st.DNS = append(st.DNS, d.String())
	}
	st.LeaseS, st.T1S, st.T2S = -1, -1, -1
	if l.Duration != Infinite {
		st.LeaseS, st.T1S, st.T2S = l.Duration.Seconds(), l.T1.Seconds(), l.T2.Seconds()
	}
	st.AgeS = c.clock.Now().Sub(l.Start).Seconds()
	return st
}

func (c *Client) count(f func(*Stats)) {
	c.mu.Lock()
	f(&c.stats)
	c.mu.Unlock()
}

func (c *Client) setState(s State) {
	if old := State(c.state.Swap(int32(s))); old != s && c.cfg.Log != nil {
		c.cfg.Log("dhcp: %v -> %v", old, s)
	}
}

// Run runs the client until ctx is done, then closes its endpoint and
// returns ctx's error. The address stays on the NIC when Run returns
// while a lease is held (no DHCPRELEASE is sent); 0.0.0.0 is removed.
func (c *Client) Run(ctx context.Context) error {
	done := make(chan struct{})
	go c.receive(done)
	defer func() {
		c.conn.Close()
		<-done
		c.mu.Lock()
		c.dropUnspecified()
		c.mu.Unlock()
		c.setState(Stopped)
	}()
	for {
		if err := c.acquire(ctx); err != nil {
			return err
		}
		if err := c.keep(ctx); err != nil {
			return err
		}
		// The lease was lost (DHCPNAK or expiry): wait a little before
		// DISCOVER, so that a server granting zero-length leases or
		// NAKing every renewal gets a request a second, not a storm.
		if err := c.sleep(ctx, c.backoff(0)/4); err != nil {
			return err
		}
	}
}

// receive decodes datagrams on port 68 and queues the plausible ones for
// the state machine; everything else is counted.
func (c *Client) receive(done chan<- struct{}) {
	defer close(done)
	buf := make([]byte, MaxMessageLen+1)
	for {
		n, _, err := c.conn.ReadFrom(buf)
		if err != nil {
			return
		}
		m, err := Parse(buf[:n])
		if err != nil {
			c.count(func(s *Stats) { s.Garbage++; s.LastError = err.Error() })
			continue
		}
		if m.Op != OpReply {
			c.count(func(s *Stats) { s.NotReply++ })
			continue
		}
		if m.CHAddr != c.mac {
			c.count(func(s *Stats) { s.WrongCHAdr++ })
			continue
		}
		c.mu.Lock()
		ok := c.xidValid && m.XID == c.xid
		if !ok {
			c.stats.WrongXID++
		}
		c.mu.Unlock()
		if !ok {
			continue
		}
		select {
		case c.rx <- m:
		default:
			c.count(func(s *Stats) { s.Overflow++ })
		}
	}
}

// newXID starts a transaction: replies with any other xid are dropped.
func (c *Client) newXID() uint32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.xid, c.xidValid = c.rnd.Uint32(), true
	// Drain replies to the previous transaction.
	for {
		select {
		case <-c.rx:
		default:
			return c.xid
		}
	}
}

// backoff returns the n-th retransmission timeout (n from 0) with jitter.
func (c *Client) backoff(n int) time.Duration {
	d := FirstTimeout << min(n, 4)
	c.mu.Lock()
	j := time.Duration(c.rnd.Int64N(int64(2*Jitter+1))) - Jitter
	c.mu.Unlock()
	return d + j
}

// await waits up to d for a queued reply that accept takes; replies it
// refuses are dropped (accept counts them). It returns nil, nil on time
// out.
func (c *Client) await(ctx context.Context, d time.Duration, accept func(*Message) bool) (*Message, error) {
	timeout := c.clock.After(d)
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-timeout:
			return nil, nil
		case m := <-c.rx:
			c.mu.Lock()
			stale := m.XID != c.xid
			if stale {
				// Queued by receive just before newXID moved on.
				c.stats.WrongXID++
			}
			c.mu.Unlock()
			if !stale && accept(m) {
				return m, nil
			}
		}
	}
}

func (c *Client) sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-c.clock.After(d):
		return nil
	}
}

// acceptLease is await's accept for REQUESTING, RENEWING and REBINDING:
// a DHCPNAK from server, or a DHCPACK whose lease the client takes (into
// *lease, starting at sent). A DHCPACK it refuses (leaseFrom counts it)
// is no answer, so the wait runs to its end.
func (c *Client) acceptLease(server netip.Addr, sent time.Time, lease **Lease) func(*Message) bool {
	return func(m *Message) bool {
		if !c.acceptAckNak(m, server) {
			return false
		}
		if m.Type() == Nak {
			return true
		}
		*lease = c.leaseFrom(m, sent)
		return *lease != nil
	}
}

// send writes m to to:67 on the client's NIC, counting it, no sooner than
// MinSendInterval after the previous message, and returns when it was
// sent; its error is ctx's, if ctx ends while it waits.
func (c *Client) send(ctx context.Context, m *Message, to netip.Addr, retransmit bool, counter func(*Stats)) (time.Time, error) {
	if !c.lastSend.IsZero() {
		if wait := c.lastSend.Add(MinSendInterval).Sub(c.clock.Now()); wait > 0 {
			c.count(func(s *Stats) { s.Paced++ })
			if err := c.sleep(ctx, wait); err != nil {
				return time.Time{}, err
			}
		}
	}
	now := c.clock.Now()
	c.lastSend = now
	b, err := m.Marshal()
	if err != nil {
		c.count(func(s *Stats) { s.SendErrors++; s.LastError = err.Error() })
		return now, nil
	}
	a := to.As4()
	_, terr := c.ep.Write(bytes.NewReader(b), tcpip.WriteOptions{To: &tcpip.FullAddress{NIC: c.cfg.NIC, Addr: tcpip.AddrFrom4(a), Port: ServerPort}})
	c.count(func(s *Stats) {
		counter(s)
		if retransmit {
			s.Retransmits++
		}
		if terr != nil {
			s.SendErrors++
			s.LastError = fmt.Sprintf("send %v to %v: %v", m.Type(), to, terr)
		}
	})
	return now, nil
}
