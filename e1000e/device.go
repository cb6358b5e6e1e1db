package e1000e

import (
	"errors"

	"github.com/tamanic/tamanic/netstack"
)

// Info implements netstack.Device: checksums both ways and TCP
// segmentation in hardware, no TX alignment, any number of fragments the
// ring holds (a GSO packet needs two descriptors plus one per 8 KiB of
// each payload view, whatever its segment count).
func (n *NIC) Info() netstack.DeviceInfo {
	return netstack.DeviceInfo{MAC: n.mac, MaxFrame: n.MaxFrame(), TxCsum: true, RxCsum: true,
		Segmentation: true, MaxTxDescs: n.tx.n - 1, TxAlign: 1,
		// Segments cost no descriptors: the limit is the 64 KiB IP datagram
		// at the smallest MSS the endpoint plans for.
		MaxGSOSegments: 65536/536 + 1}
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
