package e1000e

// Registers of the Intel 82574 GbE controller, named as in the Intel 82574
// GbE Controller Family Datasheet's register descriptions and in Linux
// drivers/net/ethernet/intel/e1000e: offsets from regs.h, bits from
// defines.h and hw.h, against which the values here were checked (no
// datasheet section numbers are cited: the copy at hand was not
// paginated). Offsets are into BAR0.
const (
	CTRL     = 0x00000 // Device Control
	STATUS   = 0x00008 // Device Status
	EECD     = 0x00010 // EEPROM/Flash Control
	EERD     = 0x00014 // EEPROM Read
	CTRL_EXT = 0x00018 // Extended Device Control
	MDIC     = 0x00020 // MDI Control
	ICR      = 0x000C0 // Interrupt Cause Read, clear on read
	ITR      = 0x000C4 // Interrupt Throttling
	ICS      = 0x000C8 // Interrupt Cause Set
	IMS      = 0x000D0 // Interrupt Mask Set/Read
	IMC      = 0x000D8 // Interrupt Mask Clear
	RCTL     = 0x00100 // Receive Control
	TCTL     = 0x00400 // Transmit Control
	TIPG     = 0x00410 // Transmit IPG
	RDBAL    = 0x02800 // RX Descriptor Base Low
	RDBAH    = 0x02804
	RDLEN    = 0x02808
	RDH      = 0x02810
	RDT      = 0x02818
	RDTR     = 0x02820 // RX interrupt delay timer
	RXDCTL   = 0x02828
	RADV     = 0x0282C
	TDBAL    = 0x03800 // TX Descriptor Base Low
	TDBAH    = 0x03804
	TDLEN    = 0x03808
	TDH      = 0x03810
	TDT      = 0x03818
	TIDV     = 0x03820
	TXDCTL   = 0x03828
	TADV     = 0x0382C
	RXCSUM   = 0x05000 // Receive Checksum Control
	RFCTL    = 0x05008 // Receive Filter Control
	MTA      = 0x05200 // Multicast Table Array, 128 dwords
	RAL0     = 0x05400 // Receive Address Low 0
	RAH0     = 0x05404 // Receive Address High 0

	// Statistics, clear on read.
	CRCERRS  = 0x04000
	ALGNERRC = 0x04004
	RXERRC   = 0x0400C
	MPC      = 0x04010
	COLC     = 0x04028
	RLEC     = 0x04040
	GPRC     = 0x04074
	BPRC     = 0x04078
	MPRC     = 0x0407C
	GPTC     = 0x04080
	GORCL    = 0x04088
	GORCH    = 0x0408C
	GOTCL    = 0x04090
	GOTCH    = 0x04094
	RNBC     = 0x040A0
	RUC      = 0x040A4
	ROC      = 0x040AC
	TPR      = 0x040D0
	TPT      = 0x040D4
	MPTC     = 0x040F0
	BPTC     = 0x040F4
	TSCTC    = 0x040F8 // TCP segmentation contexts transmitted
	TSCTFC   = 0x040FC // TCP segmentation context failures
)

// CTRL bits.
const (
	ctrlFD  = 1 << 0
	ctrlSLU = 1 << 6 // set link up
	// Speed selection (9:8, 10b = 1000 Mb/s), force speed and force
	// duplex (Linux defines.h E1000_CTRL_SPD_SEL, SPD_1000, FRCSPD,
	// FRCDPX).
	ctrlSpeedMask = 3 << 8
	ctrlSpeed1000 = 2 << 8
	ctrlFRCSPD    = 1 << 11
	ctrlFRCDPX    = 1 << 12
	ctrlRST       = 1 << 26
	ctrlPHYRST    = 1 << 31
)

// STATUS bits.
const (
	statusFD         = 1 << 0
	statusLU         = 1 << 1
	statusSpeedShift = 6
)

// EERD fields (Linux E1000_NVM_RW_*).
const (
	eerdStart     = 1 << 0
	eerdDone      = 1 << 1
	eerdAddrShift = 2
	eerdDataShift = 16
)

// MDIC fields.
const (
	mdicRegShift = 16
	mdicPHYShift = 21
	mdicOpWrite  = 1 << 26
	mdicOpRead   = 2 << 26
	mdicReady    = 1 << 28
	mdicError    = 1 << 30

	// phyAddr is the 82574's internal PHY address (Linux e1000_get_phy_info_82574 uses 1).
	phyAddr = 1
)

// PHY registers (IEEE 802.3 clause 22).
const (
	PHYControl = 0
	PHYStatus  = 1
	PHYID1     = 2
	PHYID2     = 3

	phyStatusLink = 1 << 2
)

// Interrupt causes (ICR/IMS; Linux E1000_ICR_*).
const (
	IntTXDW   = 1 << 0 // a descriptor with RS was written back
	IntTXQE   = 1 << 1
	IntLSC    = 1 << 2 // link status change
	IntRXDMT0 = 1 << 4 // RX descriptors below the minimum threshold
	IntRXO    = 1 << 6 // receiver overrun
	IntRXT0   = 1 << 7 // receiver timer
	IntAll    = 0x01FFFFFF

	imsWanted = IntTXDW | IntLSC | IntRXDMT0 | IntRXO | IntRXT0
)

// RCTL bits.
const (
	rctlEN  = 1 << 1
	rctlUPE = 1 << 3
	rctlMPE = 1 << 4
	rctlLPE = 1 << 5
	// Loopback mode, bits 7:6: 00b none, 01b MAC loopback (Linux
	// defines.h E1000_RCTL_LBM_NO 0, E1000_RCTL_LBM_MAC 0x40,
	// E1000_RCTL_LBM_TCVR 0xC0).
	rctlLBMMask = 3 << 6
	rctlLBMMAC  = 1 << 6
	rctlBAM     = 1 << 15
	rctlSECRC   = 1 << 26
	// BSIZE 00 with BSEX 0: 2048-byte buffers.
	rctlBSize2048 = 0
	rctlRDMTSHalf = 0 << 8
)

// TCTL bits; TIPG default for copper (Linux DEFAULT_82543_TIPG_*).
const (
	tctlEN        = 1 << 1
	tctlPSP       = 1 << 3 // pad short packets
	tctlCTShift   = 4
	tctlCOLDShift = 12
	tctlRTLC      = 1 << 24

	tipgDefault = 8 | 8<<10 | 6<<20
)

// RXCSUM and RFCTL bits.
const (
	rxcsumIPOFL = 1 << 8  // IPv4 header checksum offload
	rxcsumTUOFL = 1 << 9  // TCP/UDP checksum offload
	rfctlEXTEN  = 1 << 15 // extended RX descriptors (status in write-back)
)

// RAH bits.
const rahAV = 1 << 31

// TX descriptor fields (datasheet, transmit descriptors; Linux hw.h struct e1000_tx_desc /
// e1000_context_desc / e1000_data_desc and the E1000_TXD_* constants).
// Dword 2 of a data descriptor holds DTALEN (19:0), DTYP (23:20) and DCMD
// (31:24); dword 3 STA (3:0) and POPTS (15:8).
const (
	txdCmdEOP   = 1 << 24
	txdCmdIFCS  = 1 << 25
	txdCmdTSE   = 1 << 26 // data and context: TCP segmentation
	txdCmdRS    = 1 << 27
	txdCmdDEXT  = 1 << 29
	txdCmdIDE   = 1 << 31
	txdDTypD    = 1 << 20 // data descriptor
	txdDTypC    = 0 << 20 // context descriptor
	txdCmdIP    = 1 << 25 // context TUCMD: IPv4
	txdCmdTCP   = 1 << 24 // context TUCMD: TCP (else UDP)
	txdStaDD    = 1 << 0
	txdPoptIXSM = 1 << 8 // insert IP checksum
	txdPoptTXSM = 1 << 9 // insert TCP/UDP checksum

	txdLenMask = 0xFFFFF
)

// Extended RX descriptor write-back (datasheet, extended receive
// descriptor; Linux union
// e1000_rx_desc_extended): dword 2 holds the extended status (19:0) and
// errors (31:20), dword 3 the length (15:0) and VLAN tag.
const (
	rxdStatDD    = 1 << 0
	rxdStatEOP   = 1 << 1
	rxdStatIXSM  = 1 << 2 // ignore checksum indications
	rxdStatUDPCS = 1 << 4
	rxdStatTCPCS = 1 << 5
	rxdStatIPCS  = 1 << 6
	rxdErrCE     = 1 << 24
	rxdErrSE     = 1 << 25
	rxdErrSEQ    = 1 << 26
	rxdErrCXE    = 1 << 28
	rxdErrTCPE   = 1 << 29
	rxdErrIPE    = 1 << 30
	rxdErrRXE    = 1 << 31

	rxdFrameErr = rxdErrCE | rxdErrSE | rxdErrSEQ | rxdErrCXE | rxdErrRXE
)

// DescSize is the size of every TX and RX descriptor; ring lengths are
// multiples of 128 bytes (8 descriptors).
const DescSize = 16
