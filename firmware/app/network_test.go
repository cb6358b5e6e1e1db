package app

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/link/ethernet"
	"gvisor.dev/gvisor/pkg/tcpip/link/pipe"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"

	"github.com/tamanic/tamanic/dhcp"
	"github.com/tamanic/tamanic/internal/stacktest"
)

func TestParseNetConfig(t *testing.T) {
	for _, c := range []struct {
		ip, gw, dhcp string
		want         NetConfig
		err          bool
	}{
		{"", "", "", NetConfig{DHCP: true}, false},
		{"10.0.0.1/24", "10.0.0.2", "", NetConfig{Static: netip.MustParsePrefix("10.0.0.1/24"), Gateway: netip.MustParseAddr("10.0.0.2")}, false},
		{"10.0.0.1/24", "", "on", NetConfig{DHCP: true, Static: netip.MustParsePrefix("10.0.0.1/24")}, false},
		{"10.0.0.1/24", "", "off", NetConfig{Static: netip.MustParsePrefix("10.0.0.1/24")}, false},
		{"", "", "off", NetConfig{}, true},
		{"10.0.0.1", "", "", NetConfig{}, true},
		{"fe80::1/64", "", "", NetConfig{}, true},
		{"10.0.0.1/24", "nope", "", NetConfig{}, true},
		{"", "", "maybe", NetConfig{}, true},
	} {
		got, err := ParseNetConfig(c.ip, c.gw, c.dhcp)
		if (err != nil) != c.err {
			t.Errorf("%q %q %q: error %v", c.ip, c.gw, c.dhcp, err)
			continue
		}
		if err == nil && (got.DHCP != c.want.DHCP || got.Static != c.want.Static || got.Gateway != c.want.Gateway) {
			t.Errorf("%q %q %q: %+v, want %+v", c.ip, c.gw, c.dhcp, got, c.want)
		}
	}
	if c, err := BuildNetConfig(); err != nil || !c.DHCP {
		t.Errorf("default build: %+v %v, want DHCP", c, err)
	}
}

func newPair(t *testing.T) (client stack.LinkEndpoint, mac [6]byte, srv *stack.Stack) {
	mac = [6]byte{2, 0, 0, 0, 0, 0x11}
	a, b := pipe.New(tcpip.LinkAddress(mac[:]), "\x02\x00\x00\x00\x00\x22", 1500)
	srv = stack.New(stack.Options{
		NetworkProtocols:   []stack.NetworkProtocolFactory{ipv4.NewProtocol},
		TransportProtocols: []stack.TransportProtocolFactory{udp.NewProtocol},
	})
	if err := srv.CreateNIC(1, ethernet.New(b)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close(); srv.Wait() })
	return ethernet.New(a), mac, srv
}

// serveDHCP gives s the address 10.0.0.2/24 and runs a DHCP server on it
// offering 10.0.0.50/24, router 10.0.0.2, DNS 10.0.0.3.
func serveDHCP(t *testing.T, s *stack.Stack) {
	if err := s.AddProtocolAddress(1, tcpip.ProtocolAddress{Protocol: ipv4.ProtocolNumber,
		AddressWithPrefix: tcpip.AddressWithPrefix{Address: tcpip.AddrFrom4([4]byte{10, 0, 0, 2}), PrefixLen: 24}}, stack.AddressProperties{}); err != nil {
		t.Fatal(err)
	}
	stacktest.ServeDHCP(t, s, 1, netip.MustParsePrefix("10.0.0.50/24"), netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("10.0.0.3"))
}

// console collects what StartNetwork prints; onLine is called per line.
type console struct {
	mu     sync.Mutex
	buf    strings.Builder
	onLine func(string)
}

func (c *console) Write(b []byte) (int, error) {
	c.mu.Lock()
	c.buf.Write(b)
	f := c.onLine
	c.mu.Unlock()
	if f != nil {
		f(string(b))
	}
	return len(b), nil
}

func (c *console) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.String()
}

func statsIPv4(t *testing.T, n *Network) NetStatus {
	t.Helper()
	srv := &Server{Ctl: &fakeCtl{}, Net: n, Boot: time.Now()}
	w := httptest.NewRecorder()
	srv.stats(w, httptest.NewRequest(http.MethodGet, "/stats", nil))
	var doc struct {
		IPv4 NetStatus `json:"ipv4"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &doc); err != nil {
		t.Fatalf("/stats: %v\n%s", err, w.Body)
	}
	return doc.IPv4
}

func TestStartNetworkDHCP(t *testing.T) {
	ep, mac, ss := newPair(t)
	serveDHCP(t, ss)
	var con console
	n, err := StartNetwork(ep, mac, NetConfig{DHCP: true, Static: netip.MustParsePrefix("10.9.9.9/24")}, &con)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.stopDHCP(); n.Stack.Close(); n.Stack.Wait() })
	if got := n.Addr(); got != netip.MustParsePrefix("10.0.0.50/24") {
		t.Errorf("Addr %v, want the lease", got)
	}
	st := statsIPv4(t, n)
	if st.Mode != "dhcp" || st.Address != "10.0.0.50/24" || st.Gateway != "10.0.0.2" || st.DHCP == nil ||
		st.DHCP.State != "bound" || st.DHCP.Server != "10.0.0.2" || st.DHCP.LeaseS != 3600 || st.DHCP.T1S != 1800 ||
		st.DHCP.T2S != 3150 || len(st.DHCP.DNS) != 1 || st.DHCP.Stats.Leases != 1 {
		t.Errorf("/stats ipv4 %+v dhcp %+v", st, st.DHCP)
	}
	if !strings.Contains(con.String(), "dhcp: bound 10.0.0.50/24") {
		t.Errorf("console %q", con.String())
	}
}

func TestStartNetworkStatic(t *testing.T) {
	ep, mac, _ := newPair(t)
	n, err := StartNetwork(ep, mac, NetConfig{Static: netip.MustParsePrefix("10.0.0.1/24"), Gateway: netip.MustParseAddr("10.0.0.2")}, &console{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Stack.Close(); n.Stack.Wait() })
	if n.DHCP != nil || n.Addr() != netip.MustParsePrefix("10.0.0.1/24") {
		t.Errorf("static network: DHCP %v addr %v", n.DHCP, n.Addr())
	}
	if st := statsIPv4(t, n); st.Mode != "static" || st.Address != "10.0.0.1/24" || st.Gateway != "10.0.0.2" || st.DHCP != nil {
		t.Errorf("/stats ipv4 %+v", st)
	}
	if _, err := StartNetwork(ep, mac, NetConfig{}, &console{}); err == nil {
		t.Error("no DHCP and no address accepted")
	}
}

func TestStartNetworkFallsBackToStatic(t *testing.T) {
	ep, mac, _ := newPair(t) // no server
	var con console
	n, err := StartNetwork(ep, mac, NetConfig{DHCP: true, Static: netip.MustParsePrefix("10.0.0.1/24"), DHCPWait: 20 * time.Millisecond}, &con)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Stack.Close(); n.Stack.Wait() })
	if n.Addr() != netip.MustParsePrefix("10.0.0.1/24") || n.DHCP.State() != dhcp.Stopped {
		t.Errorf("addr %v DHCP state %v", n.Addr(), n.DHCP.State())
	}
	st := statsIPv4(t, n)
	if st.Mode != "static-fallback" || st.Address != "10.0.0.1/24" || st.DHCP == nil || st.DHCP.Stats.Discovers == 0 {
		t.Errorf("/stats ipv4 %+v", st)
	}
	if !strings.Contains(con.String(), "DHCP: no lease after 20ms") || !strings.Contains(con.String(), "falling back to the static 10.0.0.1/24") {
		t.Errorf("console %q", con.String())
	}
	// 0.0.0.0 is gone with the client; only the static address remains.
	for _, a := range n.Stack.NICInfo()[1].ProtocolAddresses {
		if a.Protocol == ipv4.ProtocolNumber && a.AddressWithPrefix.Address.Unspecified() {
			t.Errorf("0.0.0.0 left on the NIC")
		}
	}
}

// TestStartNetworkKeepsTrying: without a static address, StartNetwork
// says on the console that it has no lease yet and waits on; a server
// that appears later is found (at the client's next retransmission).
func TestStartNetworkKeepsTrying(t *testing.T) {
	ep, mac, ss := newPair(t)
	var once sync.Once
	con := &console{}
	con.onLine = func(l string) {
		if strings.Contains(l, "still trying") {
			once.Do(func() { serveDHCP(t, ss) })
		}
	}
	n, err := StartNetwork(ep, mac, NetConfig{DHCP: true, DHCPWait: 20 * time.Millisecond}, con)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.stopDHCP(); n.Stack.Close(); n.Stack.Wait() })
	if n.Addr() != netip.MustParsePrefix("10.0.0.50/24") {
		t.Errorf("addr %v", n.Addr())
	}
	if !strings.Contains(con.String(), "DHCP: no lease after 20ms (1 DISCOVERs, 0 offers), still trying") {
		t.Errorf("console %q", con.String())
	}
}
