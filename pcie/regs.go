package pcie

// DBI register map of the Synopsys DesignWare PCIe core as the i.MX6/7
// integrate it (i.MX 6Dual/6Quad RM, chapter "PCI Express (PCIe)", port
// logic registers PCIE_PL_*; i.MX 7Dual RM, same core). Offsets were checked
// against Linux drivers/pci/controller/dwc/pcie-designware.h and QEMU
// hw/pci-host/designware.c.
const (
	// DBI 0x000-0x0FF is the root port's own type 1 configuration header.

	// PL_PFLR, Port Force Link Register (PCIE_PORT_FORCE in Linux).
	plPFLR = 0x708
	// PL_LCR, Port Link Control Register.
	plLCR = 0x710
	// PL_DEBUG0: LTSSM state in bits 5:0 (PCIE_PORT_DEBUG0).
	plDebug0 = 0x728
	// PL_DEBUG1: bit 4 link up, bit 29 link in training (PCIE_PORT_DEBUG1).
	plDebug1 = 0x72C
	// PL_G2CR, Gen2 Control Register: bit 17 directed speed change
	// (PCIE_LINK_WIDTH_SPEED_CONTROL).
	plG2CR = 0x80C
	// PL_MSI_CTRL_ADDR / UPPER_ADDR: where MSI writes are caught.
	plMSIAddrLo = 0x820
	plMSIAddrHi = 0x824
	// PL_MSI_CTRL_INT0_EN / MASK / STATUS: vectors 0-31 (one group).
	plMSIEnable = 0x828
	plMSIMask   = 0x82C
	plMSIStatus = 0x830
	// PL_MISC_CONTROL_1 bit 0, DBI_RO_WR_EN: makes read-only header
	// fields (class code, link capabilities) writable through the DBI.
	plMiscControl1 = 0x8BC
	// PL_IATUVR, iATU viewport: bit 31 inbound, bits 3:0 region.
	plIATUVR = 0x900
	// PL_IATURC1, region control 1: bits 4:0 TLP type.
	plIATURC1 = 0x904
	// PL_IATURC2, region control 2: bit 31 region enable.
	plIATURC2 = 0x908
	// PL_IATURLBA / PL_IATURUBA, lower/upper CPU base.
	plIATURLBA = 0x90C
	plIATURUBA = 0x910
	// PL_IATURLA, limit (inclusive, 32 bits).
	plIATURLA = 0x914
	// PL_IATURLTA / PL_IATURUTA, lower/upper target (bus address, or
	// bus<<24 | dev<<19 | fn<<16 for configuration TLPs).
	plIATURLTA = 0x918
	plIATURUTA = 0x91C
)

// Register fields.
const (
	debug1LinkUp     = 1 << 4
	debug1InTraining = 1 << 29
	ltssmMask        = 0x3F
	ltssmL0          = 0x11

	g2crSpeedChange = 1 << 17
	miscDBIROWrEn   = 1 << 0

	atuRegionEnable = 1 << 31
	atuTypeMem      = 0x0
	atuTypeCfg0     = 0x4
	atuTypeCfg1     = 0x5

	pflrForceLink = 1 << 15
	pflrLinkNum   = 0x3F << 16
)

// Standard configuration header offsets and bits (PCI Local Bus 3.0, PCI
// Express Base 4.0 chapter 7).
const (
	cfgVendorID     = 0x00
	cfgCommand      = 0x04
	cfgStatus       = 0x06
	cfgClassRev     = 0x08
	cfgHeaderType   = 0x0E
	cfgBAR0         = 0x10
	cfgCapPtr       = 0x34
	cfgIntLine      = 0x3C
	cfgBusNumbers   = 0x18 // type 1: primary, secondary, subordinate, latency
	cfgMemBaseLimit = 0x20 // type 1
	cfgPrefBase     = 0x24 // type 1
	cfgPrefBaseHi   = 0x28 // type 1
	cfgPrefLimitHi  = 0x2C // type 1
	cfgIOBaseLimit  = 0x1C // type 1
	cfgBridgeROM    = 0x38 // type 1 expansion ROM
	cfgDeviceROM    = 0x30 // type 0 expansion ROM

	cmdIO          = 1 << 0
	cmdMemory      = 1 << 1
	cmdBusMaster   = 1 << 2
	cmdSERR        = 1 << 8
	cmdINTxDisable = 1 << 10

	statusINTx    = 1 << 3
	statusCapList = 1 << 4

	barIO        = 1 << 0
	barTypeMask  = 0x6
	barType32    = 0x0
	barType64    = 0x4
	barPrefetch  = 1 << 3
	barMemMask32 = 0xFFFFFFF0
)

// Capability IDs.
const (
	CapMSI  = 0x05
	CapPCIe = 0x10
	CapMSIX = 0x11

	msiCtlEnable = 1 << 0 // MSI Message Control: MSI Enable
)

// PCI Express capability fields (offsets from the capability).
const (
	expCaps   = 0x02
	expLnkCap = 0x0C
	expLnkSta = 0x12

	lnkCapSLS     = 0xF
	lnkCapDLLLARC = 1 << 20 // Data Link Layer Link Active Reporting Capable
	lnkStaDLLLA   = 1 << 13 // Data Link Layer Link Active
)

// PCI Express device/port types (PCI Express capability register 7:4).
const (
	TypeEndpoint       = 0x0
	TypeLegacyEndpoint = 0x1
	TypeRootPort       = 0x4
	TypeUpstream       = 0x5
	TypeDownstream     = 0x6
	TypePCIeToPCI      = 0x7
)
