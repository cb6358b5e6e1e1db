package e1000e

import (
	"fmt"

	"github.com/tamanic/tamanic/pcie"
)

// IDs of the 82574L.
const (
	VendorIntel = 0x8086
	Device82574 = 0x10D3
)

// Find returns the first 82574L among devs, or nil.
func Find(devs []*pcie.Device) *pcie.Device {
	for _, d := range devs {
		if d.Vendor == VendorIntel && d.DeviceID == Device82574 && !d.Bridge {
			return d
		}
	}
	return nil
}

// Interrupt modes for Attach.
type IRQMode int

// Interrupt modes.
const (
	Polled IRQMode = iota // no interrupts: the owner calls Poll
	INTx                  // legacy INTA (level), the GIC interrupt d.IRQ
	MSI                   // one MSI vector through the root complex's receiver
)

// Attach makes d's BAR0 reachable through rc's memory window, turns on bus
// mastering, selects the interrupt mode (for MSI, rc.EnableMSI must have
// been called; vector is the receiver bit) and returns the NIC built from
// cfg, not yet initialised. cfg.Regs is filled in; the window stays
// mapped for the NIC's life.
func Attach(rc *pcie.RC, d *pcie.Device, mode IRQMode, vector int, cfg Config) (*NIC, error) {
	if d == nil {
		return nil, fmt.Errorf("e1000e: no device: %w", ErrConfig)
	}
	if d.Vendor != VendorIntel || d.DeviceID != Device82574 {
		return nil, fmt.Errorf("e1000e: %v is %04x:%04x, not an 82574L: %w", d.BDF, d.Vendor, d.DeviceID, ErrConfig)
	}
	b := d.BARs[0]
	if !b.Assigned || b.IO || b.Size < 128<<10 {
		return nil, fmt.Errorf("e1000e: %v BAR0 %+v: %w", d.BDF, b, ErrConfig)
	}
	w, err := rc.Map(d, 0, 0, 128<<10)
	if err != nil {
		return nil, fmt.Errorf("e1000e: %v BAR0: %w", d.BDF, err)
	}
	if err := d.SetBusMaster(true); err != nil {
		w.Release()
		return nil, fmt.Errorf("e1000e: %v bus master: %w", d.BDF, err)
	}
	switch mode {
	case MSI:
		err = d.EnableMSI(vector)
		cfg.Interrupts = true
	case INTx:
		err = d.SetINTx(true)
		cfg.Interrupts = true
	default:
		err = d.SetINTx(false)
		cfg.Interrupts = false
	}
	if err != nil {
		w.Release()
		return nil, fmt.Errorf("e1000e: %v interrupts: %w", d.BDF, err)
	}
	cfg.Regs = w
	n, err := New(cfg)
	if err != nil {
		w.Release()
		return nil, err
	}
	return n, nil
}
