package sabrelite

import (
	"fmt"
	"slices"

	"github.com/tamanic/tamanic/connectx"
	"github.com/tamanic/tamanic/dma"
	"github.com/tamanic/tamanic/pcie"
)

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

// OpenConnectX attaches the ConnectX function d: the first MiB of its
// BAR0 mapped through the memory window, bus mastering on the path to it,
// queues, mailboxes, firmware pages and buffers in mem, polled. cfg's
// ConfigSpace, BAR0 and Mem are filled in. The window stays mapped (the
// health check reads through it).
func OpenConnectX(rc *pcie.RC, d *pcie.Device, mem dma.Memory, cfg connectx.Config) (*connectx.NIC, *pcie.Window, error) {
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
	cfg.Mem = mem
	n, err := connectx.Open(cfg)
	if err != nil {
		w.Release()
		return nil, nil, fmt.Errorf("sabrelite: %w", err)
	}
	return n, w, nil
}
