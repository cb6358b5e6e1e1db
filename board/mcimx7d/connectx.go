//go:build tamago && arm

package mcimx7d

import (
	"fmt"
	"slices"
	"time"

	"github.com/tamanic/tamanic/connectx"
	"github.com/tamanic/tamanic/pcie"
)

// PCI identities of the ConnectX transports.
const (
	// VendorRedHat and DeviceIVSHMEM identify QEMU's ivshmem-plain
	// (docs/specs/ivshmem-spec.rst): its BAR2 is shared memory, here a
	// ConnectX BAR0 served by a model in a host process (tamanic-cxsim).
	VendorRedHat  = 0x1AF4
	DeviceIVSHMEM = 0x1110
	// cxIdentity is the PCI ID the configuration space of an ivshmem
	// transport reports to the driver: a ConnectX-4 Lx, as the model plays.
	cxIdentity = 0x1015<<16 | connectx.VendorMellanox
	// cxBARMap is how much of BAR0 is mapped: the init segment and the
	// first UAR pages (the driver allocates one UAR).
	cxBARMap = 1 << 20
	// cxCmdIfRev is the init segment's cmdif_rev_fw_sub word, never zero
	// on a running function; cxServeTimeout bounds the wait for a model to
	// serve an ivshmem BAR.
	cxCmdIfRev     = 0x004
	cxServeTimeout = 10 * time.Second
)

// Transports of a ConnectX function.
const (
	TransportPCIe    = "pcie-15b3"
	TransportIVSHMEM = "ivshmem"
)

// FindConnectX returns the first mlx5 Ethernet function on the bus, or an
// ivshmem function standing in for one, with its transport and the index
// of the BAR that is its BAR0; nil when there is neither.
func FindConnectX(devs []*pcie.Device) (d *pcie.Device, transport string, bar int) {
	for _, d := range devs {
		if !d.Bridge && d.Vendor == connectx.VendorMellanox && slices.Contains(connectx.DeviceIDs, d.DeviceID) {
			return d, TransportPCIe, 0
		}
	}
	for _, d := range devs {
		if !d.Bridge && d.Vendor == VendorRedHat && d.DeviceID == DeviceIVSHMEM {
			return d, TransportIVSHMEM, 2
		}
	}
	return nil, "", 0
}

// cxConfig is a function's configuration space as connectx.Config wants
// it; for an ivshmem transport the identity dword reads as the ConnectX
// the model plays, everything else is the ivshmem's own.
type cxConfig struct {
	d       *pcie.Device
	ivshmem bool
}

func (c cxConfig) Read32(off uint32) uint32 {
	if off == 0 && c.ivshmem {
		return cxIdentity
	}
	v, err := c.d.ReadConfig32(int(off))
	if err != nil {
		return 0xFFFF_FFFF
	}
	return v
}

func (c cxConfig) Write32(off, v uint32) { _ = c.d.WriteConfig32(int(off), v) }

// ConnectX attaches the ConnectX function d (found by FindConnectX): its
// BAR0 (BAR bar of d) mapped through the memory window, bus mastering on
// the path to it, queues, mailboxes, firmware pages and buffers in the
// board's DMA region, polled. cfg's ConfigSpace, BAR0 and Mem are filled
// in. The window is returned for the health check.
func ConnectX(rc *pcie.RC, d *pcie.Device, transport string, bar int, cfg connectx.Config) (*connectx.NIC, *pcie.Window, error) {
	b := d.BARs[bar]
	if !b.Assigned || b.IO {
		return nil, nil, fmt.Errorf("mcimx7d: connectx %v: BAR%d not an assigned memory BAR", d.BDF, bar)
	}
	w, err := rc.Map(d, bar, 0, min(b.Size, cxBARMap))
	if err != nil {
		return nil, nil, fmt.Errorf("mcimx7d: connectx %v: %w", d.BDF, err)
	}
	if err := d.SetBusMaster(true); err != nil {
		w.Release()
		return nil, nil, fmt.Errorf("mcimx7d: connectx %v: %w", d.BDF, err)
	}
	if transport == TransportIVSHMEM {
		// An ivshmem BAR is plain memory: until a model process serves it,
		// it reads zero, which the driver would take for a ready firmware
		// of command interface revision 0. Wait for the init segment.
		end := Nanotime() + int64(cxServeTimeout)
		for w.Read32(cxCmdIfRev) == 0 {
			if Nanotime() > end {
				w.Release()
				return nil, nil, fmt.Errorf("mcimx7d: connectx %v: ivshmem BAR still blank after %v: no model (tamanic-cxsim) serving it", d.BDF, cxServeTimeout)
			}
			delay(time.Millisecond)
		}
	}
	cfg.ConfigSpace = cxConfig{d: d, ivshmem: transport == TransportIVSHMEM}
	cfg.BAR0 = w
	cfg.Mem = Memory()
	n, err := connectx.Open(cfg)
	if err != nil {
		w.Release()
		return nil, nil, fmt.Errorf("mcimx7d: %w", err)
	}
	return n, w, nil
}
