package dhcp

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"time"
)

// usable reports whether a is an address a host may take.
func usable(a netip.Addr) bool {
	return a.Is4() && !a.IsUnspecified() && !a.IsLoopback() && !a.IsMulticast() && a != netip.AddrFrom4([4]byte{255, 255, 255, 255})
}

// broadcastOf returns the directed broadcast address of p (RFC 919).
func broadcastOf(p netip.Prefix) netip.Addr {
	a := binary.BigEndian.Uint32(p.Masked().Addr().AsSlice())
	a |= 1<<(32-p.Bits()) - 1
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], a)
	return netip.AddrFrom4(b)
}

// hostOf reports whether a is a host address of p: inside it, and neither
// its network address nor its broadcast address (RFC 1122 §3.2.1.3: the
// all-zeros and all-ones host numbers are never a host's own).
func hostOf(p netip.Prefix, a netip.Addr) bool {
	return usable(a) && p.Contains(a) && a != p.Masked().Addr() && a != broadcastOf(p)
}

// offered returns the address a DHCPOFFER or DHCPACK gives, with the
// prefix of its subnet mask (option 1; classful without one), or why it
// cannot be taken: an unusable address, a mask that is not contiguous or
// leaves fewer than two host numbers, or the subnet's network or
// broadcast address (a host taking either would answer, or send, as the
// whole subnet).
func offered(m *Message) (netip.Prefix, string) {
	if !usable(m.YIAddr) {
		return netip.Prefix{}, fmt.Sprintf("unusable address %v", m.YIAddr)
	}
	bits := classful(m.YIAddr)
	if v, ok := m.Options[OptSubnetMask]; ok {
		b, ok := maskBits(v)
		if !ok || b == 0 || b > 30 {
			return netip.Prefix{}, fmt.Sprintf("subnet mask % x", v)
		}
		bits = b
	}
	p := netip.PrefixFrom(m.YIAddr, bits)
	if !hostOf(p, m.YIAddr) {
		return netip.Prefix{}, fmt.Sprintf("address %v, the network or broadcast address of %v", m.YIAddr, p.Masked())
	}
	return p, ""
}

// leaseTimes returns the lease duration, T1 and T2 of a lease of secs
// seconds (option 51) with the server's T1 and T2 (options 58 and 59,
// ok1/ok2 false when absent).
//
// The arithmetic is done in seconds, in 64 bits, before any conversion:
// 0.875 × a lease in nanoseconds overflows int64 for leases over 41.7
// years (2^63 ns / 7), which made T1 and T2 negative and the client
// renew on every DHCPACK. Every value is at most 2^32 - 2 s, 4.3 × 10^18
// ns, which a time.Duration holds.
//
// A T1 or T2 of 0, and values out of order (RFC 2131 §4.4.5 wants T1 <
// T2 < lease), are treated as absent, and the defaults of §4.4.5 apply:
// T1 = 0.5 × lease, T2 = 0.875 × lease. A server's T2 that stays is kept
// even when the default T1 would pass it: then T1 takes half of T2.
func leaseTimes(secs uint32, t1 uint32, ok1 bool, t2 uint32, ok2 bool) (lease, r1, r2 time.Duration) {
	l := uint64(secs)
	d2 := l - l/8 // 0.875 × lease, rounded up to whole seconds
	if ok2 && t2 > 0 && uint64(t2) < l {
		d2 = uint64(t2)
	}
	d1 := l / 2
	switch {
	case ok1 && t1 > 0 && uint64(t1) < d2:
		d1 = uint64(t1)
	case d1 >= d2 && d2 > 0:
		d1 = d2 / 2
	}
	d1 = min(d1, d2)
	return time.Duration(l) * time.Second, time.Duration(d1) * time.Second, time.Duration(d2) * time.Second
}

// leaseFrom turns a DHCPACK into a lease starting at sent, or counts it
// as bad and returns nil.
func (c *Client) leaseFrom(m *Message, sent time.Time) *Lease {
	bad := func(why string) *Lease {
		c.count(func(s *Stats) { s.BadReply++; s.LastError = "DHCPACK " + why })
		return nil
	}
	p, why := offered(m)
	if why != "" {
		return bad("with " + why)
	}
	server, ok := m.Addr(OptServerID)
	if !ok || !usable(server) {
		return bad("without a server identifier")
	}
	secs, ok := m.Uint32(OptLeaseTime)
	if !ok {
		return bad("without a lease time")
	}
	if secs == 0 {
		// An address for no time: taking it would install the address
		// and remove it at once, and start over. Refused like any bad
		// ACK, it leaves the client waiting out its timers.
		return bad("with a lease time of 0")
	}
	l := &Lease{Server: server, Start: sent, Addr: p}
	if rs, ok := m.Addrs(OptRouter); ok {
		// A router must be on the link (RFC 2132 §3.5 lists "routers on
		// the client's subnet"): a default route via an address outside
		// the subnet has no next hop we can resolve, and would send every
		// off-link packet into ARP for a host that is not there. The first
		// router on the subnet is taken; if none is, the lease is kept
		// without a default route and the refusal counted. (Classless
		// static routes, RFC 3442, are not requested.)
		for _, r := range rs {
			if hostOf(p, r) && r != m.YIAddr {
				l.Gateway = r
				break
			}
		}
		if !l.Gateway.IsValid() {
			c.count(func(s *Stats) {
				s.BadRouter++
				s.LastError = fmt.Sprintf("DHCPACK routers %v: none is a host of %v; no default route", rs, p.Masked())
			})
		}
	}
	if ds, ok := m.Addrs(OptDNS); ok {
		for _, d := range ds[:min(len(ds), maxDNS)] {
			if usable(d) {
				l.DNS = append(l.DNS, d)
			}
		}
	}
	if secs == 0xffffffff {
		l.Duration, l.T1, l.T2 = Infinite, Infinite, Infinite
		return l
	}
	t1, ok1 := m.Uint32(OptRenewalTime)
	t2, ok2 := m.Uint32(OptRebindingTime)
	l.Duration, l.T1, l.T2 = leaseTimes(secs, t1, ok1, t2, ok2)
	return l
}

func classful(a netip.Addr) int {
	switch b := a.As4()[0]; {
	case b < 128:
		return 8
	case b < 192:
		return 16
	default:
		return 24
	}
}

// maskBits returns the prefix length of a contiguous 4-byte mask.
func maskBits(v []byte) (int, bool) {
	if len(v) != 4 {
		return 0, false
	}
	m := binary.BigEndian.Uint32(v)
	bits := 0
	for m&0x80000000 != 0 {
		bits++
		m <<= 1
	}
	return bits, m == 0
}

func maskBytes(bits int) []byte {
	m := make([]byte, 4)
	for i := 0; i < bits; i++ {
		m[i/8] |= 0x80 >> (i % 8)
	}
	return m
}
