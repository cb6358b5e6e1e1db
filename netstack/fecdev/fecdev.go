// Package fecdev adapts the ENET driver (package fec) to netstack.Device.
package fecdev

import (
	"errors"

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
	return d.NIC.Transmit(frags, fec.TxOptions{Csum: csum}, cookie)
}

// TransmitGSO implements netstack.Device.
func (d *Device) TransmitGSO(hdr []byte, payload [][]byte, o tso.Options, cookie any) error {
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
func (d *Device) Poll() { _, _ = d.NIC.Poll() }

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
