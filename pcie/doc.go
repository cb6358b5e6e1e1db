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
// never trains is a *LinkError wrapping ErrLinkDown), and configuration
// reads that find nothing return all-ones and are counted. On the i.MX6Q
// and i.MX6SX (SoC.AbortsOnUR) a read of a missing device is not all-ones
// but an imprecise external abort (Linux pci-imx6.c installs a fault hook
// that fakes all-ones; bare metal has none), so Enumerate reads only what
// it knows is there: device 0 behind the root port (whose link is up)
// and behind a downstream port, unless the port reports Data Link Layer
// Link Active and its link is down (an empty slot); on any bus that is not
// a link (a switch's internal bus, whose downstream ports may sit at any
// device numbers, not necessarily 0) only the device numbers the board
// names in Config.ProbeDevices, and nothing when it names none (the
// bridge records a Problem); functions 1-7 of a multi-function device only
// with Config.ProbeFunctions. What remains unguarded there: a downstream
// port without link-active reporting whose slot is empty, and device
// numbers a board names wrongly, still abort. The i.MX7D reads all-ones
// and scans every bus fully.
package pcie
