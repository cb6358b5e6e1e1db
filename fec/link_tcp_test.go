package fec_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tamanic/tamanic/dma/dmatest"
	"github.com/tamanic/tamanic/fec"
	"github.com/tamanic/tamanic/fec/fectest"
	"github.com/tamanic/tamanic/internal/stacktest"
	"github.com/tamanic/tamanic/netstack"
	"github.com/tamanic/tamanic/netstack/fecdev"
)

// tcpHost is a gVisor stack (IPv4 only) on a NIC on a model,
// interrupt-driven, with its link watched by WatchLink.
type tcpHost struct {
	*stacktest.Host
	rig *fectest.Rig
	phy *fec.PHY
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
	h := &tcpHost{Host: stacktest.New(t, ep, i, stacktest.Options{IPv4Only: true, DefaultBuffers: true}), rig: rig}
	if h.phy, err = rig.NIC.StartLink(fec.LinkConfig{Addrs: []int{2}, Poll: 100 * time.Microsecond}); err != nil {
		t.Fatal(err)
	}
	stopIRQ := stacktest.Serve(rig.Model.IRQ(), func() { rig.NIC.Interrupt() })
	stopLink := make(chan struct{})
	watched := make(chan struct{})
	go func() { defer close(watched); h.phy.WatchLink(200*time.Microsecond, stopLink) }()
	h.Diag = func() string {
		st := rig.NIC.Stats()
		return fmt.Sprintf("endpoint %+v\nnic tx %+v rx %+v\nmodel %+v\n", ep.Stats(), st.Tx, st.Rx, rig.Model.Stats())
	}
	t.Cleanup(func() {
		h.Close()
		stopIRQ()
		close(stopLink)
		<-watched
	})
	return h
}

// A link flap in the middle of a TCP transfer, coming back at another mode
// (10 Mb/s half duplex, so the MAC is restarted and frames in flight are
// aborted): the watchers follow both changes, TCP retransmits what the
// wire lost, and the receiver gets every byte (SHA-256 compared).
func TestLinkFlapMidTCPTransferLosesNothing(t *testing.T) {
	a, b := newTCPHost(t, 1), newTCPHost(t, 2)
	w := fectest.Connect(a.rig.Model, b.rig.Model)
	const n = 3 << 20
	var rcvd atomic.Int64
	done := make(chan error, 1)
	go func() {
		done <- stacktest.Transfer(t, a.Host, b.Host, false, 80, n, stacktest.Xfer{Received: &rcvd})
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
	if err := <-done; err != nil {
		t.Fatalf("transfer (%d of %d bytes received): %v", rcvd.Load(), n, err)
	}
	for _, h := range []*tcpHost{a, b} {
		st := h.rig.NIC.Stats()
		if st.LinkDowns != 1 || st.LinkUps != 2 || st.Restarts != 2 {
			t.Fatalf("link stats %+v", st)
		}
	}
}
