//go:build tamago && arm

package sabrelite

import (
	"time"

	"github.com/tamanic/tamanic/connectx"
	"github.com/tamanic/tamanic/internal/mmio"
	"github.com/tamanic/tamanic/pcie"
)

// PCIeDevice is what /stats lists for one PCIe function.
type PCIeDevice struct {
	BDF      string    `json:"bdf"`
	Vendor   uint16    `json:"vendor"`
	Device   uint16    `json:"device"`
	Class    uint32    `json:"class"`
	BARs     []PCIeBAR `json:"bars"`
	Gen      int       `json:"link_gen"`
	Width    int       `json:"link_width"`
	Problems []string  `json:"problems,omitempty"`
}

// PCIeBAR is one assigned or refused BAR.
type PCIeBAR struct {
	Index    int    `json:"index"`
	Addr     uint64 `json:"addr"`
	Size     uint64 `json:"size"`
	Assigned bool   `json:"assigned"`
	IO       bool   `json:"io"`
}

// PCIeReport is the root complex's state for /stats (nic.pcie).
type PCIeReport struct {
	LinkUp  bool         `json:"link_up"`
	Gen     int          `json:"link_gen"`
	Width   int          `json:"link_width"`
	Error   string       `json:"error,omitempty"`
	Devices []PCIeDevice `json:"devices"`
}

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
	rep := PCIeReport{Devices: []PCIeDevice{}}
	s := pcie.IMX6Q
	rc, err := pcie.New(PCIeConfig(mmio.Block{Base: uintptr(s.DBIBase)}, mmio.Block{Base: IOMUXCBase},
		mmio.Block{Base: CCMBase}, mmio.Block{Base: AnatopBase},
		mmio.Block{Base: uintptr(s.ConfigBase)}, mmio.Block{Base: uintptr(s.MemBase)}, nil, Nanotime, delay))
	if err != nil {
		rep.Error = err.Error()
		return nil, rep
	}
	if err := rc.Start(); err != nil {
		rep.Error = err.Error()
		return nil, rep
	}
	rep.LinkUp = true
	rep.Gen, rep.Width = rc.Link()
	devs, err := rc.Enumerate()
	if err != nil {
		rep.Error = err.Error()
		return rc, rep
	}
	for _, d := range devs {
		pd := PCIeDevice{BDF: d.BDF.String(), Vendor: d.Vendor, Device: d.DeviceID, Class: d.Class}
		if d.PCIe != nil {
			pd.Gen, pd.Width = d.PCIe.Speed, d.PCIe.Width
		}
		for _, b := range d.BARs {
			if b.Size != 0 {
				pd.BARs = append(pd.BARs, PCIeBAR{Index: b.Index, Addr: b.Addr, Size: b.Size, Assigned: b.Assigned, IO: b.IO})
			}
		}
		for _, p := range d.Problems {
			pd.Problems = append(pd.Problems, p.Error())
		}
		rep.Devices = append(rep.Devices, pd)
	}
	return rc, rep
}

// ConnectX attaches the ConnectX function d (found by FindConnectX) with
// the board's DMA memory (OpenConnectX). The window is returned for the
// health check.
func ConnectX(rc *pcie.RC, d *pcie.Device, cfg connectx.Config) (*connectx.NIC, *pcie.Window, error) {
	return OpenConnectX(rc, d, Memory(), cfg)
}
