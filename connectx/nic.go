package connectx

import (
	"errors"
	"fmt"

	"github.com/tamanic/tamanic/netstack"
)

// Close tears the function down: objects destroyed, HCA torn down, pages
// reclaimed, HCA disabled, bus mastering off, memory freed. Sends still
// queued complete with ErrClosed.
func (n *NIC) Close() error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true
	err := n.teardown()
	done := n.done
	n.done = nil
	n.mu.Unlock()
	n.complete(done)
	return err
}

// abortTx completes every queued send with ErrClosed (after the card lost
// bus mastering, so unmapping is safe).
func (n *NIC) abortTx() error {
	n.done = n.retire(n.done, 0, ErrClosed, true)
	return nil
}

// Fail puts the NIC in an error state for a card that has stopped
// answering; it is the owner's policy when to call it. (Linux's mlx5 core
// enters its error state, mlx5_enter_error_state, on a fatal sensor: PCI
// reads all ones, the NIC interface disabled, a firmware reset request;
// a health counter that stops only gets logged and reported to devlink
// there. The firmware here calls Fail when the counter has stopped and a
// command then times out, see Check.) From Fail on:
//
//   - no command is issued, Close included (it frees memory without asking
//     the card for its pages or objects back, as Linux's error state fakes
//     success for the destroy commands);
//   - Bus Master Enable is cleared, so the card can no longer read or write
//     memory, even if it comes back to life;
//   - every send still queued completes with an error wrapping ErrFailed
//     and cause, after BME is off, so the stack gets back the buffers a
//     dead card would hold for ever;
//   - Transmit and TransmitGSO fail with that error, Poll does nothing and
//     Link reports down.
//
// Receive buffers stay allocated and are freed by Close. Fail after Close,
// or a second time, does nothing. Recovering the card takes a new Open
// after Close (Linux reloads the device, mlx5_recover_device).
func (n *NIC) Fail(cause error) {
	n.mu.Lock()
	if n.closed || n.failed != nil {
		n.mu.Unlock()
		return
	}
	done := n.failLocked(cause)
	n.mu.Unlock()
	n.complete(done)
}

// failLocked is Fail with n.mu held; it returns the completions to give.
func (n *NIC) failLocked(cause error) []completion {
	n.failed = fmt.Errorf("%w: %v", ErrFailed, cause)
	n.stopBusMaster()
	return n.retire(nil, 0, n.failed, true)
}

// Check asks the card for its vport state (QUERY_VPORT_STATE), which also
// refreshes Link. An error wrapping ErrTimeout or ErrDead means its
// firmware no longer answers commands. It returns ErrClosed after Close and
// the failure after Fail. It holds the NIC for up to the command timeout.
func (n *NIC) Check() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	switch {
	case n.closed:
		return ErrClosed
	case n.failed != nil:
		return n.failed
	}
	return n.queryLink()
}

// Err returns why the card failed (an error wrapping ErrFailed), or nil
// while it has not.
func (n *NIC) Err() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.failed
}

// Info implements netstack.Device.
func (n *NIC) Info() netstack.DeviceInfo {
	segs := 0
	if n.caps.MaxLSO > 0 {
		segs = min(n.caps.MaxLSO, 1<<16) / 536
	}
	// Fragments (payload views) beyond what one WQE carries beside the
	// longest inline header are gathered into a bounce buffer: Info
	// states how many go in place.
	inPlace := dataSegs(n.sq.maxDS, maxInlineHdr)
	return netstack.DeviceInfo{MAC: n.mac, MaxFrame: n.cfg.MTU + 18, TxCsum: n.caps.CsumCap, RxCsum: n.caps.CsumCap,
		Segmentation: n.caps.MaxLSO > 0, MaxTxDescs: inPlace, TxAlign: 1, MaxGSOSegments: segs,
		// TransmitGSO inlines the headers and gives each payload view one
		// data segment.
		MaxGSOViews: inPlace}
}

// SetTxDone implements netstack.Device.
func (n *NIC) SetTxDone(f func(any, error)) {
	n.mu.Lock()
	n.txDone = f
	n.mu.Unlock()
}

// Full implements netstack.Device.
func (n *NIC) Full(err error) bool { return errors.Is(err, ErrRingFull) }

// RxReady implements netstack.Device: signalled by Poll.
func (n *NIC) RxReady() <-chan struct{} { return n.rxRdy }
