package mcimx7d

// Memory layout and peripherals (i.MX 7Dual RM memory map; QEMU
// include/hw/arm/fsl-imx7.h).
const (
	RAMStart  = 0x80000000
	GoRAMSize = 480 << 20
	DMAStart  = RAMStart + GoRAMSize
	DMASize   = 32 << 20
	// CoherentSize of the DMA region holds descriptor rings; the rest
	// holds driver buffers.
	CoherentSize = 1 << 20

	UART1Base      = 0x30860000
	CCMBase        = 0x30380000
	SysCntCtrlBase = 0x306C0000
	ENET1Base      = 0x30BE0000
	GICBase        = 0x31000000 // Cortex-A7 MPCore private region
	GPRBase        = 0x30340000 // IOMUXC GPR
	SRCBase        = 0x30390000
	PCIePHYBase    = 0x306D0000

	// ENET1IRQ is the ENET1 MAC interrupt, SPI 118.
	ENET1IRQ = 32 + 118
)
