// Package connectxtest is a host model of a ConnectX-4 Lx (mlx5) function:
// PCI configuration space, BAR0 (init segment, UAR pages), firmware start-up,
// the command queue with its delivery and command statuses, the firmware
// page protocol, EQ/CQ/SQ/RQ/TIS/TIR/flow-table objects, send WQE parsing,
// LSO and checksum offload, receive with checksum verdicts, and a wire.
//
// The model is written from the PRM facts as Linux records them
// (include/linux/mlx5/mlx5_ifc.h, device.h, qp.h, cq.h; drivers/net/
// ethernet/mellanox/mlx5/core cmd.c, pagealloc.c, en_tx.c, en_rx.c) and
// Snabb's connectx.lua, with its own offset tables: it does not use the
// driver's encoders, so a layout mistake in the driver fails against it.
// All device accesses to host memory go through a dmatest.Memory, so a
// missing cache clean or invalidate in the driver is reported. Words the
// card and the driver share while both run (doorbell records, the last
// word of each CQE and EQE, the command entry's status word) must be in
// coherent memory and are accessed atomically.
//
// What silicon rejects, the model rejects the same way: a malformed
// command entry or mailbox chain through the delivery status, a bad command
// through its status and syndrome, a bad WQE through an error CQE that
// moves the SQ to the error state. What silicon would silently get wrong
// (a doorbell whose two halves are not written in order, a CQE written
// into non-coherent memory, an EQ overrun) is reported as a violation.
package connectxtest

import (
	"encoding/binary"
	"fmt"
	"sync"

	"github.com/tamanic/tamanic/dma/dmatest"
)

// Options configure a Model.
type Options struct {
	Mem *dmatest.Memory
	// Device, used when Mem is nil, is any other memory the model reaches
	// by DMA (a file shared with an emulator: see Shared).
	Device   DeviceMemory
	MAC      [6]byte
	DeviceID uint16 // default 0x1015 (ConnectX-4 Lx)
	// Firmware pages wanted at each stage (defaults 4, 16, 0).
	BootPages, InitPages, RegularPages int
	// InitPolls is how many reads of the initializing word report busy after
	// power-up and after the command queue address is set (default 3).
	InitPolls int
	// MinInlineMode is the vport's min_wqe_inline_mode (default 1, L2);
	// WQEInlineMode the Ethernet caps' wqe_inline_mode (default 1: from the
	// vport context; 2 not required; WQEInlineL2 for 0, L2).
	MinInlineMode, WQEInlineMode int
	// MaxLSOLog is max_lso_cap (default 16: 64 KiB).
	MaxLSOLog int
	// MaxWQESzSQ is the general caps' max_wqe_sz_sq, the largest send WQE
	// in bytes (default 1024: 16 WQEBBs, MLX5_SEND_WQE_MAX_WQEBBS).
	MaxWQESzSQ int
	// ReservedLKey is what QUERY_SPECIAL_CONTEXTS reports (default 0x77).
	ReservedLKey uint32
	// LinkDown starts with the port down.
	LinkDown bool
	// PortMTU, when set, caps the vport MTU (hardware MTU, FCS included)
	// whatever the driver asks for.
	PortMTU int
	// PortMaxMTU is the port's largest MTU, PMTU max_mtu (hardware MTU,
	// FCS included; default 9978).
	PortMaxMTU int
	// LocalLoopback starts with the vport's local loopback on
	// (disable_uc_local_lb and disable_mc_local_lb clear); by default
	// both are set (loopback.go).
	LocalLoopback bool
	// NoLocalLBCap reports neither disable_local_lb_uc nor
	// disable_local_lb_mc in the general caps: the vport's local
	// loopback cannot be changed (MODIFY_NIC_VPORT_CONTEXT refuses the
	// fields) and is on, whatever LocalLoopback says.
	NoLocalLBCap bool
}

// WQEInlineL2 asks for wqe_inline_mode 0 (MLX5_CAP_INLINE_MODE_L2) in
// Options.WQEInlineMode, whose zero value means the default.
const WQEInlineL2 = -1

// inlineMode is the minimum inline mode the card applies to every send
// (Linux mlx5_query_min_inline): L2 (1) for wqe_inline_mode 0, the
// vport's min_wqe_inline_mode for 1, none (0) for 2.
func (o *Options) inlineMode() int {
	switch o.WQEInlineMode {
	case WQEInlineL2:
		return 1
	case 2:
		return 0
	}
	return o.MinInlineMode
}

// wqeInlineCap is the wqe_inline_mode the Ethernet caps report.
func (o *Options) wqeInlineCap() uint32 {
	if o.WQEInlineMode == WQEInlineL2 {
		return 0
	}
	return uint32(o.WQEInlineMode)
}

// Faults injects failures.
type Faults struct {
	// NeverReady keeps the initializing bit set forever.
	NeverReady bool
	// StallAfter stops completing commands after this many (0: never).
	StallAfter int
	// FailOp makes every command with this opcode fail with FailStatus.
	FailOp     uint16
	FailStatus uint8
	// HoldTx makes the card take doorbells but not execute them until
	// ReleaseTx (a paused port: the send queue fills up).
	HoldTx bool
	// HoldFlush keeps the flush error CQEs an SQ or RQ in error owes (one
	// per outstanding WQE, after the error CQE) in the card until
	// ReleaseFlush: they arrive late.
	HoldFlush bool
	// HoldCmd makes the firmware take command doorbells but complete the
	// commands only at ReleaseCmd (a slow command).
	HoldCmd bool
	// FailRx makes the next frame delivered to an RQ fail with this
	// responder syndrome (e.g. 0x04, local protection, as a bad lkey or
	// an unreachable buffer gives) instead of landing.
	FailRx uint8
	// FailRxReady makes the FailRx error leave the RQ as it is, whatever
	// the syndrome: the case Linux's RQ recovery asks QUERY_RQ about
	// before resetting (en/reporter_rx.c
	// mlx5e_rx_reporter_err_rq_cqe_recover: "if (state !=
	// MLX5_RQC_STATE_ERR) goto out").
	FailRxReady bool
	// AllowWrap accepts a multi-WQEBB WQE that crosses the ring end (by
	// default an error: Linux pads with NOPs, and whether silicon wraps is
	// UNCONFIRMED).
	AllowWrap bool
	// WrongVerdict turns over the TCP/UDP checksum verdict (CQE L4_OK)
	// of the next WrongVerdict received frames that have one.
	WrongVerdict int
	// DropSegment skips the next DropSegment send data segments that
	// follow another in their WQE: the frame goes out without the bytes.
	DropSegment int
	// NoCsumInsert makes the next NoCsumInsert SENDs that ask for
	// checksum insertion (eth segment cs_flags) go out with the frame's
	// checksum fields as the driver left them: a card that ignores
	// cs_flags.
	NoCsumInsert int
}

// Stats are the model's counters.
type Stats struct {
	Commands, CmdFailed, Delivery                     int
	TxFrames, TxBytes, TxLSO, TxSegments, TxWQEErrors int
	// TxFlushed counts the WQEs completed with a flush error.
	TxFlushed                                    int
	TxCsumL3, TxCsumL4                           int
	RxFrames, RxNoBuffer, RxNoSteering, RxErrors int
	// RxFlushed counts the RQ WQEs completed with a flush error;
	// RxQueueError the frames dropped because the RQ was in ERR.
	RxFlushed, RxQueueError int
	// RxPortDown counts the frames dropped because the port's admin
	// status was down (PAOS never set UP).
	RxPortDown int
	// TxPortDown counts the frames the port did not send because its
	// admin status was down.
	TxPortDown                                        int
	CQOverruns, EQOverruns, PagesGiven, PagesReturned int
	Doorbells                                         int
	// PagesCantGive counts MANAGE_PAGES "cannot give" answers (op_mod
	// 0) to page requests.
	PagesCantGive int
	// DMABlocked counts send doorbells the card could not act on because
	// Bus Master Enable was off when it came to fetch the WQEs.
	DMABlocked int
	// TxLoopback counts the transmitted frames the vport looped back to
	// itself (loopback.go), RxLoopback those its TIR took, and
	// RxSelfLBBlocked those the TIR's self_lb_block kept out.
	TxLoopback, RxLoopback, RxSelfLBBlocked int
}

// Command statuses (device.h MLX5_CMD_STAT_*), delivery statuses (cmd.c).
const (
	stOK          = 0x00
	stBadOp       = 0x02
	stBadParam    = 0x03
	stBadSysState = 0x04
	stBadResource = 0x05
	stBusy        = 0x06
	stBadResState = 0x09
	stBadInLen    = 0x50
	stBadOutLen   = 0x51

	dsToken     = 0x02
	dsBlockNum  = 0x03
	dsOutPtr    = 0x04
	dsInPtr     = 0x05
	dsInLen     = 0x07
	dsOutLen    = 0x08
	dsResNotClr = 0x09
	dsBadType   = 0x10
)

// BAR0 layout: init segment, then UAR pages 1..uarPages-1.
const (
	barSize  = 64 << 10
	uarPages = barSize / 4096
)

type eq struct {
	logSize, uar uint32
	pas          []uint64
	pi, ci       uint32
	mask         uint64
}

type cq struct {
	logSize, uar, eqn uint32
	cc, oi, err       bool
	pas               []uint64
	dbr               []byte
	pi                uint32
}

type wq struct {
	cqn, pd, uar, tis    uint32
	state                uint32
	logStride, logSize   uint32
	pas                  []uint64
	dbr                  []byte
	ci                   uint32 // 16-bit hardware counter
	flush, rlkey, isSend bool
}

type fgroup struct{ table, start, end uint32 }
type fte struct{ group, tir uint32 }

// Model is one mlx5 function.
type Model struct {
	mu     sync.Mutex
	opts   Options
	mem    DeviceMemory
	faults Faults
	cfg    [16]uint32
	bar    []byte
	stats  Stats
	viol   []string
	peer   func([]byte)
	act    chan struct{}

	polls    int
	hSet     bool
	cmdq     uint64
	cmdReady bool
	lastBAR  uint32
	health   uint32

	enabled, issiSet, inited, torn bool
	pages                          map[uint64]bool
	need                           int // pages the firmware wants held
	mtu                            uint32
	promisc                        uint32
	portMTU                        uint32 // PMTU admin_mtu (0: never set)
	link                           bool
	// adminUp is PAOS admin_status == UP (1); it starts down (DOWN, 2)
	// and the port is operationally up only when it is up and the link
	// is (portUp).
	adminUp bool

	next    uint32
	uars    map[uint32]bool
	eqs     map[uint32]*eq
	pds     map[uint32]bool
	tds     map[uint32]bool
	cqs     map[uint32]*cq
	tises   map[uint32]uint32 // tis -> td
	sqs     map[uint32]*wq
	rqs     map[uint32]*wq
	tirs    map[uint32][2]uint32 // tir -> rqn, td
	fts     map[uint32]uint32    // table -> log size
	fgs     map[uint32]fgroup
	ftes    map[[2]uint32]fte // (table, index)
	root    uint32
	out     [][]byte
	held    map[uint32][]byte // doorbells taken under HoldTx
	heldCmd uint32            // command doorbells taken under HoldCmd
	// lateFlush are flush CQEs the card owes, held under HoldFlush.
	lateFlush []lateCQE
	rxScr     []byte
	txScr     []byte
	// vportLB is nic_vport_context dword 0's disable_mc_local_lb and
	// disable_uc_local_lb; tirLB each TIR's self_lb_block; txTD the
	// transport domain of the SQ whose WQE runs (loopback.go).
	vportLB uint32
	tirLB   map[uint32]uint8
	txTD    uint32
}

// New returns a powered-up model: firmware initializing, nothing enabled.
func New(o Options) *Model {
	if o.DeviceID == 0 {
		o.DeviceID = 0x1015
	}
	if o.BootPages == 0 {
		o.BootPages = 4
	}
	if o.InitPages == 0 {
		o.InitPages = 16
	}
	if o.InitPolls == 0 {
		o.InitPolls = 3
	}
	if o.MinInlineMode == 0 {
		o.MinInlineMode = 1
	}
	if o.WQEInlineMode == 0 {
		o.WQEInlineMode = 1
	}
	if o.MaxLSOLog == 0 {
		o.MaxLSOLog = 16
	}
	if o.PortMaxMTU == 0 {
		o.PortMaxMTU = 9978
	}
	if o.MaxWQESzSQ == 0 {
		o.MaxWQESzSQ = 1024
	}
	if o.ReservedLKey == 0 {
		o.ReservedLKey = 0x77
	}
	if o.MAC == [6]byte{} {
		o.MAC = [6]byte{0x02, 0xC7, 0, 0, 0, 1}
	}
	var mem DeviceMemory = o.Device
	if o.Mem != nil {
		mem = o.Mem
	}
	m := &Model{opts: o, mem: mem, bar: make([]byte, barSize), act: make(chan struct{}, 1),
		polls: o.InitPolls, link: !o.LinkDown, next: 0x10}
	m.cfg[0] = uint32(o.DeviceID)<<16 | 0x15B3
	m.reset()
	return m
}

func (m *Model) reset() {
	m.enabled, m.issiSet, m.inited, m.torn = false, false, false, false
	m.pages = map[uint64]bool{}
	m.need = 0
	m.uars, m.eqs, m.pds, m.tds = map[uint32]bool{}, map[uint32]*eq{}, map[uint32]bool{}, map[uint32]bool{}
	m.cqs, m.tises, m.sqs, m.rqs = map[uint32]*cq{}, map[uint32]uint32{}, map[uint32]*wq{}, map[uint32]*wq{}
	m.tirs, m.fts, m.fgs, m.ftes = map[uint32][2]uint32{}, map[uint32]uint32{}, map[uint32]fgroup{}, map[[2]uint32]fte{}
	m.root = 0
	m.lateFlush = nil
	m.tirLB = map[uint32]uint8{}
	m.vportLB = vportDisableUC | vportDisableMC
	if m.opts.LocalLoopback || m.opts.NoLocalLBCap {
		m.vportLB = 0
	}
}

func (m *Model) violation(format string, a ...any) {
	m.viol = append(m.viol, fmt.Sprintf(format, a...))
}

// Violations returns and forgets what the model found wrong.
func (m *Model) Violations() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	v := m.viol
	m.viol = nil
	return v
}

// Stats returns the counters.
func (m *Model) Stats() Stats {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.stats
}

// MaxFrame returns the longest frame, without FCS, the port's MAC takes:
// the hardware MTU the driver gave the vport (MODIFY_NIC_VPORT_CONTEXT
// mtu, which counts the FCS: Linux MLX5E_SW2HW_MTU) less 4; 0 before it
// is set. A ConnectX MAC drops and counts a longer frame (Linux mlx5
// counters.rst: rx_oversize_pkts_phy).
func (m *Model) MaxFrame() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if mtu := m.macMTU(); mtu > 0 {
		return mtu - 4
	}
	return 0
}

// defaultPortMTU is the port MTU (hardware, FCS included) before the
// driver writes PMTU: a 1500-byte Ethernet MTU. What firmware reports
// after reset is UNCONFIRMED; Linux never relies on it, it writes
// admin_mtu on every open (en_main.c mlx5e_set_mtu: mlx5_set_port_mtu,
// then the vport MTU), and so does Snabb (connectx.lua set_port_mtu).
const defaultPortMTU = 1522

// macMTU is the hardware MTU the MAC applies: the port's (PMTU
// oper_mtu) and the vport's, the smaller; 0 while the vport has none.
func (m *Model) macMTU() int {
	if m.mtu == 0 {
		return 0
	}
	port := uint32(defaultPortMTU)
	if m.portMTU != 0 {
		port = m.portMTU
	}
	return int(min(m.mtu, port))
}

// SetFaults replaces the injected faults.
func (m *Model) SetFaults(f Faults) {
	m.mu.Lock()
	m.faults = f
	m.mu.Unlock()
}

// SetPeer sets where transmitted frames go (called without the model's
// lock, with a frame the callee may keep).
func (m *Model) SetPeer(f func([]byte)) {
	m.mu.Lock()
	m.peer = f
	m.mu.Unlock()
}

// ReleaseCmd ends HoldCmd and completes the commands rung meanwhile.
func (m *Model) ReleaseCmd() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.faults.HoldCmd = false
	if v := m.heldCmd; v != 0 {
		m.heldCmd = 0
		m.doorbell(v)
	}
}

// ReleaseTx ends HoldTx and executes the doorbells taken meanwhile.
func (m *Model) ReleaseTx() {
	m.mu.Lock()
	m.faults.HoldTx = false
	for sqn, db := range m.held {
		if sq := m.sqs[sqn]; sq != nil {
			m.processSQ(sqn, sq, db)
		}
	}
	m.held = nil
	out, peer := m.out, m.peer
	m.out = nil
	m.mu.Unlock()
	for _, f := range out {
		if peer != nil {
			peer(f)
		}
	}
}

// Activity is signalled whenever the model writes a CQE or EQE: what an
// interrupt line would say. A polled driver's owner calls Poll on it.
func (m *Model) Activity() <-chan struct{} { return m.act }

// State summarises what the function holds, for teardown checks.
type State struct {
	Enabled, Initialized bool
	BusMaster            bool
	Pages, Objects       int
	// AdminUp is the port's PAOS admin status (up after the driver set
	// it UP, down again after it set it DOWN).
	AdminUp bool
}

// State returns the function's state.
func (m *Model) State() State {
	m.mu.Lock()
	defer m.mu.Unlock()
	objs := len(m.uars) + len(m.eqs) + len(m.pds) + len(m.tds) + len(m.cqs) + len(m.tises) + len(m.sqs) +
		len(m.rqs) + len(m.tirs) + len(m.fts) + len(m.fgs) + len(m.ftes)
	return State{Enabled: m.enabled, Initialized: m.inited && !m.torn, BusMaster: m.cfg[1]&4 != 0,
		Pages: len(m.pages), Objects: objs, AdminUp: m.adminUp}
}

// RequestPages injects a page-request event: n > 0 asks for n more pages,
// n < 0 offers -n back.
func (m *Model) RequestPages(n int32) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.need += int(n)
	var d [28]byte
	binary.BigEndian.PutUint32(d[4:], uint32(n))
	for eqn := range m.eqs {
		m.postEQE(eqn, 0x0B, 0, d[:])
	}
}

// SetLink changes the port state and reports it with a port-change event.
func (m *Model) SetLink(up bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	was := m.portUp()
	m.link = up
	if m.portUp() != was {
		m.portChange()
	}
}

// portUp reports the port's operational state: the link is up and PAOS
// admin status is UP.
func (m *Model) portUp() bool { return m.link && m.adminUp }

// portChange reports the port's operational state with a port-change
// event (subtype 4 up, 1 down) on every EQ.
func (m *Model) portChange() {
	sub := uint8(1)
	if m.portUp() {
		sub = 4
	}
	var d [28]byte
	d[8] = 1 << 4 // port 1 (struct mlx5_eqe_port_state: port at data+8, bits 7:4)
	for eqn := range m.eqs {
		m.postEQE(eqn, 0x09, sub, d[:])
	}
}
