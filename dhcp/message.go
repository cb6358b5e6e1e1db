package dhcp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
)

// BOOTP operation codes (RFC 2131 §2, "op").
const (
	OpRequest = 1 // BOOTREQUEST
	OpReply   = 2 // BOOTREPLY
)

// Ports (RFC 2131 §4.1).
const (
	ServerPort = 67
	ClientPort = 68
)

// MessageType is the value of option 53 (RFC 2132 §9.6).
type MessageType uint8

// Message types (RFC 2132 §9.6).
const (
	Discover MessageType = 1
	Offer    MessageType = 2
	Request  MessageType = 3
	Decline  MessageType = 4
	Ack      MessageType = 5
	Nak      MessageType = 6
	Release  MessageType = 7
	Inform   MessageType = 8
)

var typeNames = [...]string{"", "DHCPDISCOVER", "DHCPOFFER", "DHCPREQUEST", "DHCPDECLINE", "DHCPACK", "DHCPNAK", "DHCPRELEASE", "DHCPINFORM"}

func (t MessageType) String() string {
	if int(t) < len(typeNames) && t != 0 {
		return typeNames[t]
	}
	return fmt.Sprintf("DHCP type %d", uint8(t))
}

// Option codes this package reads or writes (RFC 2132).
const (
	OptPad           = 0
	OptSubnetMask    = 1  // §3.3
	OptRouter        = 3  // §3.5
	OptDNS           = 6  // §3.8
	OptHostName      = 12 // §3.14
	OptRequestedIP   = 50 // §9.1
	OptLeaseTime     = 51 // §9.2
	OptOverload      = 52 // §9.3
	OptMessageType   = 53 // §9.6
	OptServerID      = 54 // §9.7
	OptParamRequest  = 55 // §9.8
	OptMessage       = 56 // §9.9
	OptMaxMessageLen = 57 // §9.10
	OptRenewalTime   = 58 // §9.11 (T1)
	OptRebindingTime = 59 // §9.12 (T2)
	OptClientID      = 61 // §9.14
	OptEnd           = 255
)

// Magic is the options cookie (RFC 2131 §3, RFC 2132 §2): 99.130.83.99.
var Magic = [4]byte{99, 130, 83, 99}

// Fixed-format field sizes and offsets (RFC 2131 §2, figure 1).
const (
	fixedLen   = 236 // op .. file
	snameOff   = 44
	snameLen   = 64
	fileOff    = 108
	fileLen    = 128
	optionsOff = fixedLen + 4 // after the magic cookie
	// MaxMessageLen bounds what Parse accepts and Marshal produces: an
	// Ethernet MTU's worth of UDP payload (1500 - 20 - 8).
	MaxMessageLen = 1472
	// MinMessageLen is the shortest message Marshal produces: a BOOTP
	// message with the full 64-byte vend field (RFC 951), which some
	// relays and servers still require (RFC 1542 §2.1).
	MinMessageLen = 300
)

// Errors Parse returns, wrapped with detail; test them with errors.Is.
var (
	ErrShort    = errors.New("dhcp: message shorter than the fixed header and cookie")
	ErrLong     = errors.New("dhcp: message longer than MaxMessageLen")
	ErrCookie   = errors.New("dhcp: wrong magic cookie")
	ErrOption   = errors.New("dhcp: malformed option")
	ErrHardware = errors.New("dhcp: not Ethernet (htype 1, hlen 6)")
)

// Message is a DHCP message: the BOOTP fixed fields and the options.
// Addresses are IPv4; the zero netip.Addr marshals as 0.0.0.0.
type Message struct {
	Op     uint8
	XID    uint32
	Secs   uint16
	Flags  uint16 // FlagBroadcast or 0
	CIAddr netip.Addr
	YIAddr netip.Addr
	SIAddr netip.Addr
	GIAddr netip.Addr
	CHAddr [6]byte
	// Options maps each option code to its value, concatenated over
	// every instance of the code (RFC 3396 §5) and over the options,
	// file and sname fields when the overload option says so. Pad, End
	// and Overload are not stored.
	Options map[uint8][]byte
	// Order is the order of first appearance of each option code, so
	// that Marshal writes options in a reproducible order.
	Order []uint8
}

// FlagBroadcast asks the server to broadcast its reply (RFC 2131 §2).
const FlagBroadcast = 0x8000

// Set sets option code to v (replacing any earlier value).
func (m *Message) Set(code uint8, v []byte) {
	if m.Options == nil {
		m.Options = map[uint8][]byte{}
	}
	if _, ok := m.Options[code]; !ok {
		m.Order = append(m.Order, code)
	}
	m.Options[code] = v
}

// Type returns option 53, or 0 if it is absent or not one byte long.
func (m *Message) Type() MessageType {
	v := m.Options[OptMessageType]
	if len(v) != 1 {
		return 0
	}
	return MessageType(v[0])
}

// Addr returns the option code as one IPv4 address.
func (m *Message) Addr(code uint8) (netip.Addr, bool) {
	v := m.Options[code]
	if len(v) != 4 {
		return netip.Addr{}, false
	}
	return netip.AddrFrom4([4]byte(v)), true
}

// Addrs returns the option code as a list of IPv4 addresses; ok is false
// when it is absent, empty or not a multiple of 4 bytes.
func (m *Message) Addrs(code uint8) (a []netip.Addr, ok bool) {
	v := m.Options[code]
	if len(v) == 0 || len(v)%4 != 0 {
		return nil, false
	}
	for i := 0; i < len(v); i += 4 {
		a = append(a, netip.AddrFrom4([4]byte(v[i:i+4])))
	}
	return a, true
}

// Uint32 returns the option code as a 32-bit big-endian number.
func (m *Message) Uint32(code uint8) (uint32, bool) {
	v := m.Options[code]
	if len(v) != 4 {
		return 0, false
	}
	return binary.BigEndian.Uint32(v), true
}

// Parse decodes a DHCP message. It accepts only Ethernet hardware
// addresses, requires the magic cookie, and rejects options that run past
// the end of their field, an overload option naming fields that are absent
// or out of range, and messages longer than MaxMessageLen. It never
// panics and never retains b.
func Parse(b []byte) (*Message, error) {
	if len(b) < optionsOff {
		return nil, fmt.Errorf("%w: %d bytes", ErrShort, len(b))
	}
	if len(b) > MaxMessageLen {
		return nil, fmt.Errorf("%w: %d bytes", ErrLong, len(b))
	}
	if b[1] != 1 || b[2] != 6 {
		return nil, fmt.Errorf("%w: htype %d hlen %d", ErrHardware, b[1], b[2])
	}
	if [4]byte(b[fixedLen:optionsOff]) != Magic {
		return nil, fmt.Errorf("%w: % x", ErrCookie, b[fixedLen:optionsOff])
	}
	m := &Message{
		Op:     b[0],
		XID:    binary.BigEndian.Uint32(b[4:]),
		Secs:   binary.BigEndian.Uint16(b[8:]),
		Flags:  binary.BigEndian.Uint16(b[10:]),
		CIAddr: netip.AddrFrom4([4]byte(b[12:16])),
		YIAddr: netip.AddrFrom4([4]byte(b[16:20])),
		SIAddr: netip.AddrFrom4([4]byte(b[20:24])),
		GIAddr: netip.AddrFrom4([4]byte(b[24:28])),
		CHAddr: [6]byte(b[28:34]),
	}
	overload, err := m.parseOptions(b[optionsOff:], "options", true)
	if err != nil {
		return nil, err
	}
	// RFC 2132 §9.3: the file field first, then sname.
	if overload&1 != 0 {
		if _, err := m.parseOptions(b[fileOff:fileOff+fileLen], "file", false); err != nil {
			return nil, err
		}
	}
	if overload&2 != 0 {
		if _, err := m.parseOptions(b[snameOff:snameOff+snameLen], "sname", false); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// parseOptions appends the options in b to m. In the options field
// (main), an End option is required and the overload value is returned.
func (m *Message) parseOptions(b []byte, field string, main bool) (overload byte, err error) {
	for i := 0; i < len(b); {
		code := b[i]
		switch code {
		case OptPad:
			i++
			continue
		case OptEnd:
			return overload, nil
		}
		if i+1 >= len(b) {
			return 0, fmt.Errorf("%w: option %d in %s has no length", ErrOption, code, field)
		}
		n := int(b[i+1])
		if i+2+n > len(b) {
			return 0, fmt.Errorf("%w: option %d in %s: length %d runs past the field", ErrOption, code, field, n)
		}
		v := b[i+2 : i+2+n]
		i += 2 + n
		if code == OptOverload {
			if !main || n != 1 || v[0] < 1 || v[0] > 3 {
				return 0, fmt.Errorf("%w: overload option %v in %s", ErrOption, v, field)
			}
			overload = v[0]
			continue
		}
		if m.Options == nil {
			m.Options = map[uint8][]byte{}
		}
		old, seen := m.Options[code]
		if !seen {
			m.Order = append(m.Order, code)
		}
		m.Options[code] = append(old[:len(old):len(old)], v...)
	}
	if main {
		return 0, fmt.Errorf("%w: no end option", ErrOption)
	}
	return overload, nil
}

// Marshal encodes m, padded to MinMessageLen. Options longer than 255
// bytes are split into several instances (RFC 3396). It fails if the
// result would exceed MaxMessageLen or an address is not IPv4.
func (m *Message) Marshal() ([]byte, error) {
	b := make([]byte, optionsOff, MinMessageLen)
	b[0], b[1], b[2] = m.Op, 1, 6
	binary.BigEndian.PutUint32(b[4:], m.XID)
	binary.BigEndian.PutUint16(b[8:], m.Secs)
	binary.BigEndian.PutUint16(b[10:], m.Flags)
	for i, a := range []netip.Addr{m.CIAddr, m.YIAddr, m.SIAddr, m.GIAddr} {
		if a.IsValid() && !a.Is4() {
			return nil, fmt.Errorf("dhcp: marshal: address %v is not IPv4", a)
		}
		if a.IsValid() {
			a4 := a.As4()
			copy(b[12+4*i:], a4[:])
		}
	}
	copy(b[28:], m.CHAddr[:])
	copy(b[fixedLen:], Magic[:])
	for _, code := range m.Order {
		v, ok := m.Options[code]
		if !ok || code == OptPad || code == OptEnd || code == OptOverload {
			continue
		}
		for first := true; first || len(v) > 0; first = false {
			n := min(len(v), 255)
			b = append(b, code, byte(n))
			b = append(b, v[:n]...)
			v = v[n:]
		}
	}
	b = append(b, OptEnd)
	for len(b) < MinMessageLen {
		b = append(b, OptPad)
	}
	if len(b) > MaxMessageLen {
		return nil, fmt.Errorf("dhcp: marshal: %d bytes is over %d", len(b), MaxMessageLen)
	}
	return b, nil
}
