package dhcp

import (
	"context"
	"math/rand/v2"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/google/gopacket/layers"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/link/ethernet"
	"gvisor.dev/gvisor/pkg/tcpip/link/pipe"
	"gvisor.dev/gvisor/pkg/tcpip/network/arp"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// ackWith builds a DHCPACK of 10.0.0.50/24 from serverIP with a lease of
// secs and, when set, options 58 and 59.
func ackWith(secs uint32, t1, t2 *uint32) *Message {
	m := &Message{Op: OpReply, YIAddr: leaseIP}
	m.Set(OptMessageType, []byte{byte(Ack)})
	m.Set(OptServerID, serverIP.AsSlice())
	m.Set(OptSubnetMask, []byte{255, 255, 255, 0})
	be := func(v uint32) []byte { return []byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)} }
	m.Set(OptLeaseTime, be(secs))
	if t1 != nil {
		m.Set(OptRenewalTime, be(*t1))
	}
	if t2 != nil {
		m.Set(OptRebindingTime, be(*t2))
	}
	return m
}

// TestLeaseTimesFromHostileValues: a lease over 41.7 years (but not
// infinite) used to overflow 0.875 × lease in nanoseconds and give
// negative T1/T2; T1 or T2 of 0, or out of order, used to be taken as
// they came. RFC 2131 §4.4.5: T1 < T2 < lease, defaults 0.5 and 0.875.
func TestLeaseTimesFromHostileValues(t *testing.T) {
	r := newRig(t)
	u := func(v uint32) *uint32 { return &v }
	s := time.Second
	for _, c := range []struct {
		name          string
		secs          uint32
		t1, t2        *uint32
		lease, w1, w2 time.Duration
	}{
		{"50 years", 50 * 365 * 86400, nil, nil, 50 * 365 * 86400 * s, 25 * 365 * 86400 * s, (50*365*86400 - 50*365*86400/8) * s},
		{"0xfffffffe s", 0xfffffffe, nil, nil, 0xfffffffe * s, 0x7fffffff * s, (0xfffffffe - 0xfffffffe/8) * s},
		{"0xfffffffe s with T1 and T2", 0xfffffffe, u(0xfffffff0), u(0xfffffff8), 0xfffffffe * s, 0xfffffff0 * s, 0xfffffff8 * s},
		{"T1 and T2 of 0", 120, u(0), u(0), 120 * s, 60 * s, 105 * s},
		{"T1 of 0", 120, u(0), u(100), 120 * s, 60 * s, 100 * s},
		{"T2 past the lease", 120, u(30), u(200), 120 * s, 30 * s, 105 * s},
		{"T2 equal to the lease", 120, nil, u(120), 120 * s, 60 * s, 105 * s},
		{"T1 past T2", 120, u(100), u(50), 120 * s, 25 * s, 50 * s},
		{"T1 past the lease", 120, u(130), nil, 120 * s, 60 * s, 105 * s},
		{"server's values", 120, u(40), u(100), 120 * s, 40 * s, 100 * s},
	} {
		l := r.c.leaseFrom(ackWith(c.secs, c.t1, c.t2), time.Now())
		if l == nil {
			t.Errorf("%s: refused: %s", c.name, r.c.Stats().LastError)
			continue
		}
		if l.Duration != c.lease || l.T1 != c.w1 || l.T2 != c.w2 {
			t.Errorf("%s: lease %v T1 %v T2 %v, want %v %v %v", c.name, l.Duration, l.T1, l.T2, c.lease, c.w1, c.w2)
		}
		if l.T1 < 0 || l.T2 < l.T1 || l.Duration < l.T2 {
			t.Errorf("%s: T1 %v T2 %v lease %v out of order", c.name, l.T1, l.T2, l.Duration)
		}
	}
}

// TestHugeLeaseNoStorm: a lease of 0xfffffff0 s (136 years, not the
// infinite 0xffffffff) is held, not renewed on every DHCPACK (it was: T1
// and T2 overflowed to negative durations).
func TestHugeLeaseNoStorm(t *testing.T) {
	r := newRig(t)
	r.srv.set(func(s *server) { s.lease = 0xfffffff0 })
	r.start(t)
	r.waitFor(t, "bound", func(s Stats) bool { return s.Leases == 1 })
	// Let 20 s of client time pass (0.2 s here): a client that renews
	// 1 s after the lease began, at MinSendInterval, would have sent ~20
	// REQUESTs; one that storms, thousands.
	until := r.clock.Now().Add(20 * time.Second)
	for r.clock.Now().Before(until) {
		time.Sleep(time.Millisecond)
	}
	if st := r.c.Stats(); st.Requests != 1 || st.Renewals != 0 || st.Rebinds != 0 {
		t.Fatalf("stats %+v: want the one REQUEST that took the lease", st)
	}
	if st := r.c.Status(); st.State != "bound" || st.T1S < 68*365*86400 {
		t.Fatalf("status %+v: want bound with T1 of half the lease", st)
	}
}

// TestMinSendInterval: whatever the server answers, no two messages the
// client sends are closer than MinSendInterval. The server grants leases
// of 1 s, which the client can only renew at once, again and again: it
// did so at the speed of the round trip.
func TestMinSendInterval(t *testing.T) {
	// A slow clock (5 × real time): the gaps are measured on the wire, by
	// the tap, and scheduling delays are magnified by the scale.
	r := newRigScale(t, 5)
	r.srv.set(func(s *server) { s.lease = 1 })
	var mu = &r.ctap.mu
	var stamps []time.Time
	r.ctap.setLose(func(f frame) bool {
		// Called with the tap's lock held, as each frame is written.
		if f.dhcp != nil {
			stamps = append(stamps, r.clock.Now())
		}
		return false
	})
	r.start(t)
	r.waitFor(t, "eight messages sent", func(s Stats) bool { return s.Discovers+s.Requests >= 8 })
	mu.Lock()
	defer mu.Unlock()
	// Allow half the floor for scheduling (100 ms of real time): a
	// client without the floor sends the REQUEST microseconds after the
	// OFFER arrives.
	for i := 1; i < len(stamps); i++ {
		if gap := stamps[i].Sub(stamps[i-1]); gap < MinSendInterval/2 {
			t.Errorf("message %d sent %v after the previous one, want at least %v", i, gap, MinSendInterval)
		}
	}
	if st := r.c.Stats(); st.Paced == 0 || st.Leases == 0 {
		t.Errorf("stats %+v: want leases taken and messages paced", st)
	}
}

// TestZeroT1T2TakeDefaults: options 58 and 59 of 0 on the wire are taken
// as absent (they used to make T1 0: a REQUEST per DHCPACK).
func TestZeroT1T2TakeDefaults(t *testing.T) {
	r := newRig(t)
	r.srv.set(func(s *server) { s.lease, s.t1, s.t2, s.sendT = 120, 0, 0, true })
	r.start(t)
	r.waitFor(t, "bound", func(s Stats) bool { return s.Leases == 1 })
	if l, _ := r.c.Lease(); l.T1 != 60*time.Second || l.T2 != 105*time.Second {
		t.Fatalf("T1 %v T2 %v from options of 0, want the defaults 60 s and 105 s", l.T1, l.T2)
	}
}

// TestRefuseNetworkAndBroadcastOffers: an offer of the subnet's network
// or broadcast address is refused and counted; the client binds once a
// host address is offered.
func TestRefuseNetworkAndBroadcastOffers(t *testing.T) {
	for _, bad := range []string{"10.0.0.0", "10.0.0.255"} {
		t.Run(bad, func(t *testing.T) {
			r := newRig(t)
			r.srv.set(func(s *server) { s.offerIP = netip.MustParseAddr(bad) })
			r.start(t)
			r.waitFor(t, "offer refused or taken", func(s Stats) bool { return s.BadReply >= 2 || s.Offers > 0 || s.Leases > 0 })
			if st := r.c.Stats(); st.Leases != 0 || st.Offers != 0 {
				t.Fatalf("stats %+v: the offer of %v/24 was taken", st, bad)
			}
			for _, p := range r.leased() {
				if p.Addr().String() == bad {
					t.Fatalf("client holds %v", p)
				}
			}
			// ACK path too: a DHCPACK of it is refused.
			m := ackWith(120, nil, nil)
			m.YIAddr = netip.MustParseAddr(bad)
			if l := r.c.leaseFrom(m, time.Now()); l != nil {
				t.Fatalf("DHCPACK of %v taken: %+v", bad, l)
			}
			r.srv.set(func(s *server) { s.offerIP = netip.Addr{} })
			r.waitFor(t, "bound to a host address", func(s Stats) bool { return s.Leases == 1 })
			r.checkBound(t)
		})
	}
}

// TestRouterOutsideSubnetRefused: a router (option 3) outside the leased
// subnet gets no default route; the lease is kept and the refusal
// counted.
func TestRouterOutsideSubnetRefused(t *testing.T) {
	r := newRig(t)
	r.srv.set(func(s *server) { s.router = netip.MustParseAddr("192.168.1.1") })
	r.start(t)
	r.waitFor(t, "bound", func(s Stats) bool { return s.Leases == 1 })
	if l, _ := r.c.Lease(); l.Gateway.IsValid() {
		t.Fatalf("gateway %v taken from outside 10.0.0.0/24", l.Gateway)
	}
	for _, rt := range r.ipv4Routes() {
		if rt.Destination.Prefix() == 0 {
			t.Fatalf("default route %v installed", rt)
		}
	}
	if st := r.c.Stats(); st.BadRouter != 1 || st.LastError == "" {
		t.Fatalf("stats %+v: want the router refused and counted", st)
	}
	// And the subnet's own broadcast address is no router either.
	m := ackWith(120, nil, nil)
	m.Set(OptRouter, []byte{10, 0, 0, 255, 10, 0, 0, 1})
	if l := r.c.leaseFrom(m, time.Now()); l == nil || l.Gateway != netip.MustParseAddr("10.0.0.1") {
		t.Fatalf("routers 10.0.0.255, 10.0.0.1: lease %+v, want gateway 10.0.0.1", l)
	}
}

// TestClientPerNIC: a client on each of two NICs of one stack (port 68
// bound per device), each leasing from the server on its own link; the
// DefaultRoute hook keeps the default route with the first.
func TestClientPerNIC(t *testing.T) {
	r := newRig(t) // NIC 1 and its server
	a, b := pipe.New("\x02\x00\x00\x00\x01\x01", "\x02\x00\x00\x00\x01\x02", 1500)
	if err := r.cs.CreateNIC(2, ethernet.New(a)); err != nil {
		t.Fatal(err)
	}
	ss2 := newStack(t, ethernet.New(b), arp.NewProtocol)
	if err := ss2.AddProtocolAddress(1, tcpip.ProtocolAddress{Protocol: ipv4.ProtocolNumber,
		AddressWithPrefix: tcpip.AddressWithPrefix{Address: tcpip.AddrFrom4(serverIP.As4()), PrefixLen: 24}}, stack.AddressProperties{}); err != nil {
		t.Fatal(err)
	}
	ss2.SetRouteTable([]tcpip.Route{{Destination: header.IPv4EmptySubnet, NIC: 1}})
	srv2 := newServer(t, ss2)
	srv2.set(func(s *server) { s.offerIP = netip.MustParseAddr("10.0.0.60") })
	var asked []tcpip.NICID
	var mu sync.Mutex
	owner := func(nic tcpip.NICID, _ netip.Addr) bool {
		mu.Lock()
		defer mu.Unlock()
		asked = append(asked, nic)
		return nic == 1
	}
	r.c.cfg.DefaultRoute = owner
	c2, err := New(Config{Stack: r.cs, NIC: 2, Clock: r.clock, Rand: rand.New(rand.NewPCG(3, 4)), DefaultRoute: owner})
	if err != nil {
		t.Fatalf("a second client on NIC 2: %v", err)
	}
	r.start(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c2.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	<-r.c.Bound()
	<-c2.Bound()
	r.checkBound(t)
	if l, _ := c2.Lease(); l.Addr != netip.MustParsePrefix("10.0.0.60/24") || l.Gateway != serverIP {
		t.Fatalf("NIC 2 lease %+v", l)
	}
	var defaults []tcpip.NICID
	for _, rt := range r.cs.GetRouteTable() {
		if rt.Destination.Prefix() == 0 && rt.Destination.ID().BitLen() == 32 {
			defaults = append(defaults, rt.NIC)
		}
	}
	if len(defaults) != 1 || defaults[0] != 1 {
		t.Fatalf("IPv4 default routes on NICs %v, want NIC 1's only (asked %v)", defaults, asked)
	}
}

// requestStamps records, on the wire, when the client sends each
// DHCPREQUEST (client time).
func requestStamps(r *rig) func() []time.Time {
	var stamps []time.Time
	r.ctap.setLose(func(f frame) bool {
		// Called with the tap's lock held, as each frame is written.
		if f.dhcp != nil && f.msgType == layers.DHCPMsgTypeRequest {
			stamps = append(stamps, r.clock.Now())
		}
		return false
	})
	return func() []time.Time {
		r.ctap.mu.Lock()
		defer r.ctap.mu.Unlock()
		return append([]time.Time(nil), stamps...)
	}
}

// TestRefusedAckKeepsRenewWait: in RENEWING and REBINDING a DHCPACK the
// client refuses (here of the subnet's broadcast address) is no answer:
// the client waits out RFC 2131 §4.4.5's interval (half the time left,
// at least MinRenewWait) before it asks again. It used to send the next
// DHCPREQUEST as soon as the refused ACK arrived, one a second (the
// MinSendInterval floor) for as long as the server kept answering.
func TestRefusedAckKeepsRenewWait(t *testing.T) {
	r := newRig(t)
	r.srv.set(func(s *server) { s.lease = 600 })
	stamps := requestStamps(r)
	r.start(t)
	r.waitFor(t, "bound", func(s Stats) bool { return s.Leases == 1 })
	r.srv.set(func(s *server) { s.offerIP = netip.MustParseAddr("10.0.0.255") })
	r.waitFor(t, "the lease to expire", func(s Stats) bool { return s.Expiries == 1 })
	var renew []time.Time
	for _, s := range stamps()[1:] {
		renew = append(renew, s)
	}
	// T1 = 300 s, T2 = 525 s, expiry 600 s: RENEWING asks at 300 s,
	// waits 112.5 s, asks at 412.5 s, waits 112.5 s; REBINDING asks at
	// 525 s and waits the 75 s left. Four REQUESTs; a client that asks on
	// every refused ACK sends one a second, about 300.
	if len(renew) > 5 {
		t.Fatalf("%d DHCPREQUESTs between T1 and expiry (stats %+v), want at most 5", len(renew), r.c.Stats())
	}
	if st := r.c.Stats(); st.BadReply < uint64(len(renew)) {
		t.Errorf("stats %+v: want every refused DHCPACK counted (%d REQUESTs)", st, len(renew))
	}
}

// TestRefusedAckKeepsBackoff: in REQUESTING a refused DHCPACK does not cut
// the retransmission timeout short (4, 8, 16, 32 s ± 1 s, §4.1).
func TestRefusedAckKeepsBackoff(t *testing.T) {
	r := newRig(t)
	r.srv.set(func(s *server) {
		s.policy = func(mt layers.DHCPMsgType, d *layers.DHCPv4) reply {
			if mt == layers.DHCPMsgTypeRequest {
				s.offerIP = netip.MustParseAddr("10.0.0.255") // the ACK only
			} else {
				s.offerIP = netip.Addr{}
			}
			return answer
		}
	})
	stamps := requestStamps(r)
	r.start(t)
	r.waitFor(t, "four REQUESTs", func(s Stats) bool { return s.Requests >= 4 })
	st := stamps()
	for i := 1; i < 4 && i < len(st); i++ {
		if gap := st[i].Sub(st[i-1]); gap < FirstTimeout-Jitter {
			t.Errorf("REQUEST %d sent %v after the previous one, want at least %v", i, gap, FirstTimeout-Jitter)
		}
	}
	if s := r.c.Stats(); s.Leases != 0 {
		t.Fatalf("stats %+v: a broadcast address was leased", s)
	}
}
