package e1000e_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/network/arp"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv6"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"

	"github.com/tamanic/tamanic/e1000e"
	"github.com/tamanic/tamanic/internal/pkttest"
	"github.com/tamanic/tamanic/netstack"
)

// host is a gVisor stack on the netstack endpoint on an 82574L model.
type host struct {
	r     *rig
	ep    *netstack.Endpoint
	s     *stack.Stack
	v4    tcpip.Address
	v6    tcpip.Address
	close func()
}

func newHost(t testing.TB, i byte, tso bool, mode e1000e.IRQMode) *host {
	t.Helper()
	var ep *netstack.Endpoint
	r := newRig(t, rigOptions{mac: i, mode: mode, noTrace: true, cfg: func(c *e1000e.Config) { c.TxRing = 512 }})
	dev := e1000e.Device{NIC: r.nic}
	var err error
	ep, err = netstack.New(netstack.Options{Device: dev, TSO: tso, GRO: true, AckFilter: true,
		PollInterval: pollFor(mode)})
	if err != nil {
		t.Fatal(err)
	}
	r.nic.SetAllMulticast(true) // gVisor never says which groups it joins
	s := stack.New(stack.Options{
		NetworkProtocols:   []stack.NetworkProtocolFactory{ipv4.NewProtocol, ipv6.NewProtocol, arp.NewProtocol},
		TransportProtocols: []stack.TransportProtocolFactory{tcp.NewProtocol, udp.NewProtocol},
	})
	if err := s.CreateNIC(1, ep); err != nil {
		t.Fatalf("CreateNIC: %v", err)
	}
	h := &host{r: r, ep: ep, s: s, v4: tcpip.AddrFrom4([4]byte{10, 0, 2, i}),
		v6: tcpip.AddrFrom16([16]byte{0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, i})}
	for _, a := range []tcpip.ProtocolAddress{
		{Protocol: ipv4.ProtocolNumber, AddressWithPrefix: tcpip.AddressWithPrefix{Address: h.v4, PrefixLen: 24}},
		{Protocol: ipv6.ProtocolNumber, AddressWithPrefix: tcpip.AddressWithPrefix{Address: h.v6, PrefixLen: 64}},
	} {
		if err := s.AddProtocolAddress(1, a, stack.AddressProperties{}); err != nil {
			t.Fatalf("AddProtocolAddress: %v", err)
		}
	}
	s.SetRouteTable([]tcpip.Route{{Destination: header.IPv4EmptySubnet, NIC: 1}, {Destination: header.IPv6EmptySubnet, NIC: 1}})
	sb := tcpip.TCPSendBufferSizeRangeOption{Min: 4096, Default: 1 << 20, Max: 4 << 20}
	rb := tcpip.TCPReceiveBufferSizeRangeOption{Min: 4096, Default: 1 << 20, Max: 4 << 20}
	s.SetTransportProtocolOption(tcp.ProtocolNumber, &sb)
	s.SetTransportProtocolOption(tcp.ProtocolNumber, &rb)
	if mode != e1000e.Polled {
		r.serveIRQs(mode == e1000e.MSI)
	}
	h.close = func() {
		s.Close()
		s.RemoveNIC(1)
		s.Wait()
	}
	return h
}

func pollFor(m e1000e.IRQMode) time.Duration {
	if m == e1000e.Polled {
		return 200 * time.Microsecond
	}
	return 0
}

// wire joins two models: every frame one transmits is checked with
// gopacket (IPv4 header and TCP/UDP checksums) and injected into the other.
type wire struct {
	frames, bad, maxLen atomic.Int64
	mu                  sync.Mutex
	firstBad            string
}

func connect(a, b *host) *wire {
	w := &wire{}
	link := func(to *host) func([]byte) {
		return func(f []byte) {
			w.frames.Add(1)
			if int64(len(f)) > w.maxLen.Load() {
				w.maxLen.Store(int64(len(f)))
			}
			if err := pkttest.Checksums(f); err != nil {
				w.bad.Add(1)
				w.mu.Lock()
				if w.firstBad == "" {
					w.firstBad = fmt.Sprintf("%v: % x", err, f[:min(len(f), 80)])
				}
				w.mu.Unlock()
			}
			to.r.model.Inject(f)
		}
	}
	a.r.model.OnTransmit(link(b))
	b.r.model.OnTransmit(link(a))
	return w
}

func pair(t *testing.T, tso bool, mode e1000e.IRQMode) (a, b *host, w *wire) {
	a, b = newHost(t, 1, tso, mode), newHost(t, 2, tso, mode)
	w = connect(a, b)
	t.Cleanup(func() {
		a.close()
		b.close()
		if n := w.bad.Load(); n > 0 {
			t.Errorf("%d frames on the wire failed gopacket's checksum check; first: %s", n, w.firstBad)
		}
		for _, h := range []*host{a, b} {
			if held := h.ep.Stats().TxHeld; held != 0 {
				t.Errorf("%d packets still held after close (NIC in flight %d, stats %+v, endpoint %+v)", held, h.r.nic.TxInFlight(), h.r.nic.Stats(), h.ep.Stats())
			}
		}
	})
	return a, b, w
}

type prng struct{ r *rand.Rand }

func (p *prng) Read(b []byte) (int, error) {
	for i := range b {
		b[i] = byte(p.r.Uint32())
	}
	return len(b), nil
}

// transfer sends n bytes from one host to the other over TCP and compares
// SHA-256 digests.
func transfer(from, to *host, v6 bool, port uint16, n int64) error {
	proto, dst := ipv4.ProtocolNumber, to.v4
	if v6 {
		proto, dst = ipv6.ProtocolNumber, to.v6
	}
	l, err := gonet.ListenTCP(to.s, tcpip.FullAddress{NIC: 1, Addr: dst, Port: port}, proto)
	if err != nil {
		return fmt.Errorf("listen: %v", err)
	}
	defer l.Close()
	got := make(chan []byte, 1)
	errc := make(chan error, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			errc <- err
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(2 * time.Minute))
		h := sha256.New()
		m, err := io.Copy(h, c)
		if err != nil || m != n {
			errc <- fmt.Errorf("received %d of %d bytes: %v", m, n, err)
			return
		}
		got <- h.Sum(nil)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := gonet.DialContextTCP(ctx, from.s, tcpip.FullAddress{NIC: 1, Addr: dst, Port: port}, proto)
	if err != nil {
		return fmt.Errorf("dial: %v", err)
	}
	c.SetDeadline(time.Now().Add(2 * time.Minute))
	want := sha256.New()
	src := &prng{r: rand.New(rand.NewPCG(uint64(port), 7))}
	if _, err := io.Copy(io.MultiWriter(c, want), io.LimitReader(src, n)); err != nil {
		c.Close()
		return fmt.Errorf("send: %v", err)
	}
	c.Close()
	select {
	case g := <-got:
		if !bytes.Equal(g, want.Sum(nil)) {
			return fmt.Errorf("SHA-256 mismatch after %d bytes", n)
		}
	case err := <-errc:
		return err
	case <-time.After(3 * time.Minute):
		return fmt.Errorf("transfer of %d bytes timed out", n)
	}
	return nil
}

// TestTCPOverModel moves data both ways over IPv4 and IPv6 between two
// gVisor stacks on 82574L models, with hardware TSO on and off, under
// INTx, MSI and polling.
func TestTCPOverModel(t *testing.T) {
	const n = 2 << 20
	for _, c := range []struct {
		name string
		tso  bool
		mode e1000e.IRQMode
	}{
		{"tso-intx", true, e1000e.INTx},
		{"notso-msi", false, e1000e.MSI},
		{"tso-polled", true, e1000e.Polled},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, b, w := pair(t, c.tso, c.mode)
			for i, v6 := range []bool{false, true} {
				if err := transfer(a, b, v6, uint16(5000+i), n); err != nil {
					t.Fatalf("a->b v6=%v: %v", v6, err)
				}
				if err := transfer(b, a, v6, uint16(6000+i), n); err != nil {
					t.Fatalf("b->a v6=%v: %v", v6, err)
				}
			}
			st := a.r.nic.Stats()
			t.Logf("a: %d frames queued, %d GSO packets -> %d segments, %d descriptors, %d contexts; wire %d frames, longest %d",
				st.Tx.Frames, st.Tx.GSOPackets, st.Tx.GSOSegs, st.Tx.Descs, st.Tx.Contexts, w.frames.Load(), w.maxLen.Load())
			ms := a.r.model.Stats()
			if c.tso {
				if st.Tx.GSOSegs <= st.Tx.GSOPackets || ms.TxTSO == 0 {
					t.Errorf("TSO on but no multi-segment packet went to the hardware: %+v, model %+v", st.Tx, ms)
				}
				hw := a.r.nic.HWStats()
				if hw.TSOContexts != uint64(ms.TxTSO) {
					t.Errorf("TSCTC %d, model segmented %d packets", hw.TSOContexts, ms.TxTSO)
				}
			} else if st.Tx.GSOPackets != 0 || ms.TxTSO != 0 {
				t.Errorf("TSO off but %d GSO packets", st.Tx.GSOPackets)
			}
			if w.maxLen.Load() > 1514 {
				t.Errorf("a %d-byte frame on the wire", w.maxLen.Load())
			}
			if st.Rx.CsumL4 == 0 {
				t.Errorf("no received frame had a hardware L4 verdict: %+v", st.Rx)
			}
			if c.mode == e1000e.MSI && ms.MSIs == 0 {
				t.Errorf("MSI mode but no MSI sent")
			}
		})
	}
}

// TestUDPFragmentsOverModel: UDP datagrams up to 60 KB, fragmented by
// gVisor, through the model both ways over IPv4 and IPv6.
func TestUDPFragmentsOverModel(t *testing.T) {
	a, b, _ := pair(t, true, e1000e.INTx)
	for _, v6 := range []bool{false, true} {
		proto, src, dst := ipv4.ProtocolNumber, a.v4, b.v4
		if v6 {
			proto, src, dst = ipv6.ProtocolNumber, a.v6, b.v6
		}
		srv, err := gonet.DialUDP(b.s, &tcpip.FullAddress{NIC: 1, Addr: dst, Port: 7}, nil, proto)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			buf := make([]byte, 1<<16)
			for {
				k, from, err := srv.ReadFrom(buf)
				if err != nil {
					return
				}
				srv.WriteTo(buf[:k], from)
			}
		}()
		cl, err := gonet.DialUDP(a.s, &tcpip.FullAddress{NIC: 1, Addr: src}, &tcpip.FullAddress{NIC: 1, Addr: dst, Port: 7}, proto)
		if err != nil {
			t.Fatal(err)
		}
		for _, size := range []int{1, 1472, 1473, 8000, 60000} {
			d := make([]byte, size)
			for i := range d {
				d[i] = byte(i*7 + size)
			}
			var got []byte
			for try := 0; try < 5 && got == nil; try++ {
				cl.SetDeadline(time.Now().Add(2 * time.Second))
				if _, err := cl.Write(d); err != nil {
					t.Fatal(err)
				}
				buf := make([]byte, 1<<16)
				if k, err := cl.Read(buf); err == nil {
					got = buf[:k]
				}
			}
			if !bytes.Equal(got, d) {
				t.Fatalf("v6=%v: echo of %d bytes: got %d bytes", v6, size, len(got))
			}
		}
		cl.Close()
		srv.Close()
	}
}
