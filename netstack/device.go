// Package netstack exposes a NIC to gVisor's netstack as a link endpoint
// with Ethernet framing, TX checksum offload, host GSO (software TSO in the
// driver), zero-copy TX (packet memory is handed to the NIC, which holds a
// reference until the hardware is done) and GRO on receive.
//
// The endpoint drives the small Device interface declared here, so any NIC
// (the ENET driver via package fecdev, later a ConnectX backend) plugs in
// by describing honestly what it can do.
package netstack

import (
	"github.com/tamanic/tamanic/tso"
)

// DeviceInfo describes a NIC's capabilities.
type DeviceInfo struct {
	MAC [6]byte
	// MaxFrame is the longest frame without FCS (1518 for a 1500-byte MTU
	// with room for one VLAN tag).
	MaxFrame int
	// TxCsum: the NIC inserts IPv4 header and TCP/UDP checksums when asked.
	TxCsum bool
	// RxCsum: received frames may carry hardware checksum verdicts.
	RxCsum bool
	// Segmentation: TransmitGSO is implemented (in hardware or software).
	Segmentation bool
	// MaxTxDescs is the most descriptors one frame may use; TxAlign the
	// start alignment of TX buffers (informational).
	MaxTxDescs, TxAlign int
	// MaxGSOSegments is the most segments one GSO packet may become, and
	// MaxGSOViews the most payload views it may come in, for TransmitGSO to
	// accept it on an empty ring (the TX ring must hold all its
	// descriptors at once). The endpoint splits and gathers what gVisor
	// hands over to stay within both.
	MaxGSOSegments, MaxGSOViews int
}

// Frame is a received frame, valid until Release.
type Frame interface {
	// Bytes returns the frame from the destination MAC address, no FCS.
	Bytes() []byte
	// Verified reports which checksums the hardware checked and found good.
	Verified() (ipv4Header, transport bool)
	// Release returns the frame's memory to the NIC.
	Release() error
}

// Device is what the endpoint needs of a NIC.
//
// The transmit contract. Transmit and TransmitGSO either queue the whole
// frame or packet, and then report it exactly once through the completion
// callback (with a nil error, or the error the hardware or an abort
// gave), or return an error, and then never report it: the caller still
// owns the memory and the cookie. A returned error for which Full is true
// means "not now": the ring lacks descriptors, and the same call succeeds
// once completions free them (the endpoint reports ErrNoBufferSpace and
// gVisor retries later). Any other error means "never": the packet is
// malformed or beyond what the device can ever send (too long, too many
// segments or views, headers it cannot parse, a closed device); the
// endpoint drops it and counts it. The endpoint never hands TransmitGSO a
// packet beyond MaxGSOSegments and MaxGSOViews, so for the packets gVisor
// makes "never" does not happen. A GSO packet queued whole may still
// complete with an error (segments cut short): one report, after its last
// segment.
type Device interface {
	Info() DeviceInfo
	// SetTxDone installs the completion callback: called once per queued
	// frame or GSO packet with its cookie after the hardware is done with
	// its memory, never for a call that returned an error.
	SetTxDone(func(cookie any, err error))
	// Transmit queues one frame given as fragments (any number: the
	// device copies what it cannot gather); csum asks for IPv4 and
	// TCP/UDP checksum insertion.
	Transmit(frags [][]byte, csum bool, cookie any) error
	// TransmitGSO segments and queues one large packet (hdr: L2-L4
	// headers, read only during the call).
	TransmitGSO(hdr []byte, payload [][]byte, o tso.Options, cookie any) error
	// Full reports whether an error from Transmit/TransmitGSO means "ring
	// full, try later" rather than a packet that can never be sent.
	Full(err error) bool
	// Receive returns the next frame, (nil, nil) when none waits, or an
	// error: for a frame the NIC dropped (already counted there), or a
	// device that cannot receive (closed); the endpoint ends the batch
	// and backs off on any error.
	Receive() (Frame, error)
	// RxReady is signalled when frames may be waiting.
	RxReady() <-chan struct{}
	// Poll services the NIC without interrupts (reclaims TX, signals RX).
	Poll()
	// Close stops the NIC. Frames in flight complete (aborted) through the
	// TX completion callback, so every held reference is released.
	Close() error
}

// RxGate is a Device that may be taken from the endpoint for a while (a
// self-test at run time): the endpoint calls BeginRx before each receive
// batch and, when it returns true, EndRx after it; when it returns false
// the batch is skipped as if nothing had been received. BeginRx must not
// wait.
type RxGate interface {
	BeginRx() bool
	EndRx()
}

// PeekResult says why RxPeeker.PeekRun's run of frames ended.
type PeekResult int

// Why a PeekRun ended.
const (
	PeekNone  PeekResult = iota // no complete frame waits after the run (yet)
	PeekFrame                   // out is full, or the next frame is longer than max (not shown)
	PeekOther                   // a frame Receive must take (it reports an error), or a closed device
)

// PeekedRx is a frame RxPeeker.PeekRun shows in place, with the hardware's
// checksum verdicts.
type PeekedRx struct {
	B            []byte
	IPv4OK, L4OK bool
}

// RxPeeker is an optional Device extension the ACK filter uses when a
// device has it: the frames waiting in the receive ring are looked at in
// place, and the superseded ACKs among them dropped there, before they are
// copied or taken (a pure ACK dropped this way costs the driver a
// descriptor refill instead of a copy, a packet and its release).
type RxPeeker interface {
	// PeekRun shows the run of good frames waiting, the one Receive
	// returns next first, in the device's memory, without taking them:
	// out[k] for k < m. The run ends at len(out), at a frame longer than
	// max bytes (not shown), or at a frame Receive must take; r says
	// which. Each out[k].B stays valid, and must not be written, until
	// that frame is taken (Receive) or dropped (DropRx).
	PeekRun(out []PeekedRx, max int) (m int, r PeekResult)
	// DropRx drops the next k frames Receive would return, all of
	// which PeekRun showed, and gives their memory straight back to the
	// device in one go. It drops nothing and fails when the device no
	// longer shows k such frames (a restart since the PeekRun).
	DropRx(k int) error
}
