// Package fecdev adapts the ENET driver (package fec) to netstack.Device.
package fecdev

import (
	"errors"
	"fmt"
	"sync"

	"github.com/tamanic/tamanic/fec"
	"github.com/tamanic/tamanic/netstack"
	"github.com/tamanic/tamanic/tso"
)

// Device is a *fec.NIC as a netstack.Device. Its TX completion callback
// must be routed through Done: build the NIC with
// Config.OnTxDone = dev.Done, or call New before traffic starts.
type Device struct {
	NIC  *fec.NIC
	done func(any, error)
	// offline is held for writing while SelfTest has the NIC and for
	// reading by every endpoint call into it (a whole receive batch:
	// BeginRx, EndRx); a call that cannot take it at once finds the ring
	// full or nothing received, never waits.
	offline sync.RWMutex
}

// errOffline is a transmit refused while SelfTest has the NIC: Full
// reports it, so the endpoint counts it as a full ring (gVisor drops the
// packet; TCP sends it again).
var errOffline = fmt.Errorf("fecdev: NIC offline for its self-test: %w", fec.ErrRingFull)

// SelfTest runs the NIC's loopback self-test (fec.NIC.SelfTestCounted)
// while the endpoint runs, as Linux's `ethtool -t ... offline` takes an
// interface down: the endpoint's transmits are refused as a full ring and
// its receives find nothing until the test ends, frames in flight may be
// aborted, and the loopback (at the PHY: an autonegotiation restart
// afterwards) interrupts the link for as long as it takes. It waits for
// endpoint calls in progress to return first.
func (d *Device) SelfTest(o fec.SelfTestOptions) ([]fec.SelfTestResult, fec.SelfTestCounts, error) {
	d.offline.Lock()
	res, c, err := d.NIC.SelfTestCounted(o)
	d.offline.Unlock()
	// Whatever the wire brought since is the endpoint's again.
	d.NIC.Poll()
	return res, c, err
}

// New wraps n. The NIC's Config.OnTxDone must call the returned device's
// Done method. gVisor never tells a link endpoint which multicast groups
// it joins (IPv6 neighbour discovery needs solicited-node groups), so the
// NIC's group filter is opened and the stack filters groups itself.
func New(n *fec.NIC) *Device {
	n.SetAllMulticast()
	return &Device{NIC: n}
}

// Done forwards a TX completion to the endpoint.
func (d *Device) Done(cookie any, err error) {
	if d.done != nil {
		d.done(cookie, err)
	}
}

// Info implements netstack.Device.
func (d *Device) Info() netstack.DeviceInfo {
	c := d.NIC.Caps()
	return netstack.DeviceInfo{MAC: d.NIC.MAC(), MaxFrame: d.NIC.MaxFrame(), TxCsum: d.NIC.CsumOffload(),
		RxCsum: d.NIC.CsumOffload(), Segmentation: true, MaxTxDescs: d.NIC.MaxTxDescs(), TxAlign: c.TxAlign,
		MaxGSOSegments: d.NIC.MaxGSOSegments(maxGSOViews), MaxGSOViews: maxGSOViews}
}

// maxGSOViews is the payload views the endpoint may hand TransmitGSO:
// gVisor's TCP packets have two or three, and the endpoint gathers more.
const maxGSOViews = 4

// SetTxDone implements netstack.Device.
func (d *Device) SetTxDone(f func(any, error)) { d.done = f }

// Transmit implements netstack.Device.
func (d *Device) Transmit(frags [][]byte, csum bool, cookie any) error {
	if !d.offline.TryRLock() {
		return errOffline
	}
	defer d.offline.RUnlock()
	return d.NIC.Transmit(frags, fec.TxOptions{Csum: csum}, cookie)
}

// TransmitGSO implements netstack.Device.
func (d *Device) TransmitGSO(hdr []byte, payload [][]byte, o tso.Options, cookie any) error {
	if !d.offline.TryRLock() {
		return errOffline
	}
	defer d.offline.RUnlock()
	return d.NIC.TransmitGSO(hdr, payload, o, cookie)
}

// Full implements netstack.Device.
func (d *Device) Full(err error) bool { return errors.Is(err, fec.ErrRingFull) }

// Receive implements netstack.Device.
func (d *Device) Receive() (netstack.Frame, error) {
	p, err := d.NIC.Receive()
	if p == nil {
		return nil, err
	}
	return (*frame)(p), nil
}

// RxReady implements netstack.Device.
func (d *Device) RxReady() <-chan struct{} { return d.NIC.RxReady() }

// Close implements netstack.Device.
func (d *Device) Close() error { return d.NIC.Close() }

// Poll implements netstack.Device.
func (d *Device) Poll() {
	if !d.offline.TryRLock() {
		return
	}
	defer d.offline.RUnlock()
	_, _ = d.NIC.Poll()
}

type frame fec.Packet

func (f *frame) Bytes() []byte { return f.Data }

func (f *frame) Verified() (bool, bool) { return f.Csum.IPv4, f.Csum.L4 }

func (f *frame) Release() error { return (*fec.Packet)(f).Release() }

var _ netstack.Device = (*Device)(nil)

// PeekRun implements netstack.RxPeeker: one fec.NIC.PeekRun, one lock.
func (d *Device) PeekRun(out []netstack.PeekedRx, max int) (int, netstack.PeekResult) {
	m, st := d.NIC.PeekRun(len(out), max, func(k int, b []byte, c fec.CsumInfo) {
		out[k] = netstack.PeekedRx{B: b, IPv4OK: c.IPv4, L4OK: c.L4}
	})
	switch st {
	case fec.PeekFrame:
		return m, netstack.PeekFrame
	case fec.PeekNone:
		return m, netstack.PeekNone
	}
	return m, netstack.PeekOther
}

// DropRx implements netstack.RxPeeker.
func (d *Device) DropRx(k int) error { return d.NIC.DropRun(k) }

var _ netstack.RxPeeker = (*Device)(nil)

// BeginRx implements netstack.RxGate: a receive batch (Receive, PeekRun,
// DropRx) runs only while SelfTest does not have the NIC, so a frame
// PeekRun showed in place is still the endpoint's when it is taken or
// dropped.
func (d *Device) BeginRx() bool { return d.offline.TryRLock() }

// EndRx implements netstack.RxGate.
func (d *Device) EndRx() { d.offline.RUnlock() }

var _ netstack.RxGate = (*Device)(nil)
