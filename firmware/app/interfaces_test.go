package app

import (
	"net/netip"
	"slices"
	"testing"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
)

// TestAddInterfaceDHCPAndStatic: a second interface takes its own lease
// from the DHCP server on its link (one client per NIC), a third its
// static address; /stats shows each; the default route stays with NIC
// 1's lease, the first that brought one.
func TestAddInterfaceDHCPAndStatic(t *testing.T) {
	ep1, mac, ss1 := newPair(t)
	serveDHCP(t, ss1)
	var con console
	n, err := StartNetwork(ep1, mac, NetConfig{DHCP: true}, &con)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Stack.Close(); n.Stack.Wait() })
	t.Cleanup(n.stopDHCP)
	ep2, _, ss2 := newPair(t)
	serveDHCP(t, ss2)
	if err := n.Stack.CreateNIC(2, ep2); err != nil {
		t.Fatal(err)
	}
	o, err := n.AddInterface(2, NetConfig{DHCP: true, Hostname: "tamanic"}, &con)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(o.stopDHCP)
	<-o.DHCP.Bound()
	ep3, _, _ := newPair(t)
	if err := n.Stack.CreateNIC(3, ep3); err != nil {
		t.Fatal(err)
	}
	if _, err := n.AddInterface(3, NetConfig{Static: netip.MustParsePrefix("10.0.3.1/24"), Gateway: netip.MustParseAddr("10.0.3.2")}, &con); err != nil {
		t.Fatal(err)
	}
	if _, err := n.AddInterface(4, NetConfig{DHCP: true}, &con); err == nil {
		t.Error("AddInterface on a missing NIC succeeded")
	}

	st := statsIPv4(t, n)
	if st.NIC != 1 || st.Address != "10.0.0.50/24" || len(st.Interfaces) != 2 {
		t.Fatalf("/stats ipv4 %+v", st)
	}
	e, x := st.Interfaces[0], st.Interfaces[1]
	if e.NIC != 2 || e.Mode != "dhcp" || e.Address != "10.0.0.50/24" || e.DHCP == nil || e.DHCP.State != "bound" || e.DHCP.LeaseS != 3600 {
		t.Errorf("NIC 2 in /stats: %+v dhcp %+v", e, e.DHCP)
	}
	if x.NIC != 3 || x.Mode != "static" || x.Address != "10.0.3.1/24" || x.DHCP != nil {
		t.Errorf("NIC 3 in /stats: %+v", x)
	}
	var addrs []tcpip.AddressWithPrefix
	for _, a := range n.Stack.NICInfo()[2].ProtocolAddresses {
		if a.Protocol == ipv4.ProtocolNumber {
			addrs = append(addrs, a.AddressWithPrefix)
		}
	}
	if !slices.ContainsFunc(addrs, func(a tcpip.AddressWithPrefix) bool { return a.Address == tcpip.AddrFrom4([4]byte{10, 0, 0, 50}) }) {
		t.Errorf("NIC 2 addresses %v: no lease", addrs)
	}
	var defaults []tcpip.NICID
	for _, rt := range n.Stack.GetRouteTable() {
		if rt.Destination.Prefix() == 0 && rt.Destination.ID().BitLen() == 32 {
			defaults = append(defaults, rt.NIC)
		}
	}
	if !slices.Equal(defaults, []tcpip.NICID{1}) {
		t.Errorf("IPv4 default routes on NICs %v, want NIC 1's only", defaults)
	}
}
