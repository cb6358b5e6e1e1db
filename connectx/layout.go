package connectx

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Every structure the card reads or writes is made of big-endian 32-bit
// words (PRM; Linux include/linux/mlx5/mlx5_ifc.h, device.h, qp.h, cq.h).
// Bit numbers below are within such a word, bit 31 being the most
// significant bit of its first byte.

// Init segment at BAR0 offset 0 (device.h struct mlx5_init_seg).
const (
	InitFWRev        = 0x000 // fw_rev: minor 31:16, major 15:0
	InitCmdIfRev     = 0x004 // cmdif_rev 31:16, fw_sub 15:0
	InitCmdqAddrH    = 0x010 // cmdq_addr_h (written first)
	InitCmdqAddrLSz  = 0x014 // cmdq_addr_l 31:12, nic_interface 10:8, log_cmdq_size 7:4, log_cmdq_stride 3:0
	InitCmdDbell     = 0x018 // cmd_dbell: 1<<slot
	InitInitializing = 0x1FC // bit 31: firmware busy
	InitHealth       = 0x200 // health buffer
	InitHealthCount  = 0x1010
	CmdIfRev         = 5 // the only command interface revision this driver speaks
	InitBusy         = 1 << 31
)

// UAR page offsets (Linux: MLX5_CQ_DOORBELL, MLX5_EQ_DOORBEL_OFFSET,
// MLX5_BF_OFFSET).
const (
	UARCQDoorbell     = 0x20
	UAREQDoorbellArm  = 0x40
	UAREQDoorbell     = 0x48 // consumer index update, no arm
	UARSendDoorbell   = 0x800
	UARPageSize       = 4096
	PageSize          = 4096 // firmware pages and PAS pages (MLX5_ADAPTER_PAGE_SHIFT 12)
	CmdEntrySize      = 64
	MailboxSize       = 0x240
	MailboxData       = 512
	CmdInlineSize     = 16
	CmdEntryTypePCI   = 0x07
	CmdOwnerHW        = 0x01
	WQEBB             = 64
	DSSize            = 16
	MaxWQEBBs         = 16
	CQESize           = 64
	EQESize           = 64
	InvalidLKey       = 0x100 // MLX5_INVALID_LKEY
	CQEOpOwnInit      = 0xF1  // opcode 0xF (invalid), owner 1
	EQEOwnerInit      = 0x01
	MinInlineL2       = 18 // MLX5E_MIN_INLINE: Ethernet + one VLAN tag
	inlineHdrStartLen = 2  // inline header bytes inside the eth segment
)

// Command opcodes (mlx5_ifc.h MLX5_CMD_OP_*).
const (
	OpQueryHCACap          = 0x100
	OpInitHCA              = 0x102
	OpTeardownHCA          = 0x103
	OpEnableHCA            = 0x104
	OpDisableHCA           = 0x105
	OpQueryPages           = 0x107
	OpManagePages          = 0x108
	OpQueryISSI            = 0x10A
	OpSetISSI              = 0x10B
	OpQuerySpecialContexts = 0x203
	OpCreateEQ             = 0x301
	OpDestroyEQ            = 0x302
	OpCreateCQ             = 0x400
	OpDestroyCQ            = 0x401
	OpQueryVportState      = 0x750
	OpQueryNICVportContext = 0x754
	OpModifyNICVportCtx    = 0x755
	OpAllocPD              = 0x800
	OpDeallocPD            = 0x801
	OpAllocUAR             = 0x802
	OpDeallocUAR           = 0x803
	OpAccessRegister       = 0x805
	OpAllocTransportDomain = 0x816
	OpDeallocTransportDom  = 0x817
	OpCreateTIR            = 0x900
	OpDestroyTIR           = 0x902
	OpCreateSQ             = 0x904
	OpModifySQ             = 0x905
	OpDestroySQ            = 0x906
	OpCreateRQ             = 0x908
	OpModifyRQ             = 0x909
	OpDestroyRQ            = 0x90A
	OpQueryRQ              = 0x90B
	OpCreateTIS            = 0x912
	OpDestroyTIS           = 0x914
	OpSetFlowTableRoot     = 0x92F
	OpCreateFlowTable      = 0x930
	OpDestroyFlowTable     = 0x931
	OpCreateFlowGroup      = 0x933
	OpDestroyFlowGroup     = 0x934
	OpSetFlowTableEntry    = 0x936
	OpDeleteFlowTableEntry = 0x938
)

// ACCESS_REGISTER op_mods (Linux mlx5_core_access_reg: op_mod = !write)
// and the PMTU register (MLX5_REG_PMTU; mlx5_ifc.h pmtu_reg: local_port
// at +0x00 bits 23:16, max_mtu +0x04, admin_mtu +0x08, oper_mtu +0x0C,
// each bits 31:16).
const (
	AccessRegWrite = 0
	AccessRegRead  = 1
	RegPMTU        = 0x5003
	RegPAOS        = 0x5006 // MLX5_REG_PAOS
)

// Page stages (QUERY_PAGES op_mod) and MANAGE_PAGES op_mods.
const (
	PagesBoot    = 1
	PagesInit    = 2
	PagesRegular = 3

	// ManagePagesCantGive (MLX5_PAGES_CANT_GIVE) answers a page request
	// the driver cannot satisfy, so the firmware stops waiting for the
	// pages (Linux pagealloc.c page_notify_fail).
	ManagePagesCantGive = 0
	ManagePagesGive     = 1
	ManagePagesTake     = 2
)

// Queue states (MLX5_SQC_STATE_*, MLX5_RQC_STATE_*).
const (
	StateRST = 0
	StateRDY = 1
	StateERR = 3
)

// Event types (MLX5_EVENT_TYPE_*).
const (
	EventCQError     = 0x04
	EventPortChange  = 0x09
	EventPageRequest = 0x0B
)

// WQE opcodes (qp.h MLX5_OPCODE_*), control flags and eth segment flags.
const (
	OpcodeNOP      = 0x00
	OpcodeSend     = 0x0A
	OpcodeLSO      = 0x0E
	CtrlCQUpdate   = 2 << 2 // fm_ce_se: CE = 2, a CQE for this WQE
	EthL3Csum      = 1 << 6 // MLX5_ETH_WQE_L3_CSUM
	EthL4Csum      = 1 << 7 // MLX5_ETH_WQE_L4_CSUM
	CQEOpReq       = 0x0
	CQEOpRespSend  = 0x2
	CQEOpReqErr    = 0xD
	CQEOpRespErr   = 0xE
	CQEOpInvalid   = 0xF
	CQEL2OK        = 1 << 0
	CQEL3OK        = 1 << 1
	CQEL4OK        = 1 << 2
	CQEL3TypeIPv6  = 1
	CQEL3TypeIPv4  = 2
	SyndromeLength = 0x01 // MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR
	SyndromeQPOp   = 0x02 // LOCAL_QP_OP_ERR
	SyndromeProt   = 0x04 // LOCAL_PROT_ERR
	SyndromeFlush  = 0x05 // WR_FLUSH_ERR
)

// ErrLayout reports a structure that cannot be encoded or decoded.
var ErrLayout = errors.New("connectx: malformed structure")

// be32 and friends are shorthands for big-endian access at byte offsets.
func be32(b []byte, off int) uint32     { return binary.BigEndian.Uint32(b[off:]) }
func put32(b []byte, off int, v uint32) { binary.BigEndian.PutUint32(b[off:], v) }
func be64(b []byte, off int) uint64     { return binary.BigEndian.Uint64(b[off:]) }
func put64(b []byte, off int, v uint64) { binary.BigEndian.PutUint64(b[off:], v) }

// Field is a bit field of a big-endian word at byte offset Off, bits Hi..Lo.
type Field struct {
	Off    int
	Hi, Lo uint
}

func (f Field) mask() uint32 { return uint32((uint64(1)<<(f.Hi-f.Lo+1))-1) << f.Lo }

// Get reads f from b.
func (f Field) Get(b []byte) uint32 { return (be32(b, f.Off) & f.mask()) >> f.Lo }

// Set writes v into f in b, leaving the word's other bits alone.
func (f Field) Set(b []byte, v uint32) {
	m := f.mask()
	put32(b, f.Off, be32(b, f.Off)&^m|(v<<f.Lo)&m)
}

// Command queue entry (device.h struct mlx5_cmd_layout).
const (
	cmdType      = 0x00
	cmdInLen     = 0x04
	cmdInPtr     = 0x08
	cmdIn        = 0x10
	cmdOut       = 0x20
	cmdOutPtr    = 0x30
	cmdOutLen    = 0x38
	cmdToken     = 0x3C
	cmdStatusOwn = 0x3F
)

// CmdEntry is a decoded command queue entry.
type CmdEntry struct {
	InLen, OutLen  uint32
	InPtr, OutPtr  uint64
	In, Out        [CmdInlineSize]byte
	Token          uint8
	DeliveryStatus uint8 // status_own bits 7:1
	Owner          bool  // status_own bit 0: hardware owns the entry
}

// Encode writes e into the 64-byte slot b.
func (e *CmdEntry) Encode(b []byte) {
	clear(b[:CmdEntrySize])
	b[cmdType] = CmdEntryTypePCI
	put32(b, cmdInLen, e.InLen)
	put64(b, cmdInPtr, e.InPtr)
	copy(b[cmdIn:], e.In[:])
	copy(b[cmdOut:], e.Out[:])
	put64(b, cmdOutPtr, e.OutPtr)
	put32(b, cmdOutLen, e.OutLen)
	b[cmdToken] = e.Token
	b[cmdStatusOwn] = e.DeliveryStatus<<1 | b2u8(e.Owner)
}

// DecodeCmdEntry reads a 64-byte command queue entry.
func DecodeCmdEntry(b []byte) (CmdEntry, error) {
	if len(b) < CmdEntrySize {
		return CmdEntry{}, fmt.Errorf("%w: command entry of %d bytes", ErrLayout, len(b))
	}
	if b[cmdType] != CmdEntryTypePCI {
		return CmdEntry{}, fmt.Errorf("%w: command entry type %#x", ErrLayout, b[cmdType])
	}
	e := CmdEntry{InLen: be32(b, cmdInLen), OutLen: be32(b, cmdOutLen), InPtr: be64(b, cmdInPtr),
		OutPtr: be64(b, cmdOutPtr), Token: b[cmdToken], DeliveryStatus: b[cmdStatusOwn] >> 1,
		Owner: b[cmdStatusOwn]&1 != 0}
	copy(e.In[:], b[cmdIn:])
	copy(e.Out[:], b[cmdOut:])
	return e, nil
}

// Mailbox (device.h struct mlx5_cmd_prot_block).
const (
	mbNext     = 0x230
	mbBlockNum = 0x238
	mbToken    = 0x23D
)

// Mailbox is a decoded mailbox block.
type Mailbox struct {
	Data     [MailboxData]byte
	Next     uint64
	BlockNum uint32
	Token    uint8
}

// Encode writes m into the 0x240-byte block b.
func (m *Mailbox) Encode(b []byte) {
	clear(b[:MailboxSize])
	copy(b, m.Data[:])
	put64(b, mbNext, m.Next)
	put32(b, mbBlockNum, m.BlockNum)
	b[mbToken] = m.Token
}

// DecodeMailbox reads a mailbox block.
func DecodeMailbox(b []byte) (Mailbox, error) {
	var m Mailbox
	if len(b) < MailboxSize {
		return m, fmt.Errorf("%w: mailbox of %d bytes", ErrLayout, len(b))
	}
	copy(m.Data[:], b)
	m.Next, m.BlockNum, m.Token = be64(b, mbNext), be32(b, mbBlockNum), b[mbToken]
	return m, nil
}

// Mailboxes returns how many mailboxes a message of n bytes needs: the first
// 16 bytes travel in the entry.
func Mailboxes(n int) int {
	if n <= CmdInlineSize {
		return 0
	}
	return (n - CmdInlineSize + MailboxData - 1) / MailboxData
}

// Command input header: opcode 31:16 of word 0, op_mod 15:0 of word 1.
// Output header: status byte 0, syndrome word 1.
var (
	InOpcode = Field{0x00, 31, 16}
	InOpMod  = Field{0x04, 15, 0}
)

// CmdStatus is a command's status byte (device.h MLX5_CMD_STAT_*).
type CmdStatus uint8

// Command statuses.
const (
	StatOK            CmdStatus = 0x00
	StatInternal      CmdStatus = 0x01
	StatBadOp         CmdStatus = 0x02
	StatBadParam      CmdStatus = 0x03
	StatBadSysState   CmdStatus = 0x04
	StatBadResource   CmdStatus = 0x05
	StatResourceBusy  CmdStatus = 0x06
	StatExceedLimit   CmdStatus = 0x08
	StatBadResState   CmdStatus = 0x09
	StatBadIndex      CmdStatus = 0x0A
	StatNoResources   CmdStatus = 0x0F
	StatBadInputLen   CmdStatus = 0x50
	StatBadOutputLen  CmdStatus = 0x51
	StatBadResStateQP CmdStatus = 0x10
	StatBadPacket     CmdStatus = 0x30
	StatBadSize       CmdStatus = 0x40
)

var statusNames = map[CmdStatus]string{
	StatOK: "ok", StatInternal: "internal error", StatBadOp: "bad opcode", StatBadParam: "bad parameter",
	StatBadSysState: "bad system state", StatBadResource: "bad resource", StatResourceBusy: "resource busy",
	StatExceedLimit: "exceeds limit", StatBadResState: "bad resource state", StatBadIndex: "bad index",
	StatNoResources: "no resources", StatBadInputLen: "bad input length", StatBadOutputLen: "bad output length",
	StatBadResStateQP: "bad QP state", StatBadPacket: "bad packet", StatBadSize: "bad size",
}

func (s CmdStatus) String() string {
	if n, ok := statusNames[s]; ok {
		return n
	}
	return fmt.Sprintf("status %#x", uint8(s))
}

// Delivery statuses (status_own bits 7:1; Linux cmd.c MLX5_CMD_DELIVERY_STAT_*).
const (
	DeliveryOK          = 0x00
	DeliverySignature   = 0x01
	DeliveryToken       = 0x02
	DeliveryBadBlockNum = 0x03
	DeliveryOutPtrAlign = 0x04
	DeliveryInPtrAlign  = 0x05
	DeliveryFW          = 0x06
	DeliveryInLength    = 0x07
	DeliveryOutLength   = 0x08
	DeliveryResNotClear = 0x09
	DeliveryBadType     = 0x10
)

// WQE control segment (qp.h struct mlx5_wqe_ctrl_seg), 16 bytes.
type CtrlSeg struct {
	OpMod    uint8
	WQEIndex uint16
	Opcode   uint8
	SQN      uint32 // 24 bits
	DS       uint8  // 6 bits: WQE size in 16-byte units
	FmCeSe   uint8
	Imm      uint32
}

// Encode writes c into b[0:16].
func (c *CtrlSeg) Encode(b []byte) {
	put32(b, 0, uint32(c.OpMod)<<24|uint32(c.WQEIndex)<<8|uint32(c.Opcode))
	put32(b, 4, c.SQN<<8|uint32(c.DS&0x3F))
	b[8], b[9], b[10], b[11] = 0, 0, 0, c.FmCeSe
	put32(b, 12, c.Imm)
}

// DecodeCtrlSeg reads a control segment.
func DecodeCtrlSeg(b []byte) (CtrlSeg, error) {
	if len(b) < DSSize {
		return CtrlSeg{}, fmt.Errorf("%w: control segment of %d bytes", ErrLayout, len(b))
	}
	w0, w1 := be32(b, 0), be32(b, 4)
	return CtrlSeg{OpMod: uint8(w0 >> 24), WQEIndex: uint16(w0 >> 8), Opcode: uint8(w0), SQN: w1 >> 8,
		DS: uint8(w1 & 0x3F), FmCeSe: b[11], Imm: be32(b, 12)}, nil
}

// EthSeg is the Ethernet segment (qp.h struct mlx5_wqe_eth_seg) that
// follows the control segment, with its inline header.
type EthSeg struct {
	CsFlags uint8
	MSS     uint16
	Inline  []byte // the inline header (inline_hdr.sz bytes)
}

// InlineDS returns the 16-byte units the eth segment and its inline
// header take (1 for the segment itself plus what overflows it).
func InlineDS(n int) int {
	if n <= inlineHdrStartLen {
		return 1
	}
	return 1 + (n-inlineHdrStartLen+DSSize-1)/DSSize
}

// Encode writes e at b (which starts at the eth segment, WQE offset 0x10)
// and returns the bytes used, a multiple of 16.
func (e *EthSeg) Encode(b []byte) int {
	n := InlineDS(len(e.Inline)) * DSSize
	clear(b[:n])
	b[4] = e.CsFlags
	binary.BigEndian.PutUint16(b[6:], e.MSS)
	binary.BigEndian.PutUint16(b[12:], uint16(len(e.Inline)))
	copy(b[14:], e.Inline)
	return n
}

// DecodeEthSeg reads an eth segment and its inline header from b, which
// must hold all of it.
func DecodeEthSeg(b []byte) (EthSeg, int, error) {
	if len(b) < DSSize {
		return EthSeg{}, 0, fmt.Errorf("%w: eth segment of %d bytes", ErrLayout, len(b))
	}
	sz := int(binary.BigEndian.Uint16(b[12:]))
	n := InlineDS(sz) * DSSize
	if n > len(b) {
		return EthSeg{}, 0, fmt.Errorf("%w: inline header of %d bytes overruns the WQE", ErrLayout, sz)
	}
	return EthSeg{CsFlags: b[4], MSS: binary.BigEndian.Uint16(b[6:]), Inline: b[14 : 14+sz]}, n, nil
}

// DataSeg is a scatter/gather entry (qp.h struct mlx5_wqe_data_seg).
type DataSeg struct {
	ByteCount uint32
	LKey      uint32
	Addr      uint64
}

// Encode writes d into b[0:16].
func (d *DataSeg) Encode(b []byte) {
	put32(b, 0, d.ByteCount)
	put32(b, 4, d.LKey)
	put64(b, 8, d.Addr)
}

// DecodeDataSeg reads a data segment.
func DecodeDataSeg(b []byte) (DataSeg, error) {
	if len(b) < DSSize {
		return DataSeg{}, fmt.Errorf("%w: data segment of %d bytes", ErrLayout, len(b))
	}
	return DataSeg{ByteCount: be32(b, 0), LKey: be32(b, 4), Addr: be64(b, 8)}, nil
}

// CQE is the part of a 64-byte completion (cq.h struct mlx5_cqe64, and
// struct mlx5_err_cqe for errors) the driver uses.
type CQE struct {
	CheckSum    uint16 // 0x14
	HdsIPExt    uint8  // 0x1C: L2/L3/L4 OK
	L4L3HdrType uint8  // 0x1D
	ByteCnt     uint32 // 0x2C
	VendorSynd  uint8  // 0x36 (error CQEs)
	Syndrome    uint8  // 0x37 (error CQEs)
	SendOpcode  uint8  // 0x38 (TX CQEs: sop_drop_qpn's top byte)
	WQECounter  uint16 // 0x3C
	Opcode      uint8  // 0x3F bits 7:4
	Owner       bool   // 0x3F bit 0
}

// Encode writes c into the 64-byte slot b.
func (c *CQE) Encode(b []byte) {
	clear(b[:CQESize])
	binary.BigEndian.PutUint16(b[0x14:], c.CheckSum)
	b[0x1C], b[0x1D] = c.HdsIPExt, c.L4L3HdrType
	put32(b, 0x2C, c.ByteCnt)
	b[0x36], b[0x37], b[0x38] = c.VendorSynd, c.Syndrome, c.SendOpcode
	binary.BigEndian.PutUint16(b[0x3C:], c.WQECounter)
	b[0x3F] = c.Opcode<<4 | b2u8(c.Owner)
}

// DecodeCQE reads a 64-byte CQE.
func DecodeCQE(b []byte) (CQE, error) {
	if len(b) < CQESize {
		return CQE{}, fmt.Errorf("%w: CQE of %d bytes", ErrLayout, len(b))
	}
	if f := (b[0x3F] >> 2) & 3; f != 0 {
		return CQE{}, fmt.Errorf("%w: compressed CQE format %d", ErrLayout, f)
	}
	return CQE{CheckSum: binary.BigEndian.Uint16(b[0x14:]), HdsIPExt: b[0x1C], L4L3HdrType: b[0x1D],
		ByteCnt: be32(b, 0x2C), VendorSynd: b[0x36], Syndrome: b[0x37], SendOpcode: b[0x38],
		WQECounter: binary.BigEndian.Uint16(b[0x3C:]), Opcode: b[0x3F] >> 4, Owner: b[0x3F]&1 != 0}, nil
}

// L3Type returns the CQE's L3 header type (CQEL3Type*).
func (c *CQE) L3Type() uint8 { return (c.L4L3HdrType >> 2) & 3 }

// EQE is a 64-byte event queue entry (device.h struct mlx5_eqe).
type EQE struct {
	Type, SubType uint8
	Data          [28]byte // 0x20..0x3B
	Owner         bool     // 0x3F bit 0
}

// Encode writes e into the 64-byte slot b.
func (e *EQE) Encode(b []byte) {
	clear(b[:EQESize])
	b[1], b[3] = e.Type, e.SubType
	copy(b[0x20:], e.Data[:])
	b[0x3F] = b2u8(e.Owner)
}

// DecodeEQE reads a 64-byte EQE.
func DecodeEQE(b []byte) (EQE, error) {
	if len(b) < EQESize {
		return EQE{}, fmt.Errorf("%w: EQE of %d bytes", ErrLayout, len(b))
	}
	e := EQE{Type: b[1], SubType: b[3], Owner: b[0x3F]&1 != 0}
	copy(e.Data[:], b[0x20:0x3C])
	return e, nil
}

// PageRequest decodes a page-request event's function and signed page
// count (struct mlx5_eqe_page_req: func_id at data+2, num_pages at data+4).
func (e *EQE) PageRequest() (fn uint16, pages int32) {
	return binary.BigEndian.Uint16(e.Data[2:]), int32(binary.BigEndian.Uint32(e.Data[4:]))
}

// CQN returns the CQ number of a CQ error event (data+0, 24 bits) and its
// syndrome (data+0x0B).
func (e *EQE) CQN() (cqn uint32, syndrome uint8) {
	return binary.BigEndian.Uint32(e.Data[0:]) & 0xFFFFFF, e.Data[0x0B]
}

func b2u8(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}
