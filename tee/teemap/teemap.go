// Package teemap is the memory map of the TrustZone-partitioned mx6ullevk
// image (firmware/mx6ullevk-tee): where the Normal World OS, the transfer
// region and the Trusted OS live in the EVK's 512 MiB of DDR. Both worlds'
// images are linked against it.
//
//	0x8000_0000 +127 MiB  Normal World OS (TamaGo runtime RAM, Non-secure)
//	0x87F0_0000 +256 KiB  transfer region (Non-secure, inside the Normal
//	                      World region, outside its runtime's RAM)
//	0x8800_0000 +128 MiB  unused
//	0x9000_0000 +224 MiB  Trusted OS (TamaGo runtime RAM, Secure)
//	0x9E00_0000 +32 MiB   ENET descriptor rings and buffers (Secure;
//	                      board/internal/imx6ulboard's DMA region)
//
// On silicon the TZASC (TZC-380) makes everything Secure-only (GoTEE's
// monitor sets region 0 so) except the Normal World region, which
// monitor.Load opens as region 1: 128 MiB at 0x8000_0000, a power of two
// aligned to its size, as the TZC-380 requires.
package teemap

const (
	// NormalStart and NormalSize are the Normal World's memory (TZASC
	// region 1).
	NormalStart = 0x8000_0000
	NormalSize  = 128 << 20
	// NormalRAMSize is the Normal World runtime's RAM, from NormalStart.
	NormalRAMSize = NormalSize - 1<<20
	// TransferStart is the transfer region (netcall.RegionSize bytes).
	TransferStart = NormalStart + NormalRAMSize
	// SecureStart and SecureRAMSize are the Trusted OS runtime's RAM; the
	// DMA region follows it.
	SecureStart   = 0x9000_0000
	SecureRAMSize = 224 << 20
	// NormalText and SecureText are the images' link addresses (RAM start
	// plus TamaGo's 64 KiB of vectors and page tables).
	NormalText = NormalStart + 0x10000
	SecureText = SecureStart + 0x10000
)
