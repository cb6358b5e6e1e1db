package fec_test

import (
	"bytes"
	"context"
	"crypto/sha256"
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
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"

	"github.com/tamanic/tamanic/dma/dmatest"
	"github.com/tamanic/tamanic/fec"
	"github.com/tamanic/tamanic/fec/fectest"
	"github.com/tamanic/tamanic/netstack"
	"github.com/tamanic/tamanic/netstack/fecdev"
)

// tcpHost is a gVisor stack on a NIC on a model, interrupt-driven, with its
// link watched by WatchLink.
type tcpHost struct {
	rig  *fectest.Rig
	s    *stack.Stack
	addr tcpip.Address
	phy  *fec.PHY
}

func newTCPHost(t *testing.T, i byte) *tcpHost {
	var dev *fecdev.Device
	mem := dmatest.New(t, dmatest.Options{NoTrace: true, CachedSize: 32 << 20})
	rig := fectest.NewRig(t, fectest.RigOptions{Mem: mem, MAC: [6]byte{2, 0, 0, 0, 0, i}, NoDone: true,
		Model: func(o *fectest.Options) { o.ANReads = 3 },
		Config: func(c *fec.Config) {
			c.Interrupts = true
			c.TxRing, c.RxRing = 256, 256
			c.OnTxDone = func(cookie any, err error) { dev.Done(cookie, err) }
		}})
	dev = fecdev.New(rig.NIC)
	ep, err := netstack.New(netstack.Options{Device: dev, TSO: true, GRO: true, AckFilter: true})
	if err != nil {
		t.Fatal(err)
	}
	s := stack.New(stack.Options{NetworkProtocols: []stack.NetworkProtocolFactory{ipv4.NewProtocol, arp.NewProtocol},
		TransportProtocols: []stack.TransportProtocolFactory{tcp.NewProtocol}})
	if err := s.CreateNIC(1, ep); err != nil {
		t.Fatalf("CreateNIC: %v", err)
	}
	h := &tcpHost{rig: rig, s: s, addr: tcpip.AddrFrom4([4]byte{10, 0, 0, i})}
	if err := s.AddProtocolAddress(1, tcpip.ProtocolAddress{Protocol: ipv4.ProtocolNumber,
		AddressWithPrefix: tcpip.AddressWithPrefix{Address: h.addr, PrefixLen: 24}}, stack.AddressProperties{}); err != nil {
		t.Fatal(err)
	}
	s.SetRouteTable([]tcpip.Route{{Destination: header.IPv4EmptySubnet, NIC: 1}})
	if h.phy, err = rig.NIC.StartLink(fec.LinkConfig{Addrs: []int{2}, Poll: 100 * time.Microsecond}); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
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
	go func() { defer wg.Done(); h.phy.WatchLink(200*time.Microsecond, stop) }()
	t.Cleanup(func() {
		s.Close()
		s.RemoveNIC(1)
		s.Wait()
		close(stop)
		wg.Wait()
	})
	return h
}

// A link flap in the middle of a TCP transfer, coming back at another mode
// (10 Mb/s half duplex, so the MAC is restarted and frames in flight are
// aborted): the watchers follow both changes, TCP retransmits what the
// wire lost, and the receiver gets every byte.
func TestLinkFlapMidTCPTransferLosesNothing(t *testing.T) {
	a, b := newTCPHost(t, 1), newTCPHost(t, 2)
	w := fectest.Connect(a.rig.Model, b.rig.Model)
	const n = 3 << 20
	l, err := gonet.ListenTCP(b.s, tcpip.FullAddress{NIC: 1, Addr: b.addr, Port: 80}, ipv4.ProtocolNumber)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var rcvd atomic.Int64
	got := make(chan []byte, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			got <- nil
			return
		}
		defer c.Close()
		h := sha256.New()
		buf := make([]byte, 64<<10)
		for {
			k, err := c.Read(buf)
			h.Write(buf[:k])
			rcvd.Add(int64(k))
			if err != nil {
				break
			}
		}
		got <- h.Sum(nil)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := gonet.DialContextTCP(ctx, a.s, tcpip.FullAddress{NIC: 1, Addr: b.addr, Port: 80}, ipv4.ProtocolNumber)
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, n)
	rng := rand.New(rand.NewPCG(4, 4))
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	want := sha256.Sum256(data)
	sent := make(chan error, 1)
	go func() {
		_, err := io.Copy(c, bytes.NewReader(data))
		c.Close()
		sent <- err
	}()
	wait := func(what string, cond func() bool) {
		deadline := time.Now().Add(30 * time.Second) // a guard against hanging, not a timing assertion
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("waiting for %s", what)
			}
			time.Sleep(100 * time.Microsecond)
		}
	}
	wait("a third of the transfer", func() bool { return rcvd.Load() >= n/3 })
	w.SetLink(false)
	wait("both ends to see the link down", func() bool { return !a.rig.NIC.Link().Up && !b.rig.NIC.Link().Up })
	// Keep it down until the sender has lost a frame to it (TCP sends at
	// the latest when its retransmission timer fires).
	wait("a frame lost to the dead link", func() bool { return a.rig.Model.Stats().NoLink > 0 })
	for _, h := range []*tcpHost{a, b} {
		h.rig.Model.SetPartner(fec.ADV_10HALF, false, nil)
	}
	w.SetLink(true)
	want10 := fec.Link{Up: true, Speed: 10}
	wait("both ends at 10 Mb/s half duplex", func() bool { return a.rig.NIC.Link() == want10 && b.rig.NIC.Link() == want10 })
	if err := <-sent; err != nil {
		t.Fatalf("send: %v", err)
	}
	if g := <-got; !bytes.Equal(g, want[:]) {
		t.Fatalf("received %d of %d bytes, digest mismatch", rcvd.Load(), n)
	}
	for _, h := range []*tcpHost{a, b} {
		st := h.rig.NIC.Stats()
		if st.LinkDowns != 1 || st.LinkUps != 2 || st.Restarts != 2 {
			t.Fatalf("link stats %+v", st)
		}
	}
}
