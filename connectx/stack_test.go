package connectx_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/refs"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/network/arp"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv6"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"

	"github.com/tamanic/tamanic/connectx/connectxtest"
	"github.com/tamanic/tamanic/dma/dmatest"
	"github.com/tamanic/tamanic/fec"
	"github.com/tamanic/tamanic/fec/fectest"
	"github.com/tamanic/tamanic/internal/pkttest"
	"github.com/tamanic/tamanic/netstack"
	"github.com/tamanic/tamanic/netstack/fecdev"
)

var bigFlag = flag.Bool("connectx.big", false, "move 64 MiB each way in the stack tests even under -race")

// TestMain turns on gVisor's reference leak checking: a PacketBuffer the
// driver never completed (or completed twice) fails the run.
func TestMain(m *testing.M) {
	flag.Parse()
	refs.SetLeakMode(refs.LeaksPanic)
	code := m.Run()
	refs.DoLeakCheck()
	os.Exit(code)
}

// bulk is the per-direction transfer: 64 MiB, or 4 MiB under the race
// detector (about 20 times slower) unless -connectx.big; -short cuts it to
// 1 MiB.
func bulk() int64 {
	switch {
	case *bigFlag:
		return 64 << 20
	case testing.Short():
		return 1 << 20
	case raceEnabled:
		return 4 << 20
	}
	return 64 << 20
}

// host is a gVisor stack on one NIC (ConnectX or ENET model).
type host struct {
	ep    *netstack.Endpoint
	s     *stack.Stack
	v4    tcpip.Address
	v6    tcpip.Address
	port  connectxtest.Port
	diag  func() string
	close func()
}

func newStack(t testing.TB, dev netstack.Device, i byte, lso bool) *host {
	t.Helper()
	ep, err := netstack.New(netstack.Options{Device: dev, TSO: lso, GRO: true, PollInterval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	s := stack.New(stack.Options{
		NetworkProtocols:   []stack.NetworkProtocolFactory{ipv4.NewProtocol, ipv6.NewProtocol, arp.NewProtocol},
		TransportProtocols: []stack.TransportProtocolFactory{tcp.NewProtocol, udp.NewProtocol},
	})
	if err := s.CreateNIC(1, ep); err != nil {
		t.Fatalf("CreateNIC: %v", err)
	}
	h := &host{ep: ep, s: s, v4: tcpip.AddrFrom4([4]byte{10, 0, 0, i}),
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
	return h
}

// cxHost is a stack on a ConnectX driver on its model. The model's
// Activity channel stands for the interrupt line: a goroutine polls the
// driver when it fires.
func cxHost(t testing.TB, i byte, lso bool) (*host, *connectxtest.Rig) {
	mem := dmatest.New(t, dmatest.Options{CoherentSize: 4 << 20, CachedSize: 32 << 20})
	rig := connectxtest.NewRig(t, connectxtest.RigOptions{Mem: mem, MAC: [6]byte{2, 0xC7, 0, 0, 0, i}, NoDone: true})
	h := newStack(t, rig.NIC, i, lso)
	h.port = rig.Model
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-rig.Model.Activity():
				rig.NIC.Poll()
			case <-stop:
				return
			}
		}
	}()
	h.diag = func() string {
		return fmt.Sprintf("endpoint %+v\ndriver %+v\nmodel %+v\n", h.ep.Stats(), rig.NIC.Stats(), rig.Model.Stats())
	}
	h.close = func() {
		h.s.Close()
		h.s.RemoveNIC(1)
		h.s.Wait()
		close(stop)
		wg.Wait()
	}
	return h, rig
}

// enetHost is a stack on the ENET driver on its model (as netstack's tests
// build it), software TSO when lso.
func enetHost(t testing.TB, i byte, lso bool) *host {
	var dev *fecdev.Device
	mem := dmatest.New(t, dmatest.Options{CachedSize: 64 << 20})
	rig := fectest.NewRig(t, fectest.RigOptions{Mem: mem, MAC: [6]byte{2, 0, 0, 0, 0, i}, NoDone: true, Config: func(c *fec.Config) {
		c.Interrupts = true
		c.TxRing, c.RxRing = 512, 512
		c.OnTxDone = func(cookie any, err error) { dev.Done(cookie, err) }
	}})
	dev = fecdev.New(rig.NIC)
	h := newStack(t, dev, i, lso)
	h.port = connectxtest.ENET(rig.Model)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-rig.Model.IRQ():
				rig.NIC.Interrupt()
			case <-stop:
				return
			}
		}
	}()
	h.diag = func() string {
		st := rig.NIC.Stats()
		return fmt.Sprintf("endpoint %+v\nenet tx %+v rx %+v\nmodel %+v\n", h.ep.Stats(), st.Tx, st.Rx, rig.Model.Stats())
	}
	h.close = func() {
		h.s.Close()
		h.s.RemoveNIC(1)
		h.s.Wait()
		close(stop)
		wg.Wait()
	}
	return h
}

// wireCheck decodes every frame with gopacket and recomputes its checksums.
type wireCheck struct {
	frames, big atomic.Int64
	mu          sync.Mutex
	bad         []string
}

func (c *wireCheck) tap(from int, f []byte) {
	c.frames.Add(1)
	if len(f) > 1518 {
		c.big.Add(1)
	}
	if err := pkttest.Checksums(f); err != nil {
		c.mu.Lock()
		if len(c.bad) < 5 {
			c.bad = append(c.bad, fmt.Sprintf("from %d: %v", from, err))
		}
		c.mu.Unlock()
	}
}

func (c *wireCheck) check(t testing.TB) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.bad) > 0 || c.big.Load() > 0 {
		t.Errorf("%d of %d frames oversized; bad frames: %v", c.big.Load(), c.frames.Load(), c.bad)
	}
	if c.frames.Load() == 0 {
		t.Error("no frame crossed the wire")
	}
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
func transfer(t testing.TB, from, to *host, v6 bool, port uint16, n int64) error {
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
		c.SetDeadline(time.Now().Add(90 * time.Second))
		h := sha256.New()
		m, err := io.Copy(h, c)
		if err != nil || m != n {
			errc <- fmt.Errorf("received %d of %d bytes: %v", m, n, err)
			return
		}
		got <- h.Sum(nil)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := gonet.DialContextTCP(ctx, from.s, tcpip.FullAddress{NIC: 1, Addr: dst, Port: port}, proto)
	if err != nil {
		return fmt.Errorf("dial: %v", err)
	}
	c.SetDeadline(time.Now().Add(90 * time.Second))
	want := sha256.New()
	src := io.LimitReader(&prng{rand.New(rand.NewPCG(uint64(port), 7))}, n)
	if _, err := io.Copy(io.MultiWriter(c, want), src); err != nil {
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
	case <-time.After(2 * time.Minute):
		return fmt.Errorf("transfer of %d bytes timed out", n)
	}
	return nil
}

// lossy drops about one frame in 97 and delays one in 53 (reordering).
func lossy() func(int, []byte) connectxtest.Action {
	var mu sync.Mutex
	k := 0
	return func(_ int, f []byte) connectxtest.Action {
		mu.Lock()
		defer mu.Unlock()
		k++
		switch {
		case len(f) < 200:
			return connectxtest.Pass // keep handshakes and ACK-only frames simple
		case k%97 == 0:
			return connectxtest.Drop
		case k%53 == 0:
			return connectxtest.Delay
		}
		return connectxtest.Pass
	}
}

func runPair(t *testing.T, a, b *host, w *connectxtest.Wire, lossyWire bool) {
	chk := &wireCheck{}
	w.SetTap(chk.tap)
	if lossyWire {
		w.SetFilter(lossy())
	}
	n := bulk()
	t.Logf("%d bytes each way, IPv4 then IPv6", n)
	for i, v6 := range []bool{false, true} {
		if err := transfer(t, a, b, v6, uint16(5000+2*i), n); err != nil {
			t.Fatalf("a->b v6=%v: %v\n== a\n%s== b\n%s", v6, err, a.diag(), b.diag())
		}
		if err := transfer(t, b, a, v6, uint16(5001+2*i), n); err != nil {
			t.Fatalf("b->a v6=%v: %v\n== a\n%s== b\n%s", v6, err, a.diag(), b.diag())
		}
	}
	chk.check(t)
}

func TestStackConnectXToConnectX(t *testing.T) {
	for _, c := range []struct {
		name       string
		lso, lossy bool
	}{{"lso", true, false}, {"nolso", false, false}, {"lso-lossy", true, true}} {
		t.Run(c.name, func(t *testing.T) {
			a, ra := cxHost(t, 1, c.lso)
			b, rb := cxHost(t, 2, c.lso)
			t.Cleanup(func() { a.close(); b.close() })
			w := connectxtest.Connect(a.port, b.port)
			runPair(t, a, b, w, c.lossy)
			if c.lso && ra.NIC.Stats().TxLSO == 0 {
				t.Error("no LSO send")
			}
			if st := rb.Model.Stats(); st.RxFrames == 0 {
				t.Errorf("model b received nothing: %+v", st)
			}
		})
	}
}

func TestStackConnectXToENET(t *testing.T) {
	for _, c := range []struct {
		name       string
		lso, lossy bool
	}{{"lso", true, false}, {"nolso", false, false}, {"lso-lossy", true, true}} {
		t.Run(c.name, func(t *testing.T) {
			a, ra := cxHost(t, 1, c.lso)
			b := enetHost(t, 2, c.lso)
			t.Cleanup(func() { a.close(); b.close() })
			w := connectxtest.Connect(a.port, b.port)
			runPair(t, a, b, w, c.lossy)
			if c.lso && ra.NIC.Stats().TxLSO == 0 {
				t.Error("no LSO send")
			}
		})
	}
}
