package dhcp

import (
	"bytes"
	"errors"
	"net"
	"net/netip"
	"slices"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
)

func sample() *Message {
	m := &Message{Op: OpReply, XID: 0xdeadbeef, Secs: 7, Flags: FlagBroadcast,
		YIAddr: netip.MustParseAddr("10.0.0.50"), SIAddr: netip.MustParseAddr("10.0.0.2"),
		CHAddr: [6]byte{2, 0, 0, 0, 0, 1}}
	m.Set(OptMessageType, []byte{byte(Ack)})
	m.Set(OptServerID, []byte{10, 0, 0, 2})
	m.Set(OptLeaseTime, []byte{0, 0, 0x0e, 0x10})
	m.Set(OptDNS, []byte{10, 0, 0, 3, 10, 0, 0, 4})
	return m
}

func TestMarshalDecodedByGopacket(t *testing.T) {
	b, err := sample().Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != MinMessageLen {
		t.Errorf("length %d, want the BOOTP minimum %d", len(b), MinMessageLen)
	}
	var d layers.DHCPv4
	if err := d.DecodeFromBytes(b, gopacket.NilDecodeFeedback); err != nil {
		t.Fatalf("gopacket: %v", err)
	}
	if d.Operation != layers.DHCPOpReply || d.Xid != 0xdeadbeef || d.Secs != 7 || d.Flags != FlagBroadcast ||
		!d.YourClientIP.Equal(net.IPv4(10, 0, 0, 50)) || !d.NextServerIP.Equal(net.IPv4(10, 0, 0, 2)) ||
		!bytes.Equal(d.ClientHWAddr, []byte{2, 0, 0, 0, 0, 1}) || d.HardwareLen != 6 || d.HardwareType != layers.LinkTypeEthernet {
		t.Errorf("gopacket decoded %+v", d)
	}
	want := map[layers.DHCPOpt][]byte{
		layers.DHCPOptMessageType: {byte(Ack)},
		layers.DHCPOptServerID:    {10, 0, 0, 2},
		layers.DHCPOptLeaseTime:   {0, 0, 0x0e, 0x10},
		layers.DHCPOptDNS:         {10, 0, 0, 3, 10, 0, 0, 4},
	}
	got := map[layers.DHCPOpt][]byte{}
	for _, o := range d.Options {
		if o.Type != layers.DHCPOptPad && o.Type != layers.DHCPOptEnd {
			got[o.Type] = o.Data
		}
	}
	if len(got) != len(want) {
		t.Errorf("options %v, want %v", got, want)
	}
	for k, v := range want {
		if !bytes.Equal(got[k], v) {
			t.Errorf("option %v = %v, want %v", k, got[k], v)
		}
	}
}

func TestParseGopacketSerialized(t *testing.T) {
	d := &layers.DHCPv4{Operation: layers.DHCPOpReply, HardwareType: layers.LinkTypeEthernet, HardwareLen: 6,
		Xid: 42, ClientIP: net.IPv4zero, YourClientIP: net.IPv4(192, 168, 1, 9), NextServerIP: net.IPv4zero,
		RelayAgentIP: net.IPv4(192, 168, 1, 254), ClientHWAddr: net.HardwareAddr{2, 0, 0, 0, 0, 9},
		Options: layers.DHCPOptions{
			layers.NewDHCPOption(layers.DHCPOptMessageType, []byte{byte(Offer)}),
			layers.NewDHCPOption(layers.DHCPOptSubnetMask, []byte{255, 255, 255, 0}),
			layers.NewDHCPOption(layers.DHCPOptRouter, []byte{192, 168, 1, 1}),
		}}
	buf := gopacket.NewSerializeBuffer()
	if err := d.SerializeTo(buf, gopacket.SerializeOptions{FixLengths: true}); err != nil {
		t.Fatal(err)
	}
	m, err := Parse(buf.Bytes())
	if err != nil {
		t.Fatalf("Parse of gopacket's message: %v", err)
	}
	if m.Type() != Offer || m.XID != 42 || m.YIAddr != netip.MustParseAddr("192.168.1.9") ||
		m.GIAddr != netip.MustParseAddr("192.168.1.254") || m.CHAddr != [6]byte{2, 0, 0, 0, 0, 9} {
		t.Errorf("parsed %+v", m)
	}
	if r, ok := m.Addrs(OptRouter); !ok || r[0] != netip.MustParseAddr("192.168.1.1") {
		t.Errorf("router %v %v", r, ok)
	}
	if b, ok := maskBits(m.Options[OptSubnetMask]); !ok || b != 24 {
		t.Errorf("mask bits %d %v", b, ok)
	}
}

func TestParseErrors(t *testing.T) {
	good, err := sample().Marshal()
	if err != nil {
		t.Fatal(err)
	}
	mod := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	for _, c := range []struct {
		name string
		b    []byte
		want error
	}{
		{"empty", nil, ErrShort},
		{"header only", good[:236], ErrShort},
		{"too long", append(bytes.Clone(good), make([]byte, MaxMessageLen)...), ErrLong},
		{"htype", mod(func(b []byte) []byte { b[1] = 6; return b }), ErrHardware},
		{"hlen", mod(func(b []byte) []byte { b[2] = 16; return b }), ErrHardware},
		{"cookie", mod(func(b []byte) []byte { b[239] = 0; return b }), ErrCookie},
		{"no end", good[:240+3], ErrOption},
		{"length past end", append(bytes.Clone(good[:240]), 53, 9, 1), ErrOption},
		{"code without length", append(bytes.Clone(good[:240]), 53), ErrOption},
		{"overload value", append(bytes.Clone(good[:240]), 52, 1, 4, 255), ErrOption},
		{"overload length", append(bytes.Clone(good[:240]), 52, 2, 1, 1, 255), ErrOption},
		{"overload file runs off", mod(func(b []byte) []byte {
			b = append(b[:240], 52, 1, 1, 255)
			for len(b) < 300 {
				b = append(b, 0)
			}
			b[108], b[109] = 12, 200
			return b
		}), ErrOption},
	} {
		_, err := Parse(c.b)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
}

func TestParseOverloadAndConcatenation(t *testing.T) {
	b := make([]byte, 240, 300)
	b[0], b[1], b[2] = OpReply, 1, 6
	copy(b[236:], Magic[:])
	// Options field: message type, the first half of a split DNS option
	// (RFC 3396), overload = both fields.
	b = append(b, 53, 1, 2, 6, 4, 10, 0, 0, 3, 52, 1, 3, 255)
	// file carries the rest of the DNS option, then sname the server id;
	// RFC 2132 §9.3 reads file before sname.
	copy(b[108:], []byte{6, 4, 10, 0, 0, 4, 255})
	copy(b[44:], []byte{54, 4, 10, 0, 0, 2, 0, 255})
	m, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	if dns, _ := m.Addrs(OptDNS); !slices.Equal(dns, []netip.Addr{netip.MustParseAddr("10.0.0.3"), netip.MustParseAddr("10.0.0.4")}) {
		t.Errorf("DNS %v", dns)
	}
	if id, ok := m.Addr(OptServerID); !ok || id != netip.MustParseAddr("10.0.0.2") {
		t.Errorf("server id %v", id)
	}
	if _, ok := m.Options[OptOverload]; ok {
		t.Error("overload option stored")
	}
	// Parse does not alias b.
	b[240+7] = 99
	if dns, _ := m.Addrs(OptDNS); dns[0] != netip.MustParseAddr("10.0.0.3") {
		t.Error("parsed option aliases the input")
	}
}

func TestMarshalSplitsLongOptions(t *testing.T) {
	m := &Message{Op: OpRequest}
	long := bytes.Repeat([]byte{7}, 600)
	m.Set(OptHostName, long)
	b, err := m.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	p, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(p.Options[OptHostName], long) {
		t.Errorf("600-byte option came back as %d bytes", len(p.Options[OptHostName]))
	}
	if n := bytes.Count(b, []byte{OptHostName, 255}); n != 2 {
		t.Errorf("%d instances of 255 bytes, want 2 (then one of 90)", n)
	}
	m.Set(OptDNS, make([]byte, 2000))
	if _, err := m.Marshal(); err == nil {
		t.Error("Marshal of a message over MaxMessageLen succeeded")
	}
	if _, err := (&Message{CIAddr: netip.MustParseAddr("::1")}).Marshal(); err == nil {
		t.Error("Marshal with an IPv6 ciaddr succeeded")
	}
}

func TestAccessors(t *testing.T) {
	m := sample()
	if m.Type().String() != "DHCPACK" || MessageType(0).String() != "DHCP type 0" || MessageType(99).String() != "DHCP type 99" {
		t.Error("MessageType strings")
	}
	if v, ok := m.Uint32(OptLeaseTime); !ok || v != 3600 {
		t.Errorf("lease %d %v", v, ok)
	}
	if _, ok := m.Uint32(OptDNS); ok {
		t.Error("8-byte option read as uint32")
	}
	if _, ok := m.Addr(OptDNS); ok {
		t.Error("8-byte option read as one address")
	}
	m.Set(OptRouter, []byte{1, 2, 3})
	if _, ok := m.Addrs(OptRouter); ok {
		t.Error("3-byte option read as addresses")
	}
	m.Set(OptMessageType, []byte{1, 2})
	if m.Type() != 0 {
		t.Error("2-byte type accepted")
	}
	for _, c := range []struct {
		mask []byte
		bits int
		ok   bool
	}{{[]byte{255, 255, 255, 0}, 24, true}, {[]byte{255, 0, 255, 0}, 0, false}, {[]byte{255}, 0, false}, {[]byte{255, 255, 255, 255}, 32, true}} {
		if b, ok := maskBits(c.mask); ok != c.ok || (ok && b != c.bits) {
			t.Errorf("maskBits(%v) = %d %v", c.mask, b, ok)
		}
	}
	for a, want := range map[string]int{"10.1.2.3": 8, "172.16.0.1": 16, "192.168.0.1": 24} {
		if got := classful(netip.MustParseAddr(a)); got != want {
			t.Errorf("classful(%s) = %d", a, got)
		}
	}
	if State(42).String() != "state 42" || Rebinding.String() != "rebinding" {
		t.Error("State strings")
	}
}

// FuzzParse checks that Parse never panics, that what it accepts
// marshals and parses back to the same message, and that gopacket agrees
// on the fixed fields of every message Parse accepts.
func FuzzParse(f *testing.F) {
	good, _ := sample().Marshal()
	f.Add(good)
	f.Add(good[:240])
	f.Add(append(bytes.Clone(good[:240]), 52, 1, 3, 255))
	f.Add([]byte("garbage"))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Parse(b)
		if err != nil {
			return
		}
		var d layers.DHCPv4
		if err := d.DecodeFromBytes(b, gopacket.NilDecodeFeedback); err == nil {
			if d.Xid != m.XID || uint8(d.Operation) != m.Op || !bytes.Equal(d.YourClientIP.To4(), m.YIAddr.AsSlice()) {
				t.Fatalf("gopacket xid %#x op %d yiaddr %v; Parse %#x %d %v", d.Xid, d.Operation, d.YourClientIP, m.XID, m.Op, m.YIAddr)
			}
		}
		out, err := m.Marshal()
		if err != nil {
			// Only size may stop a parsed message from marshalling: the
			// overloaded fields move into the options field.
			return
		}
		m2, err := Parse(out)
		if err != nil {
			t.Fatalf("re-parse: %v", err)
		}
		if m2.Op != m.Op || m2.XID != m.XID || m2.Secs != m.Secs || m2.Flags != m.Flags || m2.CIAddr != m.CIAddr ||
			m2.YIAddr != m.YIAddr || m2.SIAddr != m.SIAddr || m2.GIAddr != m.GIAddr || m2.CHAddr != m.CHAddr ||
			!slices.Equal(m2.Order, m.Order) {
			t.Fatalf("round trip changed the message:\n%+v\n%+v", m, m2)
		}
		for k, v := range m.Options {
			if !bytes.Equal(m2.Options[k], v) {
				t.Fatalf("option %d: %x became %x", k, v, m2.Options[k])
			}
		}
	})
}
