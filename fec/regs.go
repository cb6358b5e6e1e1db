package fec

// ENET register offsets from the module base (p879, 22.5 "Memory
// map/register definition", IMX6ULLRM; the i.MX 6Dual/6Quad ENET has the
// same layout in IMX6DQRM's ENET chapter). Every register is 32 bits and must
// be accessed as a 32-bit word.
const (
	ENETx_EIR   = 0x004 // Interrupt Event Register (write 1 to clear)
	ENETx_EIMR  = 0x008 // Interrupt Mask Register
	ENETx_RDAR  = 0x010 // Receive Descriptor Active Register - Ring 0
	ENETx_TDAR  = 0x014 // Transmit Descriptor Active Register - Ring 0
	ENETx_ECR   = 0x024 // Ethernet Control Register
	ENETx_MMFR  = 0x040 // MII Management Frame Register
	ENETx_MSCR  = 0x044 // MII Speed Control Register
	ENETx_MIBC  = 0x064 // MIB Control Register
	ENETx_RCR   = 0x084 // Receive Control Register
	ENETx_TCR   = 0x0C4 // Transmit Control Register
	ENETx_PALR  = 0x0E4 // Physical Address Lower Register
	ENETx_PAUR  = 0x0E8 // Physical Address Upper Register
	ENETx_OPD   = 0x0EC // Opcode/Pause Duration Register
	ENETx_TXIC0 = 0x0F0 // Transmit Interrupt Coalescing Register (ring 0)
	ENETx_TXIC1 = 0x0F4 // ring 1 (multi-queue parts: IMX6SXRM, IMX7DRM)
	ENETx_TXIC2 = 0x0F8 // ring 2
	ENETx_RXIC0 = 0x100 // Receive Interrupt Coalescing Register (ring 0)
	ENETx_RXIC1 = 0x104
	ENETx_RXIC2 = 0x108
	ENETx_IAUR  = 0x118 // Descriptor Individual Upper Address Register
	ENETx_IALR  = 0x11C // Descriptor Individual Lower Address Register
	ENETx_GAUR  = 0x120 // Descriptor Group Upper Address Register
	ENETx_GALR  = 0x124 // Descriptor Group Lower Address Register
	ENETx_TFWR  = 0x144 // Transmit FIFO Watermark Register
	ENETx_RDSR  = 0x180 // Receive Descriptor Ring 0 Start Register
	ENETx_TDSR  = 0x184 // Transmit Buffer Descriptor Ring 0 Start Register
	ENETx_MRBR  = 0x188 // Maximum Receive Buffer Size Register - Ring 0
	ENETx_RSFL  = 0x190 // Receive FIFO Section Full Threshold
	ENETx_RSEM  = 0x194 // Receive FIFO Section Empty Threshold
	ENETx_RAEM  = 0x198 // Receive FIFO Almost Empty Threshold
	ENETx_RAFL  = 0x19C // Receive FIFO Almost Full Threshold
	ENETx_TSEM  = 0x1A0 // Transmit FIFO Section Empty Threshold
	ENETx_TAEM  = 0x1A4 // Transmit FIFO Almost Empty Threshold
	ENETx_TAFL  = 0x1A8 // Transmit FIFO Almost Full Threshold
	ENETx_TIPG  = 0x1AC // Transmit Inter-Packet Gap
	ENETx_FTRL  = 0x1B0 // Frame Truncation Length
	ENETx_TACC  = 0x1C0 // Transmit Accelerator Function Configuration
	ENETx_RACC  = 0x1C4 // Receive Accelerator Function Configuration
	// Multi-queue parts only (i.MX6SX, i.MX7D; Linux fec.h FEC_RCMR_1..
	// FEC_DMA_CFG_2): receive classification match for rings 1 and 2 and
	// the DMA class (credit-based shaper) configuration of TX rings 1 and 2.
	ENETx_RCMR1    = 0x1C8
	ENETx_RCMR2    = 0x1CC
	ENETx_DMA1CFG  = 0x1D8
	ENETx_DMA2CFG  = 0x1DC
	ENETx_RDAR1    = 0x1E0
	ENETx_TDAR1    = 0x1E4
	ENETx_RDAR2    = 0x1E8
	ENETx_TDAR2    = 0x1EC
	ENETx_QOS      = 0x1F0
	RCMR_MATCHEN   = 1 << 16 // frames whose VLAN priority matches CMP0..3 go to the ring
	DMACFG_CLASSEN = 1 << 16 // the TX ring is shaped by its IDLE_SLOPE
	IC_ICEN        = 1 << 31 // TXICn/RXICn: coalescing enabled
	IC_ICFT        = 20      // TXICn/RXICn: frame count threshold, 8 bits
)

// ENETx_EIR / ENETx_EIMR bits (p889, 22.5.1 and p891, 22.5.2, IMX6ULLRM).
const (
	EIR_BABR   = 1 << 30 // babbling receive error
	EIR_BABT   = 1 << 29 // babbling transmit error
	EIR_GRA    = 1 << 28 // graceful stop complete
	EIR_TXF    = 1 << 27 // transmit frame interrupt
	EIR_TXB    = 1 << 26 // transmit buffer interrupt
	EIR_RXF    = 1 << 25 // receive frame interrupt
	EIR_RXB    = 1 << 24 // receive buffer interrupt
	EIR_MII    = 1 << 23 // MII interrupt (MDIO transfer complete)
	EIR_EBERR  = 1 << 22 // Ethernet bus error: the uDMA stopped; reset required
	EIR_LC     = 1 << 21 // late collision
	EIR_RL     = 1 << 20 // collision retry limit
	EIR_UN     = 1 << 19 // transmit FIFO underrun
	EIR_PLR    = 1 << 18 // payload receive error
	EIR_WAKEUP = 1 << 17 // node wakeup request
)

// ENETx_RDAR / ENETx_TDAR: any write sets the active bit (22.5.3, 22.5.4).
const DAR_ACTIVE = 1 << 24

// ENETx_ECR bits (22.5.5).
const (
	ECR_RESET   = 1 << 0 // self-clearing; also clears PALR/PAUR
	ECR_ETHEREN = 1 << 1
	ECR_MAGICEN = 1 << 2
	ECR_SLEEP   = 1 << 3
	ECR_EN1588  = 1 << 4 // enables the enhanced (32-byte) descriptors
	ECR_SPEED   = 1 << 5 // 1000 Mb/s (RGMII parts)
	ECR_DBGEN   = 1 << 6
	ECR_DBSWP   = 1 << 8 // descriptors little-endian; required on ARM
)

// ENETx_MMFR fields (22.5.6).
const (
	MMFR_ST_C22          = 1 << 30 // start of frame, clause 22
	MMFR_OP_WR           = 1 << 28
	MMFR_OP_RD           = 2 << 28
	MMFR_PA              = 23 // PHY address, 5 bits
	MMFR_RA              = 18 // register address, 5 bits
	MMFR_TA              = 2 << 16
	MMFR_DATA            = 0xFFFF
	MSCR_SPEED           = 1 // MII_SPEED, 6 bits at 6:1
	MSCR_HOLD            = 8 // HOLDTIME, 3 bits at 10:8
	MIBC_DIS             = 1 << 31
	MIBC_IDLE            = 1 << 30
	MIBC_CLEAR           = 1 << 29
	TFWR_STRFWD          = 1 << 8 // store and forward: required for checksum insertion
	MRBR_R_BUF_SIZE_MASK = 0x3FF0
)

// ENETx_RCR bits (22.5.10). Reset value 0x05EE_0001 has LOOP set.
const (
	RCR_LOOP      = 1 << 0
	RCR_DRT       = 1 << 1
	RCR_MII_MODE  = 1 << 2
	RCR_PROM      = 1 << 3
	RCR_BC_REJ    = 1 << 4
	RCR_FCE       = 1 << 5
	RCR_RGMII_EN  = 1 << 6
	RCR_RMII_MODE = 1 << 8
	RCR_RMII_10T  = 1 << 9
	RCR_PADEN     = 1 << 12
	RCR_PAUFWD    = 1 << 13
	RCR_CRCFWD    = 1 << 14
	RCR_CFEN      = 1 << 15
	RCR_MAX_FL    = 16 // 14 bits
	RCR_NLC       = 1 << 30
	RCR_GRS       = 1 << 31
)

// ENETx_TCR bits (22.5.11).
const (
	TCR_GTS       = 1 << 0
	TCR_FDEN      = 1 << 2
	TCR_TFC_PAUSE = 1 << 3
	TCR_ADDINS    = 1 << 8
	TCR_CRCFWD    = 1 << 9
)

// ENETx_TACC and ENETx_RACC bits (22.5.33, 22.5.34).
const (
	TACC_SHIFT16 = 1 << 0
	TACC_IPCHK   = 1 << 3
	TACC_PROCHK  = 1 << 4
	RACC_PADREM  = 1 << 0
	RACC_IPDIS   = 1 << 1
	RACC_PRODIS  = 1 << 2
	RACC_LINEDIS = 1 << 6
	RACC_SHIFT16 = 1 << 7 // RX data starts 2 bytes in, so the IP header is 4-byte aligned
)
