// Package fec drives the NXP i.MX6/7 10/100/1000 Ethernet MAC (ENET, the
// "FEC" lineage) on i.MX6UL/ULL, i.MX6Q/DL, i.MX6SX and i.MX7D.
//
// Features: enhanced 32-byte descriptors (legacy 8-byte where asked),
// scatter-gather TX with per-SoC alignment handled by package bounce (full
// bounce buffers or two-descriptor header alignment, switchable at run
// time), hardware IPv4/TCP/UDP checksum insertion and RX checksum verdicts,
// RX copybreak with zero-copy hand-off of large frames, MIB counters, MDIO
// with timeouts, clause-22 PHY autonegotiation and link watching (StartLink,
// PollLink, WatchLink: the MAC follows every change of speed and duplex),
// unicast/multicast filtering, interrupt-driven or polled operation, and the
// ERR006358 (on every SoC, as Linux) and ERR007885 workarounds.
//
// The driver reaches hardware only through mmio.Regs and dma.Memory, so it
// runs unchanged against the device model in package fectest.
//
// References:
//   - IMX6ULLRM - i.MX 6ULL Applications Processor Reference Manual - Rev 1 2017/11,
//     chapter 22 "10/100-Mbps Ethernet MAC (ENET)"
//   - IMX6ULRM  - i.MX 6UltraLite Applications Processor Reference Manual - Rev 1 2016/04
//   - IMX6DQRM  - i.MX 6Dual/6Quad Applications Processor Reference Manual - Rev 6 2020/09
//   - IMX6SXRM  - i.MX 6SoloX Applications Processor Reference Manual
//   - IMX7DRM   - i.MX 7Dual Applications Processor Reference Manual
//   - IEEE 802.3-2018 clause 22 (MII management registers)
//
// Register and bit names follow the manuals (ENETx_EIR, EIR_TXF, ...).
package fec
