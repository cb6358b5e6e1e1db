package pkttest

import (
	"net"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
)

// The checker must reject what is wrong, or it proves nothing.
func TestChecksumsRejectsCorruption(t *testing.T) {
	eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2}, EthernetType: layers.EthernetTypeIPv4}
	ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolTCP, SrcIP: net.IPv4(10, 0, 0, 1).To4(), DstIP: net.IPv4(10, 0, 0, 2).To4()}
	tcp := &layers.TCP{SrcPort: 1, DstPort: 2, Seq: 7, ACK: true, Window: 100}
	tcp.SetNetworkLayerForChecksum(ip)
	buf := gopacket.NewSerializeBuffer()
	gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, eth, ip, tcp, gopacket.Payload("payload bytes"))
	good := buf.Bytes()
	if err := Checksums(good); err != nil {
		t.Fatalf("valid frame rejected: %v", err)
	}
	for _, off := range []int{14 + 10, 14 + 20 + 16, len(good) - 1} {
		bad := append([]byte(nil), good...)
		bad[off] ^= 0x40
		if Checksums(bad) == nil {
			t.Fatalf("corruption at offset %d not detected", off)
		}
	}
	if Checksums([]byte{1, 2, 3}) == nil {
		t.Fatal("garbage accepted")
	}
}
