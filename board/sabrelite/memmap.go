package sabrelite

// Memory layout and peripherals (i.MX6DQ RM rev 6, 2.2 "ARM platform
// memory map" and 2.3 "AIPS memory maps"; QEMU include/hw/arm/fsl-imx6.h).
const (
	RAMStart  = 0x10000000
	GoRAMSize = 480 << 20
	DMAStart  = RAMStart + GoRAMSize
	// DMASize is 96 MiB: a ConnectX-4 Lx asks for about 12,900 firmware
	// pages (about 50 MiB) at initialisation (QUERY_PAGES), given from
	// this region besides the ENET's rings and buffers and the card's
	// own; with 32 MiB such a card could not be brought up. The SABRE
	// Lite has 1 GiB of DDR; 448 MiB stay above the region.
	DMASize = 96 << 20
	// CoherentSize of the DMA region holds descriptor rings; the rest
	// holds driver buffers.
	CoherentSize = 1 << 20

	PeriphBase      = 0x00A00000 // Cortex-A9 MPCore private region (SCU)
	GlobalTimerBase = PeriphBase + 0x200
	PL310Base       = 0x00A02000
	UART2Base       = 0x021E8000
	CCMBase         = 0x020C4000
	AnatopBase      = 0x020C8000
	ENETBase        = 0x02188000
	IOMUXCBase      = 0x020E0000 // IOMUXC; its GPR registers start at offset 0

	CCM_CACRR = 0x10 // ARM_PODF [2:0] (RM 18.6.2)
	CCM_CCGR1 = 0x6C // CG5 [11:10]: enet_clk_enable (RM 18.6.24)
	CCM_CCGR5 = 0x7C

	ANADIG_PLL_ARM = 0x000 // DIV_SELECT [6:0]: Fout = 24 MHz * DIV_SELECT / 2 (RM 18.7.1)
	ANADIG_DIGPROG = 0x260 // [15:8] major, [7:0] minor revision (RM 18.7.32)

	// ENETIRQ is the ENET MAC 0 interrupt: IRQ 150 in the RM's table
	// (3.2 "Cortex A9 interrupts"), SPI 118 (Linux imx6qdl.dtsi
	// interrupts = <0 118 ...>; QEMU FSL_IMX6_ENET_MAC_IRQ).
	ENETIRQ = 32 + 118
)
