// Package connectx drives an NVIDIA/Mellanox ConnectX-4 Lx (and the later
// parts with the same mlx5 interface) as an Ethernet NIC with hardware LSO
// and checksum offload: one send queue, one receive queue, polled.
//
// The card is reached through three small interfaces, so the same driver
// runs on a board (PCIe root complex, TamaGo DMA region) and on the host
// against the device model in package connectxtest: the function's PCI
// configuration space and its BAR0 as mmio.Regs, and DMA memory as
// dma.Memory. Every structure the card reads or writes is big-endian and
// is built explicitly; register values are byte-swapped on the way through
// the little-endian MMIO interface (Linux ioread32be/iowrite32be).
//
// Bring-up follows the PRM order (Linux mlx5 core main.c, Snabb's
// connectx.lua): firmware ready, command queue, ENABLE_HCA, ISSI, boot
// pages, capabilities, init pages, INIT_HCA, regular pages, NIC vport
// context (MTU, promiscuous), MAC, UAR, EQ, PD, transport domain, reserved
// lkey, CQs, TIS, SQ, RQ, TIR and a flow table whose one entry forwards
// everything to the TIR. Every wait is bounded; any failure undoes what was
// done, in reverse, and clears Bus Master Enable when the card stops
// answering, so no memory is left for the card to write.
package connectx

import (
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/tamanic/tamanic/dma"
	"github.com/tamanic/tamanic/internal/mmio"
)

// PCI identity and configuration-space registers.
const (
	VendorMellanox = 0x15B3
	pciID          = 0x00
	pciCommand     = 0x04
	pciCmdMemory   = 1 << 1
	pciCmdMaster   = 1 << 2
)

// DeviceIDs are the mlx5 Ethernet functions this driver accepts (Linux
// mlx5 core main.c mlx5_core_pci_table; CX4, CX4 Lx, CX5, CX6, CX6 Dx,
// CX6 Lx, CX7).
var DeviceIDs = []uint16{0x1013, 0x1015, 0x1017, 0x1019, 0x101B, 0x101D, 0x101F, 0x1021}

// Errors.
var (
	ErrNotConnectX = errors.New("connectx: not an mlx5 function")
	ErrRingFull    = errors.New("connectx: send queue full")
	// ErrRecovering refuses a send while the SQ recovers from an error
	// (it wraps ErrRingFull: Full reports it, the send succeeds later).
	ErrRecovering = fmt.Errorf("%w: recovering from a send error", ErrRingFull)
	// ErrFlushed completes a send the card flushed after an error.
	ErrFlushed     = errors.New("connectx: send flushed after a send error")
	ErrClosed      = errors.New("connectx: NIC closed")
	ErrTooManySegs = errors.New("connectx: packet needs more segments than one WQE holds")
	ErrBadPacket   = errors.New("connectx: packet cannot be sent")
	ErrSendFailed  = errors.New("connectx: the card reported a send error")
	ErrRxError     = errors.New("connectx: the card reported a receive error")
	ErrNoPages     = errors.New("connectx: firmware page request refused")
	ErrCQError     = errors.New("connectx: completion queue failed")
	ErrUARUnmapped = errors.New("connectx: UAR page outside the BAR0 mapping")
	ErrFailed      = errors.New("connectx: card failed")
)

// Config describes one function.
type Config struct {
	// ConfigSpace is the function's PCI configuration space; BAR0 its
	// memory BAR (init segment and UAR pages).
	ConfigSpace, BAR0 mmio.Regs
	// Mem is DMA memory: rings and command mailboxes come from its
	// coherent region, firmware pages and receive buffers from its cached
	// one; transmitted payload is mapped in place.
	Mem dma.Memory
	// TxRing is the send queue in 64-byte WQEBBs (at least 32), RxRing the
	// receive queue in buffers (at least 16); powers of two, default 256.
	TxRing, RxRing int
	// RxBufSize is each receive buffer (default 2048), whole cache lines;
	// frames land RxAlign bytes in, so RxBufSize-RxAlign must hold the
	// vport MTU (MTU+22).
	RxBufSize int
	// MTU is the IP MTU (default 1500).
	MTU int
	// FirmwareTimeout bounds each wait for the initializing bit and
	// CmdTimeout each command: by default Linux's (lib/tout.c
	// FW_PRE_INIT_TIMEOUT 120 s, CMD 60 s). Linux waits only FW_INIT, 2 s,
	// after the command queue address is set; the driver allows
	// FirmwareTimeout there too (a co-simulated card runs in a process
	// that may be descheduled).
	FirmwareTimeout, CmdTimeout time.Duration
	// BringUpCmdTimeout bounds each command Open issues (ENABLE_HCA,
	// QUERY_PAGES, INIT_HCA, the objects ...), in place of CmdTimeout,
	// which then bounds the commands of the running card (Check, queue
	// recovery, page requests, Close). Default Linux's 60 s (lib/tout.c
	// CMD, which Linux gives bring-up too), whatever CmdTimeout is: a
	// firmware may shorten CmdTimeout so that Check does not hold a
	// polled NIC for long, but a card can be slow in bring-up.
	BringUpCmdTimeout time.Duration
	// Now tells the time for those bounds (default time.Now).
	Now func() time.Time
	// SQFlushTimeout bounds the wait, after a send error, for the card
	// to return every outstanding WQE with its flush CQE before the SQ is
	// reset (default 2 s, Linux mlx5e_wait_for_sq_flush,
	// FLUSH_ON_ERROR); past it the card is failed (Fail).
	SQFlushTimeout time.Duration
	// RQFlushTimeout bounds the same wait after a receive error that put
	// the RQ in ERR, for the card to return every posted buffer (default
	// 2 s, as the SQ's: Linux does not wait for the RQ's flush CQEs,
	// en/reporter_rx.c frees the descriptors, so the bound is ours); past
	// it Poll fails the card (Fail).
	RQFlushTimeout time.Duration
	// MaxPages bounds the firmware pages the driver will give (default
	// 16384, 64 MiB); a request beyond it is refused.
	MaxPages int
	// Sleep is called between polls of the card (default runtime.Gosched).
	Sleep func()
	// BAR0Size is how many bytes of BAR0 the driver can reach (a root
	// complex may map only part of the 32 MiB BAR: 1 MiB on the i.MX7D,
	// and a store beyond a pcie.Window is dropped). 0: BAR0's Size method
	// when it has one (pcie.Window does), else unchecked. The UAR page the
	// card allocates must lie within it.
	BAR0Size uint32
}

// Stats are the driver's counters.
type Stats struct {
	TxPackets, TxLSO, TxBytes, TxErrors, TxRingFull, TxBadPacket uint64
	RxPackets, RxBytes, RxErrors, RxCsumOK                       uint64
	// TxGathered counts the sends whose fragments were more than one WQE
	// carries and were copied into a bounce buffer.
	TxGathered                                           uint64
	PagesGiven, PagesReturned, PageRequests, PageRefused uint64
	// PageCantGive counts the run-time page requests answered "cannot
	// give" (MANAGE_PAGES op_mod 0); PageCantGiveFailed those answers the
	// card refused.
	PageCantGive, PageCantGiveFailed            uint64
	Events, PortChanges, CQErrors, SQRecoveries uint64
	// RQRecoveries counts receive queues reset after an error; RxFlushed
	// the buffers the card returned with a flush CQE meanwhile.
	RQRecoveries, RxFlushed uint64
	// RxErrNoRecovery counts the receive errors that left the RQ ready
	// (a syndrome Linux does not recover from, or QUERY_RQ found the RQ
	// not in ERR): the buffer is posted again, no reset.
	RxErrNoRecovery uint64
	Commands        int
}

// Caps are the capabilities read from the card.
type Caps struct {
	CsumCap       bool
	MaxLSO        int // bytes (2^max_lso_cap)
	WQEInlineMode int // 0 L2, 1 from the vport context, 2 none
	MinInlineMode int // vport min_wqe_inline_mode (0 none, 1 L2, 2 IP, 3 TCP/UDP)
	// MaxSQWQEBBs is the largest send WQE in 64-byte WQEBBs: the general
	// caps' max_wqe_sz_sq (bytes) / 64, at most 16 (Linux
	// mlx5e_get_max_sq_wqebbs).
	MaxSQWQEBBs int
	// LocalLBUC and LocalLBMC: the firmware lets the driver turn the
	// vport's unicast and multicast local loopback on and off (general
	// caps disable_local_lb_uc, disable_local_lb_mc; Linux
	// mlx5_nic_vport_update_local_lb). Without them it cannot be
	// changed.
	LocalLBUC bool
	LocalLBMC bool
}

// objects are the numbers the card gave the driver's objects.
type objects struct {
	uar, eqn, pd, td, rlkey uint32
	txcq, rxcq, tis, sq, rq uint32
	tir, ft, fg             uint32
}

// undo is one step of teardown.
type undo struct {
	name string
	fn   func() error
	mem  bool // frees memory (runs after the card lost bus mastering)
}

func (c *Config) defaults() error {
	if c.ConfigSpace == nil || c.BAR0 == nil || c.Mem == nil {
		return errors.New("connectx: Config needs ConfigSpace, BAR0 and Mem")
	}
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.TxRing, 256)
	def(&c.RxRing, 256)
	def(&c.RxBufSize, 2048)
	def(&c.MTU, 1500)
	def(&c.MaxPages, 16384)
	// The SQ holds at least two of the largest WQEs (16 WQEBBs): with NOP
	// padding to the ring end, a ring of one would fit it only at offset 0.
	if c.TxRing < 2*MaxWQEBBs || c.TxRing&(c.TxRing-1) != 0 || c.TxRing > 1<<15 {
		return fmt.Errorf("connectx: TX ring of %d WQEBBs must be a power of two in 32..32768", c.TxRing)
	}
	if c.RxRing < 16 || c.RxRing&(c.RxRing-1) != 0 || c.RxRing > 1<<15 {
		return fmt.Errorf("connectx: RX ring of %d must be a power of two in 16..32768", c.RxRing)
	}
	if c.RxBufSize-RxAlign < c.MTU+22 || c.RxBufSize%dma.CacheLine != 0 {
		return fmt.Errorf("connectx: receive buffer %d too small for MTU %d (%d+%d bytes) or not whole cache lines", c.RxBufSize, c.MTU, RxAlign, c.MTU+22)
	}
	if c.FirmwareTimeout == 0 {
		c.FirmwareTimeout = 120 * time.Second
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.RQFlushTimeout == 0 {
		c.RQFlushTimeout = 2 * time.Second
	}
	if c.SQFlushTimeout == 0 {
		c.SQFlushTimeout = 2 * time.Second
	}
	if c.BringUpCmdTimeout == 0 {
		c.BringUpCmdTimeout = 60 * time.Second
	}
	if c.CmdTimeout == 0 {
		c.CmdTimeout = 60 * time.Second
	}
	if c.Sleep == nil {
		c.Sleep = runtime.Gosched
	}
	if s, ok := c.BAR0.(interface{ Size() uint32 }); ok && c.BAR0Size == 0 {
		c.BAR0Size = s.Size()
	}
	return nil
}
