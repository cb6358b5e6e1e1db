//go:build tamago && arm

package sabrelite

import (
	"fmt"
	"slices"
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

// cxBARMap is how much of a ConnectX's BAR0 is mapped: the init segment
// and the first UAR pages (the driver allocates one UAR), 1 MiB of the
// 32 MiB BAR, through one sub-window of the 15 MiB memory window
// (pcie.RC.Map retargets the viewport to the BAR; docs connectx-pcie.md
// §1.2).
const cxBARMap = 1 << 20

// TransportPCIe names a ConnectX function reached over the PCIe link.
const TransportPCIe = "pcie-15b3"

// FindConnectX returns the first mlx5 Ethernet function on the bus
// (vendor 15b3, connectx.DeviceIDs), or nil.
func FindConnectX(devs []*pcie.Device) *pcie.Device {
	for _, d := range devs {
		if !d.Bridge && d.Vendor == connectx.VendorMellanox && slices.Contains(connectx.DeviceIDs, d.DeviceID) {
			return d
		}
	}
	return nil
}

// cxConfig is a function's configuration space as connectx.Config wants it.
type cxConfig struct{ d *pcie.Device }

func (c cxConfig) Read32(off uint32) uint32 {
	v, err := c.d.ReadConfig32(int(off))
	if err != nil {
		return 0xFFFF_FFFF
	}
	return v
}

func (c cxConfig) Write32(off, v uint32) { _ = c.d.WriteConfig32(int(off), v) }

// ConnectX attaches the ConnectX function d (found by FindConnectX): the
// first MiB of its BAR0 mapped through the memory window, bus mastering
// on the path to it, queues, mailboxes, firmware pages and buffers in the
// board's DMA region, polled. cfg's ConfigSpace, BAR0 and Mem are filled
// in. The window is returned for the health check.
func ConnectX(rc *pcie.RC, d *pcie.Device, cfg connectx.Config) (*connectx.NIC, *pcie.Window, error) {
	b := d.BARs[0]
	if !b.Assigned || b.IO {
		return nil, nil, fmt.Errorf("sabrelite: connectx %v: BAR0 not an assigned memory BAR", d.BDF)
	}
	w, err := rc.Map(d, 0, 0, min(b.Size, cxBARMap))
	if err != nil {
		return nil, nil, fmt.Errorf("sabrelite: connectx %v: %w", d.BDF, err)
	}
	if err := d.SetBusMaster(true); err != nil {
		w.Release()
		return nil, nil, fmt.Errorf("sabrelite: connectx %v: %w", d.BDF, err)
	}
	cfg.ConfigSpace = cxConfig{d: d}
	cfg.BAR0 = w
	cfg.Mem = Memory()
	n, err := connectx.Open(cfg)
	if err != nil {
		w.Release()
		return nil, nil, fmt.Errorf("sabrelite: %w", err)
	}
	return n, w, nil
}
