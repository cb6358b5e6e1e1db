//go:build linux

package main

import (
	"context"
	"encoding/binary"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/link/channel"
	"gvisor.dev/gvisor/pkg/tcpip/link/ethernet"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/tamanic/tamanic/connectx/connectxtest"
	"github.com/tamanic/tamanic/dma/dmatest"
	"github.com/tamanic/tamanic/internal/stacktest"
	"github.com/tamanic/tamanic/netstack"
)

// streamPeer is a gVisor link endpoint on the far end of the wire: it
// speaks the -netdev socket stream framing over conn, and w writes raw
// bytes beside it (a hostile peer).
type streamPeer struct {
	ch   *channel.Endpoint
	conn net.Conn
	mu   sync.Mutex
	wg   sync.WaitGroup
}

func (p *streamPeer) write(b []byte) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, err := p.conn.Write(b)
	return err
}

func framed(n uint32, f []byte) []byte { return append(binary.BigEndian.AppendUint32(nil, n), f...) }

func (p *streamPeer) run(ctx context.Context) {
	p.wg.Add(2)
	go func() {
		defer p.wg.Done()
		for {
			pkt := p.ch.ReadContext(ctx)
			if pkt == nil {
				return
			}
			v := pkt.ToView()
			pkt.DecRef()
			_ = p.write(framed(uint32(v.Size()), v.AsSlice()))
			v.Release()
		}
	}()
	go func() {
		defer p.wg.Done()
		var hdr [4]byte
		for {
			if _, err := io.ReadFull(p.conn, hdr[:]); err != nil {
				return
			}
			f := make([]byte, binary.BigEndian.Uint32(hdr[:]))
			if _, err := io.ReadFull(p.conn, f); err != nil {
				return
			}
			pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buffer.MakeWithData(f)})
			p.ch.InjectInbound(0, pkt)
			pkt.DecRef()
		}
	}()
}

// TestWireSurvivesHostilePeer: a peer that sends runts (lengths 0, 1, 5,
// 13), oversize frames (beyond the port's 1518 bytes, up to the framing
// limit) and garbage of valid lengths keeps its connection: runts and
// oversize frames are counted and dropped as the card's MAC drops them,
// garbage goes to the card. Over that same connection 8 MiB then cross
// each way between a gVisor stack on the ConnectX driver (on the model
// this process serves) and one on the peer, SHA-256 checked, with no
// violation. Only a length beyond the framing limit closes it.
func TestWireSurvivesHostilePeer(t *testing.T) {
	mem := dmatest.New(t, dmatest.Options{CoherentSize: 4 << 20, CachedSize: 32 << 20})
	rig := connectxtest.NewRig(t, connectxtest.RigOptions{Mem: mem, MAC: [6]byte{2, 0xC7, 0, 0, 0, 1}, NoDone: true})
	s := &sim{out: io.Discard, model: rig.Model}
	rig.Model.SetPeer(s.send)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.accept(l)
	ep, err := netstack.New(netstack.Options{Device: rig.NIC, TSO: true, GRO: true, PollInterval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	a := stacktest.New(t, ep, 1, stacktest.Options{IPv4Only: true})
	stop := stacktest.Serve(rig.Model.Activity(), rig.NIC.Poll)
	conn, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	p := &streamPeer{ch: channel.New(1024, 1500, tcpip.LinkAddress([]byte{2, 0x70, 0x65, 0x65, 0x72, 1})), conn: conn}
	b := stacktest.New(t, ethernet.New(p.ch), 2, stacktest.Options{IPv4Only: true})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() {
		a.Close()
		b.Close()
		cancel()
		conn.Close()
		l.Close()
		p.wg.Wait()
		stop()
	})
	waitFor(t, "peer", func() bool { return s.counters().Peers == 1 })
	waitFor(t, "the port MTU", func() bool { return rig.Model.MaxFrame() > 0 })

	rnd := rand.New(rand.NewPCG(1, 2))
	junk := func(n int) []byte {
		f := make([]byte, n)
		for i := range f {
			f[i] = byte(rnd.Uint32())
		}
		return f
	}
	runts := []int{0, 1, 5, 13}
	for _, n := range runts {
		if err := p.write(framed(uint32(n), junk(n))); err != nil {
			t.Fatal(err)
		}
	}
	oversize := []int{rig.Model.MaxFrame() + 1, 9000, framingMax}
	for _, n := range oversize {
		if err := p.write(framed(uint32(n), junk(n))); err != nil {
			t.Fatal(err)
		}
	}
	garbage := [][]byte{junk(60), junk(1514), append([]byte{2, 0xC7, 0, 0, 0, 1}, junk(100)...)}
	for _, g := range garbage {
		if err := p.write(framed(uint32(len(g)), g)); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the hostile frames", func() bool { return s.counters().WireRx >= len(garbage) })
	if c := s.counters(); c.WireRunts != len(runts) || c.WireOversize != len(oversize) || c.WireMalformed != 0 || c.Peers != 1 {
		t.Fatalf("after the hostile frames: %+v", c)
	}

	p.run(ctx)
	const n = 8 << 20
	if err := stacktest.Transfer(t, a, b, false, 6000, n, stacktest.Xfer{}); err != nil {
		t.Fatalf("to the peer: %v\nsim %+v\ndriver %+v", err, s.counters(), rig.NIC.Stats())
	}
	if err := stacktest.Transfer(t, b, a, false, 6001, n, stacktest.Xfer{}); err != nil {
		t.Fatalf("from the peer: %v\nsim %+v\ndriver %+v", err, s.counters(), rig.NIC.Stats())
	}
	if c := s.counters(); c.Violations != 0 || c.WireMalformed != 0 || c.Peers != 1 || c.WireTxErrors != 0 {
		t.Fatalf("after 8 MiB each way: %+v", c)
	}
	if st := rig.NIC.Stats(); st.TxLSO == 0 {
		t.Errorf("no LSO send: %+v", st)
	}

	// A length beyond the framing limit: the framing is lost.
	if err := p.write(framed(framingMax+1, nil)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "malformed", func() bool { return s.counters().WireMalformed == 1 })
	waitFor(t, "the connection closed", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.peer == nil
	})
}
