package netstack_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"

	"github.com/tamanic/tamanic/bounce"
	"github.com/tamanic/tamanic/dma/dmatest"
	"github.com/tamanic/tamanic/fec"
	"github.com/tamanic/tamanic/fec/fectest"
	"github.com/tamanic/tamanic/internal/stacktest"
	"github.com/tamanic/tamanic/netstack"
	"github.com/tamanic/tamanic/netstack/fecdev"
)

// mode is a TX configuration under test.
type mode struct {
	name     string
	strategy bounce.Strategy
	tso      bool
	gro      bool
	ackf     bool // Options.AckFilter
}

var modes = []mode{
	{"bounce", bounce.Bounce, false, false, false},
	{"sg", bounce.SG, false, false, false},
	{"sg+tso", bounce.SG, true, false, false},
	{"sg+tso+gro", bounce.SG, true, true, false},
	{"sg+tso+ackfilter", bounce.SG, true, false, true},
	{"sg+tso+gro+ackfilter", bounce.SG, true, true, true}, // the firmware's
}

// host is one gVisor stack (internal/stacktest) on one ENET model.
type host struct {
	rig   *fectest.Rig
	dev   *fecdev.Device
	ep    *netstack.Endpoint
	st    *stacktest.Host
	s     *stack.Stack  // st.S
	v4    tcpip.Address // st.V4
	v6    tcpip.Address // st.V6
	close func()
}

type hostOptions struct {
	mode    mode
	soc     fec.SoC
	txRing  int
	rxRing  int
	noTrace bool
	// wrap, if set, puts a link endpoint of its own between the stack
	// and the host's endpoint (host i), e.g. a tap that records segments.
	wrap func(ep stack.LinkEndpoint, i byte) stack.LinkEndpoint
}

func newHost(t testing.TB, i byte, o hostOptions) *host {
	t.Helper()
	if o.soc == 0 {
		o.soc = fec.IMX6UL
	}
	var dev *fecdev.Device
	// The cached region holds the rings' buffers, the bounce slots and the
	// copybreak pools: 16 MiB is room for 512-entry rings several times
	// over; a 4096-entry RX ring takes 64 MiB. The region (CPU view, RAM
	// and per-line state, tripled again by the race detector's shadow) is
	// most of a host's memory: make test's peak is set by it.
	cached := 16 << 20
	if o.rxRing > 512 || o.txRing > 512 {
		cached = 64 << 20
	}
	mem := dmatest.New(t, dmatest.Options{NoTrace: o.noTrace, CachedSize: cached})
	rig := fectest.NewRig(t, fectest.RigOptions{SoC: o.soc, Mem: mem, MAC: [6]byte{2, 0, 0, 0, 0, i}, NoDone: true, Config: func(c *fec.Config) {
		c.Strategy = o.mode.strategy
		c.Interrupts = true
		c.TxRing = 512
		if o.txRing != 0 {
			c.TxRing = o.txRing
		}
		c.RxRing = 512
		if o.rxRing != 0 {
			c.RxRing = o.rxRing
		}
		c.OnTxDone = func(cookie any, err error) { dev.Done(cookie, err) }
	}})
	dev = fecdev.New(rig.NIC)
	ep, err := netstack.New(netstack.Options{Device: dev, TSO: o.mode.tso, GRO: o.mode.gro, AckFilter: o.mode.ackf})
	if err != nil {
		t.Fatal(err)
	}
	var lep stack.LinkEndpoint = ep
	if o.wrap != nil {
		lep = o.wrap(ep, i)
	}
	// SACK as the firmware has it (off; app.NewStack): gVisor's default is
	// on, and its SACK recovery crawls after a tail loss
	// (TestGVisorTailLossCrawlsWithSACK).
	st := stacktest.New(t, lep, i, stacktest.Options{NoSACK: !*campaignSACK})
	h := &host{rig: rig, dev: dev, ep: ep, st: st, s: st.S, v4: st.V4, v6: st.V6}
	st.Diag = h.diag
	// The interrupt handler, as the GIC would run it.
	stop := stacktest.Serve(rig.Model.IRQ(), func() { rig.NIC.Interrupt() })
	h.close = func() {
		st.Close()
		stop()
	}
	return h
}

// pair builds two hosts joined by a wire.
func pair(t testing.TB, o hostOptions) (a, b *host, w *fectest.Wire) {
	a, b = newHost(t, 1, o), newHost(t, 2, o)
	w = fectest.Connect(a.rig.Model, b.rig.Model)
	t.Cleanup(func() {
		a.close()
		b.close()
	})
	return a, b, w
}

// diag describes everything that could explain a stalled transfer: the
// endpoint's, driver's and model's counters, the TX ring, and the state of
// every TCP endpoint of the stack.
func (h *host) diag() string {
	var b strings.Builder
	if h.ep != nil { // not on gVisor's channel endpoints
		fmt.Fprintf(&b, "endpoint %+v\n", h.ep.Stats())
		st := h.rig.NIC.Stats()
		fmt.Fprintf(&b, "nic tx %+v\nnic rx %+v\n", st.Tx, st.Rx)
		fmt.Fprintf(&b, "model %+v\n", h.rig.Model.Stats())
	}
	ts := h.s.Stats().TCP
	fmt.Fprintf(&b, "tcp sent %d sendErr %d retrans %d fastRecovery %d timeouts %d slowStartRetrans %d fastRetrans %d valid %d invalid %d checksumErr %d\n",
		ts.SegmentsSent.Value(), ts.SegmentSendErrors.Value(), ts.Retransmits.Value(), ts.FastRecovery.Value(),
		ts.Timeouts.Value(), ts.SlowStartRetransmits.Value(), ts.FastRetransmit.Value(),
		ts.ValidSegmentsReceived.Value(), ts.InvalidSegmentsReceived.Value(), ts.ChecksumErrors.Value())
	ip := h.s.Stats().IP
	fmt.Fprintf(&b, "ip received %d delivered %d outgoingErrors %d malformed %d\n",
		ip.PacketsReceived.Value(), ip.PacketsDelivered.Value(), ip.OutgoingPacketErrors.Value(), ip.MalformedPacketsReceived.Value())
	for _, te := range h.s.RegisteredEndpoints() {
		e, ok := te.(*tcp.Endpoint)
		if !ok {
			continue
		}
		var info tcpip.TCPInfoOption
		e.GetSockOpt(&info)
		rq, _ := e.GetSockOptInt(tcpip.ReceiveQueueSizeOption)
		sq, _ := e.GetSockOptInt(tcpip.SendQueueSizeOption)
		id := e.Info().(*stack.TransportEndpointInfo).ID
		es := e.Stats().(*tcp.Stats)
		rb := e.SocketOptions().GetReceiveBufferSize()
		fmt.Fprintf(&b, "tcp %v:%d->%v:%d %v info %+v rcvq %d sndq %d rcvbuf %d segsSent %d segsRcvd %d sendErr{send %d noRoute %d} rcvErr{closed %d zeroWnd %d wantZeroWnd %d segQueueDropped %d overflow %d}\n",
			id.LocalAddress, id.LocalPort, id.RemoteAddress, id.RemotePort, e.EndpointState(), info, rq, sq, rb,
			es.SegmentsSent.Value(), es.SegmentsReceived.Value(), es.SendErrors.SegmentSendToNetworkFailed.Value(),
			es.SendErrors.NoRoute.Value(), es.ReceiveErrors.ClosedReceiver.Value(),
			es.ReceiveErrors.ZeroRcvWindowState.Value(), es.ReceiveErrors.WantZeroRcvWindow.Value(),
			es.ReceiveErrors.SegmentQueueDropped.Value(), es.ReceiveErrors.ReceiveBufferOverflow.Value())
	}
	if h.rig != nil {
		fmt.Fprintf(&b, "tx ring:\n%s", h.rig.NIC.DumpTx())
	}
	return b.String()
}

// transfer sends n bytes from a to b over TCP and compares SHA-256 digests.
func transfer(t testing.TB, from, to *host, v6 bool, port uint16, n int64) error {
	return transferWith(t, from, to, v6, port, n, xfer{})
}

// xfer shapes a transfer.
type xfer struct {
	mss     int           // the receiver's MSS (TCP_MAXSEG), 0 for the default
	write   int           // bytes per write, 0 for io.Copy's 32 KiB
	hold    int64         // the receiver starts reading once this much was written
	timeout time.Duration // whole transfer, default 5 minutes
}

// transferWith is transfer shaped by x (stacktest.Transfer: SHA-256 of
// every byte, both hosts' diag logged when the receiver stops for 10 s,
// "STALL" logged for a transfer over 15 s).
func transferWith(t testing.TB, from, to *host, v6 bool, port uint16, n int64, x xfer) error {
	if x.timeout == 0 {
		x.timeout = 5 * time.Minute
	}
	return stacktest.Transfer(t, from.st, to.st, v6, port, n,
		stacktest.Xfer{Timeout: x.timeout, MSS: x.mss, Write: x.write, Hold: x.hold})
}
