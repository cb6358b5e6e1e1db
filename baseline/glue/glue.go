// Package glue joins TamaGo's own ENET driver (soc/nxp/enet) to gVisor the
// way the TamaGo ecosystem does, through github.com/usbarmory/go-net, and
// runs the tamanic firmware's services (package firmware/app) on that
// stack, so that the baseline firmware differs from tamanic's only in driver
// and glue.
//
// The data path is go-net's, unchanged:
//
//   - TX: every packet gVisor queues on go-net's channel endpoint triggers
//     go-net's write notification, which pops it, builds the Ethernet frame
//     in a fresh slice (one copy of headers and payload) and hands it to
//     Device.Transmit; TamaGo's ENET.Tx copies it into the descriptor's DMA
//     buffer (a second copy) and starts the uDMA.
//   - RX: Device.Drain pops each frame TamaGo's ENET.Rx returns (the driver
//     copies it out of the DMA buffer into a new slice: one copy) and hands
//     it to go-net's NIC.Rx, which copies the payload into a gVisor buffer
//     (a second copy) and injects it.
//
// The byte counters in Stats count those copies as the pinned code performs
// them (read from TamaGo v1.26.0 soc/nxp/enet/dma.go and go-net
// 93d9ffe nic.go).
package glue

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync/atomic"

	gnet "github.com/usbarmory/go-net"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
)

// Mode is the only TX mode the baseline has, as /stats reports it.
const Mode = "tamago"

// ENET is what the glue needs of TamaGo's soc/nxp/enet.ENET: Rx returns
// the next received frame (a copy, without FCS, its length rounded up to 8
// bytes) or nil, Tx queues one frame for transmission.
type ENET interface {
	Rx() []byte
	Tx(buf []byte)
}

// MaxFrame is the longest frame TamaGo's ENET.Tx sends (enet.MTU): longer
// ones it drops without a word, so Transmit refuses and counts them.
const MaxFrame = 1518

// ErrFrameTooLong is returned by Transmit for a frame ENET.Tx would drop.
var ErrFrameTooLong = errors.New("glue: frame longer than TamaGo's ENET sends")

// Device is the gnet.NetworkDevice on a TamaGo ENET, with counters.
type Device struct {
	ENET ENET
	// Clock, if set, times the stages (nanoseconds).
	Clock func() int64
	// NIC is go-net's NIC the received frames go to (set by NewStack).
	NIC *gnet.NIC

	txFrames, txBytes, txCopied, txDropped, txNs atomic.Int64
	rxFrames, rxBytes, rxCopied, rxNs, rxPasses  atomic.Int64
	rxEmpty                                      atomic.Int64
}

// Receive implements gnet.NetworkDevice: it copies the next frame into buf.
// It returns 0 when none is waiting.
func (d *Device) Receive(buf []byte) (int, error) {
	f := d.ENET.Rx()
	if f == nil {
		return 0, nil
	}
	if len(f) > len(buf) {
		return 0, fmt.Errorf("glue: received frame of %d bytes, buffer %d", len(f), len(buf))
	}
	return copy(buf, f), nil
}

// Transmit implements gnet.NetworkDevice. go-net calls it from its write
// notification, with nil when the endpoint's queue was already empty.
func (d *Device) Transmit(buf []byte) error {
	if len(buf) == 0 {
		return nil
	}
	if len(buf) > MaxFrame {
		d.txDropped.Add(1)
		return fmt.Errorf("%w: %d bytes", ErrFrameTooLong, len(buf))
	}
	d.ENET.Tx(buf)
	d.txFrames.Add(1)
	d.txBytes.Add(int64(len(buf)))
	// go-net's NIC.Tx built buf (one copy), ENET.Tx copies it into the
	// descriptor's buffer (another).
	d.txCopied.Add(2 * int64(len(buf)))
	return nil
}

func (d *Device) now() int64 {
	if d.Clock == nil {
		return 0
	}
	return d.Clock()
}

// Drain hands every waiting frame to go-net (one receive pass) and
// returns how many there were. The firmware calls it from the ENET
// interrupt, as TamaGo's example firmware does.
//
// The pass's time excludes transmissions that ran during it (gVisor may
// send from within its input, and on one core anything the scheduler runs
// meanwhile falls inside the pass's span): those count as TX only, so that
// RxNs, TxNs and the interrupt handler's time do not overlap.
func (d *Device) Drain() int {
	t0, tx0 := d.now(), d.txNs.Load()
	n := 0
	for {
		f := d.ENET.Rx()
		if f == nil {
			break
		}
		n++
		d.rxFrames.Add(1)
		d.rxBytes.Add(int64(len(f)))
		// ENET.Rx copied the frame out of the DMA buffer, NIC.Rx copies
		// its payload into a gVisor buffer.
		d.rxCopied.Add(int64(len(f)) + int64(max(len(f)-14, 0)))
		d.NIC.Rx(f)
	}
	d.rxPasses.Add(1)
	if n == 0 {
		d.rxEmpty.Add(1)
	}
	d.rxNs.Add(d.now() - t0 - (d.txNs.Load() - tx0))
	return n
}

// RxNanoseconds returns the time spent in receive passes so far.
func (d *Device) RxNanoseconds() int64 { return d.rxNs.Load() }

// DirStats counts one direction of the driver and glue, named as the
// tamanic firmware's /stats names its driver counters, so that the bench
// reads both alike.
type DirStats struct {
	Frames int64
	Bytes  int64
	// Copied counts bytes copied between the stack's buffers and the
	// DMA buffers (see the package comment).
	Copied int64
	// Descs counts buffer descriptors used (TX: one per frame).
	Descs   int64 `json:",omitempty"`
	Dropped int64 `json:",omitempty"`
}

// EndpointStats times the glue as the bench reads tamanic's endpoint.
type EndpointStats struct {
	// TxPackets counts packets the stack handed the glue.
	TxPackets int64
	// TxNs is the time in go-net's write notification and the driver's
	// Tx; RxNs the time in receive passes (go-net and gVisor's IP and
	// TCP input run inside them), RxBatches how many passes there were
	// and RxEmpty how many found nothing.
	TxNs, RxNs, RxBatches, RxEmpty int64
}

// Stats is the "nic" member of the baseline's /stats.
type Stats struct {
	Driver struct {
		Tx, Rx DirStats
		// ENET is TamaGo's own receive error counters.
		ENET any `json:"enet,omitempty"`
	} `json:"driver"`
	Endpoint EndpointStats `json:"endpoint"`
	IRQs     int64         `json:"irqs"`
	IRQNs    int64         `json:"irq_ns"`
}

// Controls implements app.Controls for the baseline: one TX mode, no
// copybreak.
type Controls struct {
	Dev  *Device
	Idle func() int64
	// Interrupts, if set, reports interrupts serviced and the time in the
	// handler outside receive passes (those are in Endpoint.RxNs).
	Interrupts func() (n, ns int64)
	// ENETStats, if set, returns TamaGo's driver statistics.
	ENETStats func() any
}

// SetMode implements app.Controls: the baseline has one TX mode and no
// copybreak.
func (c *Controls) SetMode(tx string, cb *int) error {
	if tx != Mode {
		return fmt.Errorf("unknown tx mode %q (the baseline has only %q)", tx, Mode)
	}
	if cb != nil {
		return errors.New("copybreak: the baseline has none (TamaGo's driver always copies)")
	}
	return nil
}

// Mode implements app.Controls.
func (c *Controls) Mode() (string, int) { return Mode, 0 }

// IdleNanoseconds implements app.Controls.
func (c *Controls) IdleNanoseconds() int64 { return c.Idle() }

// Stats implements app.Controls.
func (c *Controls) Stats() any {
	d := c.Dev
	var st Stats
	st.Driver.Tx = DirStats{Frames: d.txFrames.Load(), Bytes: d.txBytes.Load(), Copied: d.txCopied.Load(),
		Descs: d.txFrames.Load(), Dropped: d.txDropped.Load()}
	st.Driver.Rx = DirStats{Frames: d.rxFrames.Load(), Bytes: d.rxBytes.Load(), Copied: d.rxCopied.Load()}
	if c.ENETStats != nil {
		st.Driver.ENET = c.ENETStats()
	}
	st.Endpoint = EndpointStats{TxPackets: d.txFrames.Load() + d.txDropped.Load(), TxNs: d.txNs.Load(),
		RxNs: d.rxNs.Load(), RxBatches: d.rxPasses.Load(), RxEmpty: d.rxEmpty.Load()}
	if c.Interrupts != nil {
		st.IRQs, st.IRQNs = c.Interrupts()
	}
	return st
}

// txNotify is go-net's write notification (go-net 93d9ffe nic.go:
// notification.WriteNotify, Device.Transmit(NIC.Tx())), timed: go-net
// registers its own, untimed, on the channel endpoint and keeps no handle
// to remove it, so NewStack initialises go-net without a device and
// registers this one instead.
type txNotify struct{ d *Device }

func (t txNotify) WriteNotify() {
	t0 := t.d.now()
	t.d.Transmit(t.d.NIC.Tx())
	t.d.txNs.Add(t.d.now() - t0)
}

// NewStack builds go-net's interface on dev, the way TamaGo's example
// firmware does (gnet.Interface.Init: gVisor stack with IPv4, ARP, TCP,
// UDP and ICMP, go-net's channel endpoint, static address and default
// route), then gives TCP the send and receive buffer sizes the tamanic
// firmware's stack uses (app.NewStack), so that the two differ in driver
// and glue only.
func NewStack(dev *Device, mac net.HardwareAddr, addr netip.Prefix, gw netip.Addr) (*gnet.Interface, error) {
	iface := &gnet.Interface{}
	if err := iface.Init(nil, addr.String(), mac.String(), gw.String()); err != nil {
		return nil, fmt.Errorf("glue: go-net init: %w", err)
	}
	iface.NIC.Device = dev
	dev.NIC = iface.NIC
	iface.Link.AddNotify(txNotify{dev})
	sb := tcpip.TCPSendBufferSizeRangeOption{Min: 4096, Default: 1 << 20, Max: 4 << 20}
	rb := tcpip.TCPReceiveBufferSizeRangeOption{Min: 4096, Default: 1 << 20, Max: 4 << 20}
	if err := iface.Stack.SetTransportProtocolOption(tcp.ProtocolNumber, &sb); err != nil {
		return nil, fmt.Errorf("glue: TCP send buffer: %v", err)
	}
	if err := iface.Stack.SetTransportProtocolOption(tcp.ProtocolNumber, &rb); err != nil {
		return nil, fmt.Errorf("glue: TCP receive buffer: %v", err)
	}
	return iface, nil
}
