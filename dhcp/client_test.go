package dhcp

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"net/netip"
)

var bcastMAC = [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

func optData(d *layers.DHCPv4, t layers.DHCPOpt) ([]byte, bool) {
	for _, o := range d.Options {
		if o.Type == t {
			return o.Data, true
		}
	}
	return nil, false
}

// leased returns the client's IPv4 addresses other than the limited
// broadcast address gVisor keeps on every NIC.
func (r *rig) leased() []netip.Prefix {
	var out []netip.Prefix
	for _, p := range r.addrs() {
		if p.Addr() != bcast {
			out = append(out, p)
		}
	}
	return out
}

func (r *rig) ipv4Routes() []tcpip.Route {
	var out []tcpip.Route
	for _, rt := range r.cs.GetRouteTable() {
		if rt.Destination.ID().BitLen() == 32 {
			out = append(out, rt)
		}
	}
	return out
}

func (r *rig) checkBound(t *testing.T) {
	t.Helper()
	want := netip.MustParsePrefix("10.0.0.50/24")
	if got := r.leased(); !slices.Equal(got, []netip.Prefix{want}) {
		t.Fatalf("client addresses %v, want [%v] (and no 0.0.0.0)", got, want)
	}
	routes := r.ipv4Routes()
	var def, sub bool
	for _, rt := range routes {
		if rt.Destination.Prefix() == 0 && rt.Gateway == tcpip.AddrFrom4(serverIP.As4()) {
			def = true
		}
		if rt.Destination.Prefix() == 24 && rt.Gateway.BitLen() == 0 {
			sub = true
		}
	}
	if !def || !sub {
		t.Fatalf("client IPv4 routes %v: want the /24 on-link and a default via %v", routes, serverIP)
	}
}

func TestLease(t *testing.T) {
	r := newRig(t)
	r.start(t)
	r.waitFor(t, "bound", func(s Stats) bool { return s.Leases == 1 })
	<-r.c.Bound()
	r.checkBound(t)
	l, ok := r.c.Lease()
	if !ok {
		t.Fatal("Lease: none after bind")
	}
	if l.Addr != netip.MustParsePrefix("10.0.0.50/24") || l.Gateway != serverIP || l.Server != serverIP ||
		!slices.Equal(l.DNS, []netip.Addr{netip.MustParseAddr("10.0.0.3"), netip.MustParseAddr("10.0.0.4")}) {
		t.Errorf("lease %+v", l)
	}
	if l.Duration.Seconds() != 120 || l.T1.Seconds() != 60 || l.T2.Seconds() != 105 {
		t.Errorf("lease %v T1 %v T2 %v, want 120 s, 60 s, 105 s (RFC 2131 §4.4.5 defaults)", l.Duration, l.T1, l.T2)
	}
	st := r.c.Status()
	if st.Address != "10.0.0.50/24" || st.Gateway != "10.0.0.2" || st.Server != "10.0.0.2" || st.LeaseS != 120 ||
		!slices.Equal(st.DNS, []string{"10.0.0.3", "10.0.0.4"}) {
		t.Errorf("status %+v", st)
	}

	// The wire, as gopacket decodes it.
	fs := r.ctap.dhcpFrames()
	if len(fs) < 2 {
		t.Fatalf("%d DHCP frames sent, want DISCOVER and REQUEST", len(fs))
	}
	disc, req := fs[0], fs[1]
	for _, f := range fs[:2] {
		if f.ethDst != bcastMAC || f.ipSrc != netip.IPv4Unspecified() || f.ipDst != bcast || f.sport != 68 || f.dport != 67 || f.udpChecksumErr {
			t.Errorf("%v: eth dst %x ip %v -> %v ports %d -> %d checksum bad %v; want broadcast from 0.0.0.0:68 to 255.255.255.255:67",
				f.msgType, f.ethDst, f.ipSrc, f.ipDst, f.sport, f.dport, f.udpChecksumErr)
		}
		if f.dhcp.Operation != layers.DHCPOpRequest || f.dhcp.Flags != FlagBroadcast || !bytes.Equal(f.dhcp.ClientHWAddr, []byte(clientMAC)) {
			t.Errorf("%v: op %v flags %#x chaddr %v", f.msgType, f.dhcp.Operation, f.dhcp.Flags, f.dhcp.ClientHWAddr)
		}
		if h, _ := optData(f.dhcp, layers.DHCPOptHostname); string(h) != "tamanic" {
			t.Errorf("%v: hostname %q", f.msgType, h)
		}
		if id, _ := optData(f.dhcp, layers.DHCPOptClientID); !bytes.Equal(id, append([]byte{1}, clientMAC...)) {
			t.Errorf("%v: client id %x", f.msgType, id)
		}
	}
	if disc.msgType != layers.DHCPMsgTypeDiscover || req.msgType != layers.DHCPMsgTypeRequest {
		t.Fatalf("sent %v then %v", disc.msgType, req.msgType)
	}
	if disc.dhcp.Xid != req.dhcp.Xid {
		t.Errorf("REQUEST xid %#x, DISCOVER xid %#x: RFC 2131 §4.4.1 wants the same", req.dhcp.Xid, disc.dhcp.Xid)
	}
	if v, _ := optData(req.dhcp, layers.DHCPOptRequestIP); !bytes.Equal(v, leaseIP.AsSlice()) {
		t.Errorf("REQUEST requested address %v", v)
	}
	if v, _ := optData(req.dhcp, layers.DHCPOptServerID); !bytes.Equal(v, serverIP.AsSlice()) {
		t.Errorf("REQUEST server id %v", v)
	}
	if !req.dhcp.ClientIP.Equal(netip.IPv4Unspecified().AsSlice()) {
		t.Errorf("REQUEST in SELECTING has ciaddr %v", req.dhcp.ClientIP)
	}

	// The address works: the server reaches a UDP socket on it.
	lc, err := gonet.DialUDP(r.cs, &tcpip.FullAddress{NIC: 1, Addr: tcpip.AddrFrom4(leaseIP.As4()), Port: 9}, nil, ipv4.ProtocolNumber)
	if err != nil {
		t.Fatalf("listen on the leased address: %v", err)
	}
	defer lc.Close()
	sc, err := gonet.DialUDP(r.ss, nil, &tcpip.FullAddress{Addr: tcpip.AddrFrom4(leaseIP.As4()), Port: 9}, ipv4.ProtocolNumber)
	if err != nil {
		t.Fatalf("server dial: %v", err)
	}
	defer sc.Close()
	if _, err := sc.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 16)
	n, _, err := lc.ReadFrom(buf)
	if err != nil || string(buf[:n]) != "hello" {
		t.Fatalf("read %q, %v", buf[:n], err)
	}
}

func TestRenewUnicastAndOptions(t *testing.T) {
	r := newRig(t)
	r.srv.set(func(s *server) { s.lease, s.t1, s.t2 = 120, 40, 100 })
	r.start(t)
	r.waitFor(t, "bound", func(s Stats) bool { return s.Leases == 1 })
	if l, _ := r.c.Lease(); l.T1.Seconds() != 40 || l.T2.Seconds() != 100 {
		t.Errorf("T1 %v T2 %v, want the server's 40 s and 100 s", l.T1, l.T2)
	}
	r.waitFor(t, "renewed twice", func(s Stats) bool { return s.Renewals >= 2 })
	r.checkBound(t)
	var renews int
	for _, f := range r.ctap.dhcpFrames() {
		if f.msgType != layers.DHCPMsgTypeRequest || f.ipDst == bcast {
			continue
		}
		renews++
		if f.ipSrc != leaseIP || f.ipDst != serverIP || f.ethDst != [6]byte([]byte(serverMAC)) || f.udpChecksumErr {
			t.Errorf("renewal %v -> %v (eth %x), want unicast %v -> %v", f.ipSrc, f.ipDst, f.ethDst, leaseIP, serverIP)
		}
		if !f.dhcp.ClientIP.Equal(leaseIP.AsSlice()) || f.dhcp.Flags != 0 {
			t.Errorf("renewal ciaddr %v flags %#x", f.dhcp.ClientIP, f.dhcp.Flags)
		}
		if _, ok := optData(f.dhcp, layers.DHCPOptRequestIP); ok {
			t.Error("renewal carries option 50 (RFC 2131 table 5: MUST NOT)")
		}
		if _, ok := optData(f.dhcp, layers.DHCPOptServerID); ok {
			t.Error("renewal carries option 54 (RFC 2131 table 5: MUST NOT)")
		}
	}
	if renews < 2 {
		t.Errorf("%d unicast renewals on the wire", renews)
	}
	if st := r.c.Stats(); st.Rebinds != 0 || st.Expiries != 0 {
		t.Errorf("stats %+v: rebound or expired while the server answered renewals", st)
	}
}

func TestRebind(t *testing.T) {
	// 600 s: T2 - T1 = 225 s holds several renewals 60 s apart (§4.4.5).
	r := newRigScale(t, 1000)
	r.srv.set(func(s *server) { s.lease = 600 })
	r.start(t)
	r.waitFor(t, "bound", func(s Stats) bool { return s.Leases == 1 })
	// The server becomes unreachable by unicast: every renewal is lost.
	r.ctap.setLose(func(f frame) bool { return f.dhcp != nil && f.ipDst == serverIP })
	r.waitFor(t, "rebound", func(s Stats) bool { return s.Rebinds >= 1 })
	r.checkBound(t)
	var unicast, rebind int
	for _, f := range r.ctap.dhcpFrames() {
		if f.msgType != layers.DHCPMsgTypeRequest || !f.dhcp.ClientIP.Equal(leaseIP.AsSlice()) {
			continue
		}
		if f.ipDst == serverIP {
			unicast++
			continue
		}
		rebind++
		if f.ipSrc != leaseIP || f.ipDst != bcast || f.ethDst != bcastMAC {
			t.Errorf("rebinding request %v -> %v (eth %x), want broadcast from %v", f.ipSrc, f.ipDst, f.ethDst, leaseIP)
		}
	}
	if unicast < 2 || rebind < 1 {
		t.Errorf("%d renewals (want ≥2: retransmitted until T2) and %d rebinding requests", unicast, rebind)
	}
	if st := r.c.Stats(); st.Renewals != 0 || st.Expiries != 0 {
		t.Errorf("stats %+v", st)
	}
}

func TestExpiryRemovesAddressAndRestarts(t *testing.T) {
	r := newRig(t)
	r.start(t)
	r.waitFor(t, "bound", func(s Stats) bool { return s.Leases == 1 })
	r.checkBound(t)
	r.srv.set(func(s *server) { s.policy = func(layers.DHCPMsgType, *layers.DHCPv4) reply { return ignore } })
	r.waitFor(t, "expired", func(s Stats) bool { return s.Expiries == 1 })
	r.waitFor(t, "discovering again", func(s Stats) bool { return s.Discovers >= 2 })
	if got := r.leased(); len(got) != 1 || got[0].Addr() != netip.IPv4Unspecified() {
		t.Errorf("after expiry the client holds %v, want only 0.0.0.0", got)
	}
	if rs := r.ipv4Routes(); len(rs) != 0 {
		t.Errorf("after expiry IPv4 routes remain: %v", rs)
	}
	if _, ok := r.c.Lease(); ok {
		t.Error("Lease() still reports a lease after expiry")
	}
	if !strings.Contains(r.log(), "dropped 10.0.0.50/24: lease expired") {
		t.Errorf("log %s", r.log())
	}
	r.srv.set(func(s *server) { s.policy = nil })
	r.waitFor(t, "bound again", func(s Stats) bool { return s.Leases == 2 })
	r.checkBound(t)
}

func TestNakInRequesting(t *testing.T) {
	r := newRig(t)
	naks := 0
	r.srv.set(func(s *server) {
		s.policy = func(mt layers.DHCPMsgType, _ *layers.DHCPv4) reply {
			if mt == layers.DHCPMsgTypeRequest && naks == 0 {
				naks++
				return nak
			}
			return answer
		}
	})
	r.start(t)
	r.waitFor(t, "bound", func(s Stats) bool { return s.Leases == 1 })
	r.checkBound(t)
	st := r.c.Stats()
	if st.Naks != 1 || st.Discovers < 2 {
		t.Errorf("stats %+v: want one NAK and a new DISCOVER after it", st)
	}
}

func TestNakInRenewing(t *testing.T) {
	r := newRig(t)
	r.start(t)
	r.waitFor(t, "bound", func(s Stats) bool { return s.Leases == 1 })
	// The server now refuses renewals (ciaddr set) but grants new leases.
	r.srv.set(func(s *server) {
		s.policy = func(mt layers.DHCPMsgType, d *layers.DHCPv4) reply {
			if mt == layers.DHCPMsgTypeRequest && !d.ClientIP.IsUnspecified() {
				return nak
			}
			return answer
		}
	})
	r.waitFor(t, "bound again after a NAK", func(s Stats) bool { return s.Naks >= 1 && s.Leases >= 2 })
	r.checkBound(t)
	if !strings.Contains(r.log(), "dropped 10.0.0.50/24: DHCPNAK") {
		t.Errorf("log %s", r.log())
	}
	if st := r.c.Stats(); st.Renewals != 0 {
		t.Errorf("stats %+v", st)
	}
}

func TestLostPackets(t *testing.T) {
	r := newRig(t)
	var lostDisc, lostOffer, lostReq, lostAck int
	r.ctap.setLose(func(f frame) bool {
		switch {
		case f.msgType == layers.DHCPMsgTypeDiscover && lostDisc < 2:
			lostDisc++
			return true
		case f.msgType == layers.DHCPMsgTypeRequest && lostReq < 1:
			lostReq++
			return true
		}
		return false
	})
	r.stap.setLose(func(f frame) bool {
		switch {
		case f.msgType == layers.DHCPMsgTypeOffer && lostOffer < 1:
			lostOffer++
			return true
		case f.msgType == layers.DHCPMsgTypeAck && lostAck < 1:
			lostAck++
			return true
		}
		return false
	})
	r.start(t)
	r.waitFor(t, "bound", func(s Stats) bool { return s.Leases == 1 })
	r.checkBound(t)
	st := r.c.Stats()
	if st.Discovers != 4 || st.Requests != 3 || st.Retransmits != 5 {
		t.Errorf("stats %+v: want 4 DISCOVERs and 3 REQUESTs (2+1 and 1+1 lost), 5 retransmissions", st)
	}
	// Retransmissions keep the xid and count seconds up (RFC 2131 §4.4.1).
	fs := r.ctap.dhcpFrames()
	var secs uint16
	for i, f := range fs[:7] {
		if f.dhcp.Xid != fs[0].dhcp.Xid {
			t.Errorf("frame %d: xid %#x, first %#x", i, f.dhcp.Xid, fs[0].dhcp.Xid)
		}
		if f.dhcp.Secs < secs {
			t.Errorf("frame %d: secs %d went back from %d", i, f.dhcp.Secs, secs)
		}
		secs = f.dhcp.Secs
	}
	if secs == 0 {
		t.Error("secs stayed 0 across retransmissions")
	}
}

func TestWrongXIDIgnored(t *testing.T) {
	r := newRig(t)
	r.srv.set(func(s *server) {
		s.extra = func(d *layers.DHCPv4) [][]byte {
			fake := *d
			fake.Xid ^= 0x5a5a
			off := s.build(&fake, Offer, 60, 0, 0)
			ack := s.build(&fake, Ack, 60, 0, 0)
			nk := s.build(&fake, Nak, 0, 0, 0)
			return [][]byte{off, ack, nk}
		}
	})
	r.start(t)
	r.waitFor(t, "bound", func(s Stats) bool { return s.Leases == 1 })
	r.checkBound(t)
	st := r.c.Stats()
	if st.WrongXID < 6 || st.Naks != 0 {
		t.Errorf("stats %+v: want ≥6 wrong-xid replies dropped, no NAK taken", st)
	}
	if l, _ := r.c.Lease(); l.Duration.Seconds() != 120 {
		t.Errorf("lease %v: taken from a wrong-xid reply", l.Duration)
	}
}

func TestGarbageIgnored(t *testing.T) {
	r := newRig(t)
	r.srv.set(func(s *server) {
		s.extra = func(d *layers.DHCPv4) [][]byte {
			good := s.build(d, Offer, 60, 0, 0)
			if slices.ContainsFunc(d.Options, func(o layers.DHCPOption) bool {
				return o.Type == layers.DHCPOptMessageType && o.Data[0] == byte(layers.DHCPMsgTypeRequest)
			}) {
				good = s.build(d, Ack, 60, 0, 0)
			}
			short := good[:100]
			cookie := bytes.Clone(good)
			cookie[236] = 0
			request := bytes.Clone(good)
			request[0] = OpRequest
			other := bytes.Clone(good)
			other[33] ^= 1
			runaway := bytes.Clone(good[:240])
			runaway = append(runaway, 53, 200, 2)
			noID := s.build(d, Offer, 60, 0, 0)
			noID[240+3] = 99 // option 54 renamed: no server identifier
			wrongType := s.build(d, Release, 0, 0, 0)
			return [][]byte{[]byte("garbage"), short, cookie, request, other, runaway, noID, wrongType}
		}
	})
	r.start(t)
	r.waitFor(t, "bound", func(s Stats) bool { return s.Leases == 1 })
	r.checkBound(t)
	st := r.c.Stats()
	if st.Garbage < 8 || st.NotReply < 2 || st.WrongCHAdr < 2 || st.BadReply < 1 || st.Unexpected < 2 {
		t.Errorf("stats %+v: want every kind of bad reply counted", st)
	}
	if st.LastError == "" {
		t.Error("no last error recorded")
	}
}

func TestRequestingGivesUpAfterTries(t *testing.T) {
	r := newRig(t)
	r.srv.set(func(s *server) {
		s.policy = func(mt layers.DHCPMsgType, _ *layers.DHCPv4) reply {
			if mt == layers.DHCPMsgTypeRequest {
				return ignore
			}
			return answer
		}
	})
	r.start(t)
	r.waitFor(t, "back in SELECTING", func(s Stats) bool { return s.Requests >= RequestTries && s.Discovers >= 2 })
	st := r.c.Stats()
	if st.Requests < RequestTries || st.Leases != 0 {
		t.Errorf("stats %+v", st)
	}
	// Only the requests of the first transaction were sent before the
	// second DISCOVER.
	fs := r.ctap.dhcpFrames()
	var before int
	for _, f := range fs[1:] {
		if f.msgType == layers.DHCPMsgTypeDiscover {
			break
		}
		before++
	}
	if before != RequestTries {
		t.Errorf("%d REQUESTs before the client went back to DISCOVER, want %d", before, RequestTries)
	}
}

func TestInfiniteLease(t *testing.T) {
	r := newRig(t)
	r.srv.set(func(s *server) { s.lease = 0xffffffff })
	r.start(t)
	r.waitFor(t, "bound", func(s Stats) bool { return s.Leases == 1 })
	if st := r.c.Status(); st.LeaseS != -1 || st.State != "bound" {
		t.Errorf("status %+v", st)
	}
}

// TestZeroLeaseNoStorm: a server granting only zero-second leases gets
// them refused and counted, no address is installed, and the client asks
// no faster than its backoff: at most 4 REQUESTs and a DISCOVER per
// REQUESTING round of 4+8+16+32 s (± 1 s each). It used to take each zero
// lease, drop it at once and start over.
func TestZeroLeaseNoStorm(t *testing.T) {
	r := newRig(t)
	r.srv.set(func(s *server) { s.lease = 0 })
	r.start(t)
	start := r.clock.Now()
	r.waitFor(t, "eight REQUESTs", func(s Stats) bool { return s.Requests >= 8 })
	elapsed := r.clock.Now().Sub(start)
	st := r.c.Stats()
	if st.Leases != 0 || st.Expiries != 0 {
		t.Fatalf("stats %+v: a zero lease was taken", st)
	}
	if st.BadReply < 7 || !strings.Contains(st.LastError, "lease time of 0") {
		t.Errorf("stats %+v: want every zero lease refused and counted", st)
	}
	// The first round alone waits 4, 8, 16 and 32 s (less 1 s of jitter
	// each) before the next DISCOVER; a client that takes each zero lease
	// and starts over sends 8 REQUESTs in about 24 s.
	if min := 15*FirstTimeout - 4*Jitter; elapsed < min {
		t.Errorf("8 REQUESTs in %v of client time, want at least %v (the first round's backoff)", elapsed, min)
	}
	for _, p := range r.leased() {
		if !p.Addr().IsUnspecified() {
			t.Errorf("client holds %v", p)
		}
	}
}

// TestConflictDeclined: the server's own host answers ARP for the address
// it offers; the client probes it (RFC 5227 probes from 0.0.0.0), declines
// it (RFC 2131 §4.4.1), waits and binds once the address is free.
func TestConflictDeclined(t *testing.T) {
	r := newRig(t)
	taken := tcpip.ProtocolAddress{Protocol: ipv4.ProtocolNumber,
		AddressWithPrefix: tcpip.AddressWithPrefix{Address: tcpip.AddrFrom4(leaseIP.As4()), PrefixLen: 24}}
	if err := r.ss.AddProtocolAddress(1, taken, stack.AddressProperties{}); err != nil {
		t.Fatal(err)
	}
	var declines []*layers.DHCPv4
	r.srv.set(func(s *server) {
		s.policy = func(mt layers.DHCPMsgType, d *layers.DHCPv4) reply {
			if mt == layers.DHCPMsgTypeDecline {
				declines = append(declines, d)
				if err := r.ss.RemoveAddress(1, taken.AddressWithPrefix.Address); err != nil {
					t.Errorf("freeing the address: %v", err)
				}
			}
			return answer
		}
	})
	r.start(t)
	r.waitFor(t, "bound after declining", func(s Stats) bool { return s.Leases == 1 })
	r.checkBound(t)
	st := r.c.Stats()
	if st.Conflicts != 1 || st.Declines != 1 {
		t.Errorf("stats %+v: want one conflict, one DHCPDECLINE", st)
	}
	r.srv.set(func(*server) {
		if len(declines) != 1 {
			t.Fatalf("server saw %d DHCPDECLINEs", len(declines))
		}
		d := declines[0]
		if v, _ := optData(d, layers.DHCPOptRequestIP); !bytes.Equal(v, leaseIP.AsSlice()) {
			t.Errorf("DECLINE option 50 = %v", v)
		}
		if v, _ := optData(d, layers.DHCPOptServerID); !bytes.Equal(v, serverIP.AsSlice()) {
			t.Errorf("DECLINE option 54 = %v", v)
		}
		if !d.ClientIP.IsUnspecified() {
			t.Errorf("DECLINE ciaddr %v", d.ClientIP)
		}
	})
	// The ARP probes went out from 0.0.0.0 for the offered address.
	var probes int
	r.ctap.mu.Lock()
	for _, f := range r.ctap.frames {
		p := gopacket.NewPacket(f.raw, layers.LayerTypeEthernet, gopacket.Default)
		if a, ok := p.Layer(layers.LayerTypeARP).(*layers.ARP); ok && a.Operation == layers.ARPRequest &&
			bytes.Equal(a.SourceProtAddress, []byte{0, 0, 0, 0}) && bytes.Equal(a.DstProtAddress, leaseIP.AsSlice()) {
			probes++
		}
	}
	r.ctap.mu.Unlock()
	if probes < 3 {
		t.Errorf("%d ARP probes for %v from 0.0.0.0; want the declined try's and the bound one's", probes, leaseIP)
	}
}

func TestNewErrors(t *testing.T) {
	if _, err := New(Config{}); err == nil {
		t.Error("New without a stack succeeded")
	}
	r := newRig(t)
	if _, err := New(Config{Stack: r.cs, NIC: 7}); err == nil {
		t.Error("New on a missing NIC succeeded")
	}
	if _, err := New(Config{Stack: r.cs, NIC: 1}); err == nil {
		t.Error("second client on port 68 succeeded")
	}
}

// TestStaleReplyAfterNewTransaction: a reply that receive queued just
// before a new transaction began is not taken by the new one.
func TestStaleReplyAfterNewTransaction(t *testing.T) {
	r := newRig(t)
	old := r.c.newXID()
	ack := &Message{Op: OpReply, XID: old, CHAddr: [6]byte([]byte(clientMAC))}
	ack.Set(OptMessageType, []byte{byte(Ack)})
	r.c.newXID()
	r.c.rx <- ack
	m, err := r.c.await(context.Background(), FirstTimeout, func(*Message) bool { return true })
	if err != nil || m != nil {
		t.Fatalf("await took %+v, %v", m, err)
	}
	if st := r.c.Stats(); st.WrongXID != 1 {
		t.Errorf("stats %+v: want the stale reply counted as wrong xid", st)
	}
}
