package e1000e

import (
	"errors"

	"github.com/tamanic/tamanic/netstack"
)

// Info implements netstack.Device: checksums both ways and TCP
// segmentation in hardware, no TX alignment, and a descriptor budget per
// GSO packet stated as segments and views (gsoBudget).
func (n *NIC) Info() netstack.DeviceInfo {
	segs, views := gsoBudget(n.tx.n)
	return netstack.DeviceInfo{MAC: n.mac, MaxFrame: n.MaxFrame(), TxCsum: true, RxCsum: true,
		Segmentation: true, MaxTxDescs: min(n.tx.n-1, 1+MaxDataDescs), TxAlign: 1,
		MaxGSOSegments: segs, MaxGSOViews: views}
}

// minMSS is the smallest MSS the endpoint plans GSO sizes for (IPv4's
// 576-byte minimum datagram less 40 bytes of headers).
const minMSS = 536

// gsoBudget returns the most segments and payload views a GSO packet may
// have so that it fits a TX ring of ring descriptors and QEMU's 64 data
// descriptors per packet. A GSO packet takes one context descriptor, one
// for the header (copied into its slot), and ceil(len/8 KiB) per payload
// view, which for V views and P payload bytes is at most
// V + floor((P-1)/8 KiB): 7 extra descriptors at the 64 KiB IP limit.
// Segments cost no descriptors, so the segment limit is the 64 KiB
// datagram at the smallest MSS, unless the ring is too small for 64 KiB
// in one view; then the payload, and so the segments, shrink instead.
func gsoBudget(ring int) (segs, views int) {
	payload := min(ring-1-1, MaxDataDescs) - 1 // descriptors left for the payload
	const extra64K = (65535 - 1) / MaxPerDesc  // 7
	if payload-extra64K >= 1 {
		return 65536/minMSS + 1, payload - extra64K
	}
	// One view, at most payload-1 extra descriptors: P-1 < payload*8 KiB.
	return (payload-1)*MaxPerDesc/minMSS + 1, 1
}

// SetTxDone implements netstack.Device; it replaces Config.OnTxDone.
func (n *NIC) SetTxDone(f func(any, error)) {
	n.txMu.Lock()
	n.cfg.OnTxDone = f
	n.txMu.Unlock()
}

// Full implements netstack.Device.
func (n *NIC) Full(err error) bool { return errors.Is(err, ErrRingFull) }

// Device is a NIC seen as a netstack.Device (Receive returns the
// interface type).
type Device struct{ *NIC }

// Receive implements netstack.Device.
func (d Device) Receive() (netstack.Frame, error) {
	f, err := d.NIC.Receive()
	if f == nil {
		return nil, err
	}
	return f, err
}

var _ netstack.Device = Device{}
