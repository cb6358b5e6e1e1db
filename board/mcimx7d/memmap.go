package mcimx7d

// Memory layout and peripherals (i.MX 7Dual RM memory map; QEMU
// include/hw/arm/fsl-imx7.h).
const (
	RAMStart  = 0x80000000
	GoRAMSize = 480 << 20
	DMAStart  = RAMStart + GoRAMSize
	// DMASize is 96 MiB: a ConnectX-4 Lx asks for about 12,900 firmware
	// pages (about 50 MiB) at initialisation (QUERY_PAGES), given from
	// this region besides ENET1's and the e1000e's rings and buffers
	// (about 3 MiB each); with 32 MiB such a card could not be brought
	// up. The SABRE has 1 GiB of DDR; 576 MiB stay above the region.
	DMASize = 96 << 20
	// CoherentSize of the DMA region holds descriptor rings; the rest
	// holds driver buffers.
	CoherentSize = 1 << 20

	UART1Base      = 0x30860000
	CCMBase        = 0x30380000
	AnatopBase     = 0x30360000 // CCM_ANALOG and PMU (imx7s.dtsi anatop)
	GPCBase        = 0x303A0000 // imx7s.dtsi gpc
	GPIO1Base      = 0x30200000 // imx7s.dtsi gpio1
	IOMUXCBase     = 0x30330000 // imx7s.dtsi iomuxc (pin mux and pad control)
	SysCntCtrlBase = 0x306C0000
	ENET1Base      = 0x30BE0000
	GICBase        = 0x31000000 // Cortex-A7 MPCore private region
	GPRBase        = 0x30340000 // IOMUXC GPR
	SRCBase        = 0x30390000
	PCIePHYBase    = 0x306D0000

	// ENET1IRQ0 is ENET1's "int0", SPI 120: on silicon ring 0's frame
	// events and the MAC's events (bus error, MII) come on it (Linux
	// imx7s.dtsi fec1 interrupts: SPI 120 int0, 118 int1, 119 int2, 121
	// pps). QEMU 7.2 wires ENET1's one interrupt to SPI 118 instead and
	// never raises 120. Both are taken, each to the same handler, as Linux
	// requests each of the MAC's lines for its one interrupt handler.
	ENET1IRQ0 = 32 + 120
	// ENET1IRQ is SPI 118: ENET1's "int1" (ring 1) on silicon, and the one
	// line QEMU 7.2 raises.
	ENET1IRQ = 32 + 118
)
