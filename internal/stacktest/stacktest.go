// Package stacktest builds gVisor stacks on link endpoints for the drivers'
// tests and moves data between them over TCP, checking every byte by its
// SHA-256 digest.
//
// It is test support: it calls t.Fatal on set-up errors and is imported only
// by _test.go files.
package stacktest

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
	"gvisor.dev/gvisor/pkg/waiter"

	"github.com/tamanic/tamanic/internal/pkttest"
)

// NIC is the gVisor NIC number of the host's one link endpoint.
const NIC tcpip.NICID = 1

// Host is a gVisor stack on one link endpoint (NIC 1) with an IPv4 address
// and, unless IPv4Only, an IPv6 address, and a default route for each.
type Host struct {
	S  *stack.Stack
	V4 tcpip.Address
	V6 tcpip.Address // zero when IPv4Only
	// Diag, when set, describes the host's driver and model; a transfer
	// logs it when the receiver stalls.
	Diag func() string
}

// Options shape a Host.
type Options struct {
	// Net4 is the IPv4 /24 the host's address i is in; zero means 10.0.0.
	Net4 [3]byte
	// IPv4Only builds a stack with IPv4, ARP and TCP only (no IPv6
	// neighbour traffic on the wire, no UDP).
	IPv4Only bool
	// DefaultBuffers keeps gVisor's default TCP buffer sizes instead of
	// 1 MiB by default, 4 MiB at most.
	DefaultBuffers bool
	// NoSACK turns TCP SACK off, as the firmware's stack has it (gVisor's
	// default is on).
	NoSACK bool
}

// New builds a stack on ep, with addresses Net4.i/24 and fd00::i/64.
func New(t testing.TB, ep stack.LinkEndpoint, i byte, o Options) *Host {
	t.Helper()
	if o.Net4 == ([3]byte{}) {
		o.Net4 = [3]byte{10, 0, 0}
	}
	so := stack.Options{
		NetworkProtocols:   []stack.NetworkProtocolFactory{ipv4.NewProtocol, ipv6.NewProtocol, arp.NewProtocol},
		TransportProtocols: []stack.TransportProtocolFactory{tcp.NewProtocol, udp.NewProtocol},
	}
	if o.IPv4Only {
		so = stack.Options{
			NetworkProtocols:   []stack.NetworkProtocolFactory{ipv4.NewProtocol, arp.NewProtocol},
			TransportProtocols: []stack.TransportProtocolFactory{tcp.NewProtocol},
		}
	}
	s := stack.New(so)
	if err := s.CreateNIC(NIC, ep); err != nil {
		t.Fatalf("CreateNIC: %v", err)
	}
	h := &Host{S: s, V4: tcpip.AddrFrom4([4]byte{o.Net4[0], o.Net4[1], o.Net4[2], i})}
	addrs := []tcpip.ProtocolAddress{
		{Protocol: ipv4.ProtocolNumber, AddressWithPrefix: tcpip.AddressWithPrefix{Address: h.V4, PrefixLen: 24}},
	}
	routes := []tcpip.Route{{Destination: header.IPv4EmptySubnet, NIC: NIC}}
	if !o.IPv4Only {
		h.V6 = tcpip.AddrFrom16([16]byte{0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, i})
		addrs = append(addrs, tcpip.ProtocolAddress{Protocol: ipv6.ProtocolNumber,
			AddressWithPrefix: tcpip.AddressWithPrefix{Address: h.V6, PrefixLen: 64}})
		routes = append(routes, tcpip.Route{Destination: header.IPv6EmptySubnet, NIC: NIC})
	}
	for _, a := range addrs {
		if err := s.AddProtocolAddress(NIC, a, stack.AddressProperties{}); err != nil {
			t.Fatalf("AddProtocolAddress: %v", err)
		}
	}
	s.SetRouteTable(routes)
	if !o.DefaultBuffers {
		sb := tcpip.TCPSendBufferSizeRangeOption{Min: 4096, Default: 1 << 20, Max: 4 << 20}
		rb := tcpip.TCPReceiveBufferSizeRangeOption{Min: 4096, Default: 1 << 20, Max: 4 << 20}
		s.SetTransportProtocolOption(tcp.ProtocolNumber, &sb)
		s.SetTransportProtocolOption(tcp.ProtocolNumber, &rb)
	}
	if o.NoSACK {
		sack := tcpip.TCPSACKEnabled(false)
		if err := s.SetTransportProtocolOption(tcp.ProtocolNumber, &sack); err != nil {
			t.Fatalf("SACK: %v", err)
		}
	}
	return h
}

// Close closes the stack and waits for it. stack.Close leaves link
// endpoints running: RemoveNIC closes the host's, which stops the NIC and
// releases every packet still in flight.
func (h *Host) Close() {
	h.S.Close()
	h.S.RemoveNIC(NIC)
	h.S.Wait()
}

// Serve calls handle each time irq fires, as an interrupt controller runs a
// handler, until the returned function is called; that function waits for
// the last call to return.
func Serve(irq <-chan struct{}, handle func()) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-irq:
				handle()
			case <-done:
				return
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

// Wire checks frames as they cross a wire between two models: each is
// decoded with gopacket and its checksums recomputed (pkttest.Checksums).
// Tap is safe for concurrent use.
type Wire struct {
	frames, bad, maxLen atomic.Int64
	mu                  sync.Mutex
	first               []string
}

// Tap checks one frame.
func (w *Wire) Tap(f []byte) {
	w.frames.Add(1)
	for {
		m := w.maxLen.Load()
		if int64(len(f)) <= m || w.maxLen.CompareAndSwap(m, int64(len(f))) {
			break
		}
	}
	if err := pkttest.Checksums(f); err != nil {
		w.bad.Add(1)
		w.mu.Lock()
		if len(w.first) < 5 {
			w.first = append(w.first, fmt.Sprintf("%v: % x", err, f[:min(len(f), 80)]))
		}
		w.mu.Unlock()
	}
}

// Frames is how many frames Tap saw.
func (w *Wire) Frames() int64 { return w.frames.Load() }

// MaxLen is the length of the longest frame Tap saw.
func (w *Wire) MaxLen() int64 { return w.maxLen.Load() }

// Check fails t if a frame failed the checksum check, a frame was longer
// than maxLen, or (when some is set) no frame crossed at all.
func (w *Wire) Check(t testing.TB, maxLen int64, some bool) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	if n := w.bad.Load(); n > 0 {
		t.Errorf("%d of %d frames on the wire failed gopacket's checksum check; first: %v", n, w.frames.Load(), w.first)
	}
	if m := w.maxLen.Load(); m > maxLen {
		t.Errorf("a %d-byte frame on the wire (at most %d)", m, maxLen)
	}
	if some && w.frames.Load() == 0 {
		t.Error("no frame crossed the wire")
	}
}

// Stream is a deterministic pseudo-random byte stream for integrity checks.
func Stream(seed uint64) io.Reader { return &prng{rand.New(rand.NewPCG(seed, 7))} }

type prng struct{ r *rand.Rand }

func (p *prng) Read(b []byte) (int, error) {
	for i := range b {
		b[i] = byte(p.r.Uint32())
	}
	return len(b), nil
}

// Xfer shapes a transfer.
type Xfer struct {
	// Timeout bounds the whole transfer (a guard against hanging, not a
	// timing assertion); zero means 2 minutes.
	Timeout time.Duration
	// Received, when set, counts the bytes the receiver has read so far.
	Received *atomic.Int64
	// MSS, when set, is the receiver's MSS (TCP_MAXSEG on the listener).
	MSS int
	// Write, when set, is the size of the sender's writes (default
	// io.Copy's 32 KiB).
	Write int
	// Hold, when set, makes the receiver start reading only once this
	// many bytes were written (or 3 s have passed, if the sender blocks
	// before), so the window closes and the writes queue behind it.
	Hold int64
}

// Transfer sends n bytes of Stream(port) from one host to the other over
// TCP (IPv6 when v6) to port, and compares the SHA-256 digests of what was
// sent and what was received. When the receiver makes no progress for 10 s
// it logs both hosts' Diag once, so that a stall leaves evidence.
func Transfer(t testing.TB, from, to *Host, v6 bool, port uint16, n int64, x Xfer) error {
	proto, dst := ipv4.ProtocolNumber, to.V4
	if v6 {
		proto, dst = ipv6.ProtocolNumber, to.V6
	}
	if x.Timeout == 0 {
		x.Timeout = 2 * time.Minute
	}
	if x.Received == nil {
		x.Received = new(atomic.Int64)
	}
	l, err := listen(to.S, tcpip.FullAddress{NIC: NIC, Addr: dst, Port: port}, proto, x.MSS)
	if err != nil {
		return err
	}
	defer l.Close()
	defer watch(t, from, to, x.Received, n)()
	holdOver := make(chan struct{})
	if x.Hold == 0 {
		close(holdOver)
	}
	got := make(chan []byte, 1)
	errc := make(chan error, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			errc <- err
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(x.Timeout))
		select { // also if the sender blocks before the mark
		case <-holdOver:
		case <-time.After(3 * time.Second):
		}
		h := sha256.New()
		m, err := io.Copy(io.MultiWriter(h, counter{x.Received}), c)
		if err != nil || m != n {
			errc <- fmt.Errorf("received %d of %d bytes: %v", m, n, err)
			return
		}
		got <- h.Sum(nil)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := gonet.DialContextTCP(ctx, from.S, tcpip.FullAddress{NIC: NIC, Addr: dst, Port: port}, proto)
	if err != nil {
		return fmt.Errorf("dial: %v", err)
	}
	c.SetDeadline(time.Now().Add(x.Timeout))
	start := time.Now()
	defer func() {
		// A transfer this slow is worth seeing (the campaign counts it).
		if el := time.Since(start); el > 15*time.Second {
			t.Logf("STALL: %d bytes took %v", n, el.Round(time.Millisecond))
		}
	}()
	want := sha256.New()
	var out io.Writer = c
	if x.Write > 0 {
		out = &smallWrites{w: c, n: x.Write}
	}
	written := new(atomic.Int64)
	if x.Hold > 0 {
		out = &holdWriter{w: out, p: written, at: x.Hold, c: holdOver}
	}
	if _, err := io.Copy(io.MultiWriter(out, want), io.LimitReader(Stream(uint64(port)), n)); err != nil {
		c.Close()
		return fmt.Errorf("send: %v (sent %d of %d bytes)", err, written.Load(), n)
	}
	c.Close()
	select {
	case g := <-got:
		if !bytes.Equal(g, want.Sum(nil)) {
			return fmt.Errorf("SHA-256 mismatch after %d bytes", n)
		}
	case err := <-errc:
		return err
	case <-time.After(x.Timeout + time.Minute):
		return fmt.Errorf("transfer of %d bytes timed out", n)
	}
	return nil
}

// listen is gonet.ListenTCP with the listener's MSS set when mss is not
// zero (connections inherit it).
func listen(s *stack.Stack, addr tcpip.FullAddress, proto tcpip.NetworkProtocolNumber, mss int) (*gonet.TCPListener, error) {
	if mss == 0 {
		l, err := gonet.ListenTCP(s, addr, proto)
		if err != nil {
			return nil, fmt.Errorf("listen: %v", err)
		}
		return l, nil
	}
	var wq waiter.Queue
	ep, terr := s.NewEndpoint(tcp.ProtocolNumber, proto, &wq)
	if terr != nil {
		return nil, fmt.Errorf("endpoint: %v", terr)
	}
	if terr := ep.SetSockOptInt(tcpip.MaxSegOption, mss); terr != nil {
		ep.Close()
		return nil, fmt.Errorf("TCP_MAXSEG %d: %v", mss, terr)
	}
	if terr := ep.Bind(addr); terr != nil {
		ep.Close()
		return nil, fmt.Errorf("bind: %v", terr)
	}
	if terr := ep.Listen(10); terr != nil {
		ep.Close()
		return nil, fmt.Errorf("listen: %v", terr)
	}
	return gonet.NewTCPListener(s, &wq, ep), nil
}

// smallWrites writes in pieces of n bytes, as an application making many
// small writes does.
type smallWrites struct {
	w io.Writer
	n int
}

func (s *smallWrites) Write(b []byte) (int, error) {
	k := 0
	for k < len(b) {
		m, err := s.w.Write(b[k:min(len(b), k+s.n)])
		k += m
		if err != nil {
			return k, err
		}
	}
	return k, nil
}

// holdWriter counts what was written and closes c once at bytes have been.
type holdWriter struct {
	w  io.Writer
	p  *atomic.Int64
	at int64
	c  chan struct{}
}

func (h *holdWriter) Write(b []byte) (int, error) {
	n, err := h.w.Write(b)
	if h.p.Add(int64(n)) >= h.at && h.c != nil {
		close(h.c)
		h.c = nil
	}
	return n, err
}

// counter is an io.Writer that counts what passes.
type counter struct{ n *atomic.Int64 }

func (c counter) Write(b []byte) (int, error) { c.n.Add(int64(len(b))); return len(b), nil }

// watch logs both hosts' state once when rcvd has not moved for 10 s; the
// returned function stops it.
func watch(t testing.TB, from, to *Host, rcvd *atomic.Int64, n int64) func() {
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		tk := time.NewTicker(time.Second)
		defer tk.Stop()
		last, since, logged := int64(-1), time.Now(), false
		for {
			select {
			case <-stop:
				return
			case <-tk.C:
			}
			if v := rcvd.Load(); v != last {
				if logged {
					t.Logf("STALL over: progress again at %d of %d bytes", v, n)
				}
				last, since, logged = v, time.Now(), false
				continue
			}
			if !logged && time.Since(since) > 10*time.Second {
				logged = true
				t.Logf("STALL: no progress for 10 s at %d of %d bytes\n== sender\n%s== receiver\n%s", last, n, from.diag(), to.diag())
			}
		}
	}()
	return func() { close(stop); <-done }
}

func (h *Host) diag() string {
	if h.Diag == nil {
		return "(no diagnostics)\n"
	}
	return h.Diag()
}
