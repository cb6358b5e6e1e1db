package app

import (
	"net/netip"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/link/pipe"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// TestServicesOnTwoInterfaces: one stack with two NICs runs the services
// on each (the i.MX7D firmware: ENET1 on any address it gets by DHCP, the
// 82574L on its static address), whichever starts first.
func TestServicesOnTwoInterfaces(t *testing.T) {
	for _, enetFirst := range []bool{false, true} {
		m1, m2 := [6]byte{2, 0, 0, 0, 0, 1}, [6]byte{2, 0, 0, 0, 0, 2}
		e1, _ := pipe.New(tcpip.LinkAddress(m1[:]), tcpip.LinkAddress(m1[:]), 1500)
		e2, _ := pipe.New(tcpip.LinkAddress(m2[:]), tcpip.LinkAddress(m2[:]), 1500)
		s, err := NewStack(e1, m1, netip.MustParsePrefix("10.0.0.1/24"), netip.MustParseAddr("10.0.0.2"))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.CreateNIC(2, e2); err != nil {
			t.Fatal(err)
		}
		a2 := tcpip.AddrFrom4([4]byte{10, 0, 2, 1})
		if err := s.AddProtocolAddress(2, tcpip.ProtocolAddress{Protocol: ipv4.ProtocolNumber,
			AddressWithPrefix: tcpip.AddressWithPrefix{Address: a2, PrefixLen: 24}}, stack.AddressProperties{}); err != nil {
			t.Fatal(err)
		}
		enet := &Server{Stack: s, NIC: 1, Ctl: &fakeCtl{}, Boot: time.Now()}
		second := &Server{Stack: s, NIC: 2, Addr: a2, Ctl: &fakeCtl{}, Boot: time.Now()}
		order := []*Server{second, enet}
		if enetFirst {
			order = []*Server{enet, second}
		}
		for _, srv := range order {
			if err := srv.Start(); err != nil {
				t.Fatalf("ENET first %v: NIC %d: %v", enetFirst, srv.NIC, err)
			}
		}
		s.Close()
	}
}
