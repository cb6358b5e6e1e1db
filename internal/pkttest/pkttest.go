// Package pkttest checks frames with an independent decoder (gopacket), for
// tests: the project's own parser must never be what judges its output.
package pkttest

import (
	"encoding/binary"
	"fmt"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
)

// Checksums decodes an Ethernet frame with gopacket, recomputes its IPv4
// header and TCP/UDP checksums with gopacket and compares them with the
// frame's. ARP frames pass; IP fragments are checked for the header only
// (their transport checksum covers the reassembled datagram). A UDP
// checksum computed as zero must be sent as 0xFFFF (RFC 768); gopacket leaves
// it zero, so both are accepted then.
func Checksums(f []byte) error {
	p := gopacket.NewPacket(f, layers.LayerTypeEthernet, gopacket.NoCopy)
	if p.Layer(layers.LayerTypeARP) != nil {
		return nil
	}
	var nl gopacket.NetworkLayer
	if v4, ok := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4); ok {
		c := *v4
		buf := gopacket.NewSerializeBuffer()
		if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{ComputeChecksums: true}, &c, gopacket.Payload(v4.Payload)); err != nil {
			return err
		}
		if binary.BigEndian.Uint16(buf.Bytes()[10:]) != v4.Checksum {
			return fmt.Errorf("IPv4 header checksum %#x", v4.Checksum)
		}
		if v4.Flags&layers.IPv4MoreFragments != 0 || v4.FragOffset != 0 {
			return nil
		}
		nl = v4
	} else if v6, ok := p.Layer(layers.LayerTypeIPv6).(*layers.IPv6); ok {
		if p.Layer(layers.LayerTypeIPv6Fragment) != nil {
			return nil
		}
		nl = v6
	} else {
		return fmt.Errorf("undecodable frame %x", f[:min(len(f), 40)])
	}
	o := gopacket.SerializeOptions{ComputeChecksums: true}
	buf := gopacket.NewSerializeBuffer()
	switch l := p.TransportLayer().(type) {
	case *layers.TCP:
		c := *l
		c.SetNetworkLayerForChecksum(nl)
		if err := gopacket.SerializeLayers(buf, o, &c, gopacket.Payload(l.Payload)); err != nil {
			return err
		}
		if binary.BigEndian.Uint16(buf.Bytes()[16:]) != l.Checksum {
			return fmt.Errorf("TCP checksum %#x", l.Checksum)
		}
	case *layers.UDP:
		c := *l
		c.SetNetworkLayerForChecksum(nl)
		if err := gopacket.SerializeLayers(buf, o, &c, gopacket.Payload(l.Payload)); err != nil {
			return err
		}
		want := binary.BigEndian.Uint16(buf.Bytes()[6:])
		if want != l.Checksum && !(want == 0 && l.Checksum == 0xFFFF) {
			return fmt.Errorf("UDP checksum %#x, want %#x", l.Checksum, want)
		}
	}
	return nil
}

// Sum adds b to s as 16-bit big-endian words, an odd last byte padded
// with zero (RFC 1071): a reference independent of internal/pkt's
// assembly, for tests and device models that compute what hardware would.
func Sum(s uint32, b []byte) uint32 {
	for len(b) >= 2 {
		s += uint32(b[0])<<8 | uint32(b[1])
		b = b[2:]
	}
	if len(b) == 1 {
		s += uint32(b[0]) << 8
	}
	return s
}

// Fold folds the carries of a Sum into 16 bits (not complemented).
func Fold(s uint32) uint16 {
	for s > 0xFFFF {
		s = s>>16 + s&0xFFFF
	}
	return uint16(s)
}
