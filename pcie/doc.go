// Package pcie drives the Synopsys DesignWare PCIe root complex of the
// NXP i.MX6Q/DL, i.MX6SX and i.MX7D: the SoC glue that resets the core and
// PHY, enables the reference clock and starts link training (Gen1 first,
// then Gen2), the outbound iATU in viewport style (configuration type 0/1
// and a memory window), configuration space access with all-ones
// detection, enumeration (bus numbers, BAR sizing and assignment, bridge
// and root port windows), capabilities (PCI Express, MSI, MSI-X), bus
// mastering, INTx and the DesignWare MSI receiver.
//
// Every register access goes through mmio.Regs, so the same driver runs on
// TamaGo and on the host against package pcietest, a model of the core,
// its iATU and configuration space with pluggable functions.
//
// Addresses: BARs get bus addresses from SoC.BusMemBase. The CPU reaches
// them through the memory window (SoC.MemBase) and one outbound viewport;
// Map retargets that viewport, so a BAR larger than the i.MX6's 15 MiB
// window can be reached in parts. Device DMA addresses are bus addresses
// from package dma (inbound TLPs pass 1:1 with no inbound region
// programmed).
//
// Failure is an error, never a hang: every wait is bounded (a link that
// never trains is a *LinkError wrapping ErrLinkDown), configuration reads
// that find nothing return all-ones and are counted, and nothing is ever
// sent to a device number a link cannot hold, because on the i.MX6 such a
// read raises an imprecise abort rather than reading all-ones.
package pcie
