//go:build tamago && arm

package sabrelite

import (
	"time"

	"github.com/tamanic/tamanic/board/pcireport"
	"github.com/tamanic/tamanic/connectx"
	"github.com/tamanic/tamanic/internal/mmio"
	"github.com/tamanic/tamanic/pcie"
)

// PCIeReport is the root complex's state for /stats (nic.pcie), and
// PCIeDevice and PCIeBAR what it lists (shared by the boards).
type (
	PCIeReport = pcireport.Report
	PCIeDevice = pcireport.Device
	PCIeBAR    = pcireport.BAR
)

// delay waits d on the global timer. The PCIe bring-up runs before the
// network and its waits are short.
func delay(d time.Duration) {
	end := Timer.Now() + int64(d)
	for Timer.Now() < end {
	}
}

// PCIe starts the root complex (PCIeConfig: clocks, no PERST#), trains
// the link (at most the pcie package's link timeout, 900 ms, per stage),
// enumerates the bus and returns the report. It never fails the boot: a
// link that does not train is the report's error (a *pcie.LinkError's
// text) and rc is nil then.
//
// QEMU 7.2's sabrelite machine has no PCIe host (docs connectx-pcie.md
// §7), but nothing aborts there either: the IOMUXC GPR, the DBI at
// 0x01FF_C000 and the memory window read 0 and ignore writes (probed on
// QEMU 7.2.22: GPR1, DBI 0x0 and window 0x0 each read 0, no data abort).
// So the same path runs there: the link never reports up (PL_DEBUG1
// reads 0) and Start returns its *pcie.LinkError after 900 ms.
func PCIe() (*pcie.RC, PCIeReport) {
	s := pcie.IMX6Q
	rc, err := pcie.New(PCIeConfig(mmio.Block{Base: uintptr(s.DBIBase)}, mmio.Block{Base: IOMUXCBase},
		mmio.Block{Base: CCMBase}, mmio.Block{Base: AnatopBase},
		mmio.Block{Base: uintptr(s.ConfigBase)}, mmio.Block{Base: uintptr(s.MemBase)}, nil, Nanotime, delay))
	rc, rep := pcireport.Run(rc, err, false)
	if !rep.LinkUp {
		return nil, rep // no link: nothing to attach
	}
	return rc, rep
}

// ConnectX attaches the ConnectX function d (found by FindConnectX) with
// the board's DMA memory (OpenConnectX). The window is returned for the
// health check.
func ConnectX(rc *pcie.RC, d *pcie.Device, cfg connectx.Config) (*connectx.NIC, *pcie.Window, error) {
	return OpenConnectX(rc, d, Memory(), cfg)
}
