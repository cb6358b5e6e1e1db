package netstack

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/stack/gro"
)

// Options configure an Endpoint.
type Options struct {
	// Device is the NIC. Required.
	Device Device
	// TSO advertises host GSO to gVisor so TCP hands over up to 64 KiB at a
	// time, segmented by the device. gVisor fixes a connection's choice when
	// it is established; SetTSO changes it for new connections.
	TSO bool
	// GRO coalesces received TCP segments before the stack sees them. It
	// needs RX checksum offload to be advertised; the endpoint then verifies
	// in software every checksum the hardware did not (see the package
	// comment on fragments).
	GRO bool
	// PollInterval, when non-zero, makes the receive loop also call
	// Device.Poll at this interval (for NICs run without interrupts).
	PollInterval time.Duration
	// RxBudget bounds frames handled per RX wake-up before GRO is flushed
	// (default 64).
	RxBudget int
	// Clock, when set, times the endpoint's two stages (nanoseconds, any
	// monotonic origin) into Stats.RxNs and Stats.TxNs. Under QEMU with
	// -icount, that is instructions.
	Clock func() int64
	// AckFilter drops pure TCP ACKs superseded by a later ACK of the same
	// connection in the same receive batch, so that gVisor's sender, which
	// sends per ACK it handles, sends what k ACKs freed as one GSO packet
	// (see ackfilter.go for what is never dropped).
	AckFilter bool
}

// Stats are the endpoint's counters.
type Stats struct {
	TxPackets, TxGSOPackets, TxBytes uint64
	TxRingFull, TxErrors             uint64 // refused; failed completions
	// A host-GSO packet beyond the device's segment or view limits is sent
	// in pieces: TxSplitPieces counts the pieces, TxGathered those whose
	// views were gathered into one buffer, TxCutShort the packets whose
	// remaining pieces were given up after waiting for descriptors.
	TxSplitPieces, TxGathered, TxCutShort uint64
	RxPackets, RxBytes                    uint64
	// Dropped on receive: frames the NIC reported bad, frames too short
	// for Ethernet, unknown EtherTypes (VLAN-tagged included), checksum
	// failures found in software (and, with RX offload advertised, IP
	// frames too malformed to verify), and fragments of datagrams whose
	// TCP or UDP checksum failed or that could not be verified (overlaps,
	// a header chain past the first fragment, evicted or timed out while
	// incomplete).
	RxNICErrors, RxRunts, RxUnknownType, RxBadCsum, RxFragDrops uint64
	// RxSoftCsum counts frames whose checksums the endpoint verified in
	// software because the hardware had not.
	RxSoftCsum uint64
	// RxACKsFiltered counts pure ACKs dropped by Options.AckFilter.
	RxACKsFiltered uint64
	// RxGROBypass counts TCP segments delivered past GRO because their
	// flow had a hole, or, for segments without data, because GRO may have
	// held data of their flow (groorder.go).
	RxGROBypass uint64
	// With TX checksum offload (txcsum.go): TxSoftCsum counts packets and
	// fragmented datagrams whose transport checksum the endpoint computed,
	// TxFragDrops fragments dropped before they were queued (a datagram
	// evicted or cut short, out of order, or failed when queued).
	TxSoftCsum, TxFragDrops uint64
	// TxHeld is the number of packets whose references are held for DMA.
	TxHeld int64
	// With Options.Clock: time spent receiving (RxBatches passes, each
	// taking frames from the NIC and handing them to gVisor, whose IP and
	// TCP input run inside), and transmitting (TxCalls calls of
	// WritePackets: placement, segmentation and the driver; gVisor's own
	// output work happens before).
	RxBatches, RxNs, TxCalls, TxNs int64
}

// Endpoint is a gVisor link endpoint on a Device.
type Endpoint struct {
	dev  Device
	gate RxGate // dev's, when it has one
	info DeviceInfo
	opts Options
	mtu  atomic.Uint32

	addrMu sync.RWMutex
	addr   tcpip.LinkAddress // guarded by addrMu
	tso    atomic.Bool

	mu         sync.Mutex
	dispatcher stack.NetworkDispatcher
	onClose    func()
	stop       chan struct{}
	exited     chan struct{} // closed when the latest receive goroutine returns
	wg         sync.WaitGroup

	txMu   sync.Mutex
	frags  [][]byte        // scratch for walking a packet's views
	txHeld []*heldDatagram // fragmented datagrams held for their checksum (txcsum.go)
	txKick chan struct{}   // signalled by every TX completion

	gro    gro.GRO  // receive goroutine only
	order  groOrder // receive goroutine only
	groOut groOut   // receive goroutine only
	frag   fragCheck
	rx     struct { // receive goroutine only: one batch, for ACK filtering
		batch  []Frame
		slots  []ackSlot
		peeked []PeekedRx // with an RxPeeker: the frames seen in place
	}
	stats struct {
		sync.Mutex
		Stats
	}
	held atomic.Int64
	// rxNoVerdict: the receive goroutine is handing up a packet it gave no
	// checksum verdict (deliverUnverified).
	rxNoVerdict atomic.Bool
	// Stage timing (Options.Clock).
	rxBatches, rxNs, txCalls, txNs atomic.Int64
}

// New returns an endpoint on o.Device.
func New(o Options) (*Endpoint, error) {
	if o.Device == nil {
		return nil, errors.New("netstack: Options.Device is required")
	}
	if o.RxBudget <= 0 {
		o.RxBudget = 64
	}
	info := o.Device.Info()
	if info.MaxFrame < 60+header.EthernetMinimumSize {
		return nil, fmt.Errorf("netstack: device max frame %d too small", info.MaxFrame)
	}
	gate, _ := o.Device.(RxGate)
	e := &Endpoint{dev: o.Device, gate: gate, info: info, opts: o, addr: tcpip.LinkAddress(info.MAC[:]),
		txKick: make(chan struct{}, 1)}
	// Room for one VLAN tag: a 1518-byte frame carries a 1500-byte MTU.
	e.mtu.Store(uint32(info.MaxFrame - header.EthernetMinimumSize - 4))
	if info.Segmentation && info.MaxGSOSegments*minMSS < 161+minMSS {
		// gVisor subtracts 161 from GSOMaxSize; too small a ring cannot
		// do TSO at all.
		info.Segmentation = false
	}
	e.info = info
	e.tso.Store(o.TSO && info.Segmentation)
	o.Device.SetTxDone(e.txDone)
	e.gro.Init(o.GRO)
	if o.AckFilter {
		e.rx.batch = make([]Frame, 0, o.RxBudget)
		e.rx.slots = make([]ackSlot, o.RxBudget)
		e.rx.peeked = make([]PeekedRx, o.RxBudget)
	}
	e.frag.init()
	return e, nil
}

var (
	_ stack.LinkEndpoint = (*Endpoint)(nil)
	_ stack.GSOEndpoint  = (*Endpoint)(nil)
)

// GRO reports whether the endpoint merges received TCP segments
// (Options.GRO, fixed at New).
func (e *Endpoint) GRO() bool { return e.opts.GRO }

// AckFilter reports whether the endpoint drops superseded pure ACKs
// (Options.AckFilter, fixed at New).
func (e *Endpoint) AckFilter() bool { return e.opts.AckFilter }

// SetTSO switches host GSO for connections established from now on.
func (e *Endpoint) SetTSO(on bool) { e.tso.Store(on && e.info.Segmentation) }

// TSO reports whether host GSO is advertised.
func (e *Endpoint) TSO() bool { return e.tso.Load() }

// Stats returns a snapshot of the counters.
func (e *Endpoint) Stats() Stats {
	e.stats.Lock()
	defer e.stats.Unlock()
	s := e.stats.Stats
	s.TxHeld = e.held.Load()
	s.RxBatches, s.RxNs = e.rxBatches.Load(), e.rxNs.Load()
	s.TxCalls, s.TxNs = e.txCalls.Load(), e.txNs.Load()
	return s
}

func (e *Endpoint) count(f func(*Stats)) {
	e.stats.Lock()
	f(&e.stats.Stats)
	e.stats.Unlock()
}

// MTU implements stack.LinkEndpoint.
func (e *Endpoint) MTU() uint32 { return e.mtu.Load() }

// SetMTU implements stack.LinkEndpoint; it cannot exceed what the NIC sends.
func (e *Endpoint) SetMTU(mtu uint32) {
	e.mtu.Store(min(mtu, uint32(e.info.MaxFrame-header.EthernetMinimumSize)))
}

// MaxHeaderLength implements stack.LinkEndpoint.
func (e *Endpoint) MaxHeaderLength() uint16 { return header.EthernetMinimumSize }

// LinkAddress implements stack.LinkEndpoint.
func (e *Endpoint) LinkAddress() tcpip.LinkAddress {
	e.addrMu.RLock()
	defer e.addrMu.RUnlock()
	return e.addr
}

// SetLinkAddress implements stack.LinkEndpoint. The NIC's filter is
// programmed with the address it was created with; changing it here only
// changes the source address of outgoing frames and which received frames
// count as addressed to this host. The receive path reads the address
// concurrently, so it is written under a lock (as gVisor's own endpoints
// do).
func (e *Endpoint) SetLinkAddress(a tcpip.LinkAddress) {
	e.addrMu.Lock()
	e.addr = a
	e.addrMu.Unlock()
}

// Capabilities implements stack.LinkEndpoint.
//
// TX checksum offload is advertised when the device inserts checksums:
// gVisor then leaves TCP and UDP checksums to the endpoint, which has the
// MAC insert TCP's and computes UDP's, over whole datagrams for fragmented
// ones (txcsum.go). Under TSO gVisor seeds every host-GSO packet for the
// device to finish (NeedsCsum) either way.
func (e *Endpoint) Capabilities() stack.LinkEndpointCapabilities {
	c := stack.CapabilityResolutionRequired
	if e.info.TxCsum {
		c |= stack.CapabilityTXChecksumOffload
	}
	if e.opts.GRO && !e.rxNoVerdict.Load() {
		// GRO's merged packets carry stale IPv4 checksums and gVisor sets
		// RXChecksumValidated from this bit for every packet, so the
		// endpoint verifies in software what the hardware did not, and
		// clears the bit while it hands up a packet it did not verify
		// (deliverUnverified).
		c |= stack.CapabilityRXChecksumOffload
	}
	return c
}

// deliverUnverified hands p up with no checksum verdict: a packet whose
// TCP or UDP header the endpoint did not find and check (another
// protocol, a header chain it does not walk, a fragmented datagram it
// could not verify). gVisor's NIC sets each received packet's
// RXChecksumValidated from Capabilities (stack/nic.go,
// DeliverNetworkPacket), the only reader of the RX bit, and only this
// goroutine delivers, so clearing the bit for the call makes gVisor check
// every checksum of p itself, as it does without RX offload. Before, such
// a packet went up "verified": a UDP datagram with a bad checksum behind
// IPv6 extension header 253, which gVisor walks and the endpoint did not,
// reached the application.
func (e *Endpoint) deliverUnverified(d stack.NetworkDispatcher, proto tcpip.NetworkProtocolNumber, p *stack.PacketBuffer) {
	e.rxNoVerdict.Store(true)
	d.DeliverNetworkPacket(proto, p)
	e.rxNoVerdict.Store(false)
}

// minMSS is the smallest MSS GSOMaxSize plans for (the IPv4 default MSS);
// a connection with a smaller one can exceed the device's segment limit and
// see its GSO packets refused.
const minMSS = 536

// GSOMaxSize implements stack.GSOEndpoint: 64 KiB, or less when the
// device's TX ring cannot hold that many segments at minMSS.
func (e *Endpoint) GSOMaxSize() uint32 {
	if !e.tso.Load() {
		return 0
	}
	return uint32(min(1<<16, e.info.MaxGSOSegments*minMSS))
}

// SupportedGSO implements stack.GSOEndpoint.
func (e *Endpoint) SupportedGSO() stack.SupportedGSO {
	if e.tso.Load() {
		return stack.HostGSOSupported
	}
	return stack.GSONotSupported
}

// ARPHardwareType implements stack.LinkEndpoint.
func (e *Endpoint) ARPHardwareType() header.ARPHardwareType { return header.ARPHardwareEther }

// AddHeader implements stack.LinkEndpoint.
func (e *Endpoint) AddHeader(p *stack.PacketBuffer) {
	eth := header.Ethernet(p.LinkHeader().Push(header.EthernetMinimumSize))
	eth.Encode(&header.EthernetFields{SrcAddr: p.EgressRoute.LocalLinkAddress,
		DstAddr: p.EgressRoute.RemoteLinkAddress, Type: p.NetworkProtocolNumber})
}

// ParseHeader implements stack.LinkEndpoint.
func (e *Endpoint) ParseHeader(p *stack.PacketBuffer) bool {
	_, ok := p.LinkHeader().Consume(header.EthernetMinimumSize)
	return ok
}

// Attach implements stack.LinkEndpoint: it starts (or, with nil, stops) the
// receive goroutine.
//
// It never waits for the goroutine: gVisor calls Attach(nil) from RemoveNIC
// with the stack's lock held, while the goroutine may be inside
// DeliverNetworkPacket waiting for that same lock (IPv4 input looks up the
// NIC's name). Close waits (Wait does not, for the same reason); a
// goroutine started by a later Attach first waits for its predecessor, so
// only one ever receives.
func (e *Endpoint) Attach(d stack.NetworkDispatcher) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stop != nil {
		close(e.stop)
		e.stop = nil
	}
	e.dispatcher = d
	if d == nil {
		return
	}
	e.stop = make(chan struct{})
	prev, exited := e.exited, make(chan struct{})
	e.exited = exited
	e.wg.Add(1)
	go e.rxLoop(d, e.stop, prev, exited)
}

// IsAttached implements stack.LinkEndpoint.
func (e *Endpoint) IsAttached() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.dispatcher != nil
}

// Wait implements stack.LinkEndpoint. It does not wait for the receive
// goroutine: gVisor's Stack.Wait calls it with the stack's lock held (after
// RemoveNIC's Attach(nil), stack.go Wait), while the goroutine may be in
// the middle of a batch, inside DeliverNetworkPacket, waiting for that
// lock (a SYN to a closed port draws a reset, whose route lookup takes
// it): waiting there deadlocked Stack.Close then Stack.Wait under a
// receive flood. Close, which gVisor calls once the lock is released
// (RemoveNIC's and Stack.Wait's deferred action), waits for the goroutine
// and stops the device, so after Stack.Wait nothing of the endpoint runs.
// gVisor's own endpoints do the same: fdbased's Attach(nil) releases its
// lock before waiting, sharedmem's Wait waits for workers its Close stopped.
func (e *Endpoint) Wait() {}

// Close implements stack.LinkEndpoint: it stops receiving, waits for the
// receive goroutine, and stops the device, which completes (aborts) every
// frame still in flight so the references held on their packets are
// released. gVisor calls it from Stack.RemoveNIC and Stack.Wait without
// its lock; Stack.Close alone does not stop link endpoints.
func (e *Endpoint) Close() {
	e.Attach(nil)
	e.wg.Wait()
	e.txMu.Lock()
	_ = e.dev.Close()
	for _, d := range e.txHeld {
		e.dropHeld(d)
	}
	e.txHeld = nil
	e.txMu.Unlock()
	e.mu.Lock()
	f := e.onClose
	e.mu.Unlock()
	if f != nil {
		f()
	}
}

// SetOnCloseAction implements stack.LinkEndpoint.
func (e *Endpoint) SetOnCloseAction(f func()) {
	e.mu.Lock()
	e.onClose = f
	e.mu.Unlock()
}

const (
	verdictHW verdict = iota // the hardware checked everything
	verdictSoft
	verdictBad
)
