package stacktest

import (
	"bytes"
	"net/netip"
	"testing"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"
	"gvisor.dev/gvisor/pkg/waiter"

	"github.com/tamanic/tamanic/dhcp"
)

// ServeDHCP runs a minimal DHCP server on NIC nic of s (which must have a
// UDP stack and server's address) until the test ends: every DISCOVER gets
// an OFFER, every REQUEST an ACK, of lease's address with its prefix, a
// one-hour lease, server as server identifier and router, and dns as DNS
// servers if any; replies are broadcast.
func ServeDHCP(t *testing.T, s *stack.Stack, nic tcpip.NICID, lease netip.Prefix, server netip.Addr, dns ...netip.Addr) {
	t.Helper()
	var wq waiter.Queue
	ep, terr := s.NewEndpoint(udp.ProtocolNumber, ipv4.ProtocolNumber, &wq)
	if terr != nil {
		t.Fatal(terr)
	}
	ep.SocketOptions().SetBroadcast(true)
	if terr := ep.Bind(tcpip.FullAddress{NIC: nic, Port: dhcp.ServerPort}); terr != nil {
		t.Fatal(terr)
	}
	m := make([]byte, 4)
	for i := range m {
		bits := max(0, min(8, lease.Bits()-8*i))
		m[i] = byte(0xff << (8 - bits))
	}
	var dnsOpt []byte
	for _, d := range dns {
		dnsOpt = append(dnsOpt, d.AsSlice()...)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		we, ch := waiter.NewChannelEntry(waiter.ReadableEvents | waiter.EventHUp | waiter.EventErr)
		wq.EventRegister(&we)
		defer wq.EventUnregister(&we)
		for {
			var b bytes.Buffer
			_, err := ep.Read(&b, tcpip.ReadOptions{})
			if _, ok := err.(*tcpip.ErrWouldBlock); ok {
				<-ch
				if ep.Readiness(waiter.EventHUp|waiter.EventErr) != 0 {
					return
				}
				continue
			}
			if err != nil {
				return
			}
			req, perr := dhcp.Parse(b.Bytes())
			if perr != nil {
				continue
			}
			typ := dhcp.Offer
			if req.Type() == dhcp.Request {
				typ = dhcp.Ack
			}
			r := &dhcp.Message{Op: dhcp.OpReply, XID: req.XID, Flags: req.Flags, CHAddr: req.CHAddr, YIAddr: lease.Addr()}
			r.Set(dhcp.OptMessageType, []byte{byte(typ)})
			r.Set(dhcp.OptServerID, server.AsSlice())
			r.Set(dhcp.OptLeaseTime, []byte{0, 0, 0x0e, 0x10})
			r.Set(dhcp.OptSubnetMask, m)
			r.Set(dhcp.OptRouter, server.AsSlice())
			if len(dnsOpt) > 0 {
				r.Set(dhcp.OptDNS, dnsOpt)
			}
			out, merr := r.Marshal()
			if merr != nil {
				// The test's own reply: a failure here is the helper's bug.
				t.Errorf("stacktest: DHCP server: marshal %v: %v", typ, merr)
				continue
			}
			if _, werr := ep.Write(bytes.NewReader(out), tcpip.WriteOptions{To: &tcpip.FullAddress{NIC: nic,
				Addr: tcpip.AddrFrom4([4]byte{255, 255, 255, 255}), Port: dhcp.ClientPort}}); werr != nil {
				if _, closed := werr.(*tcpip.ErrClosedForSend); closed {
					return // the test is ending
				}
				t.Errorf("stacktest: DHCP server: send %v: %v", typ, werr)
			}
		}
	}()
	t.Cleanup(func() { ep.Close(); <-done })
}
