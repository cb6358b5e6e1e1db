package pcie

import (
	"fmt"

	"github.com/tamanic/tamanic/dma"
)

// The DesignWare MSI receiver: a memory write from a device to the
// address in PL_MSI_CTRL_ADDR is not forwarded to memory; its data (a
// vector number 0-31) sets a bit in PL_MSI_CTRL_INT0_STATUS, and any
// enabled, unmasked bit raises the SoC's MSI interrupt (docs §6.4, QEMU
// designware.c). The address must be a bus address the device may write:
// a dma.Buffer's Addr, so it lies in the DMA region and is never mistaken
// for peer-to-peer traffic.

// EnableMSI programs the MSI receiver at addr with vectors 0-31 enabled
// and unmasked, and sets MSI Enable in the root port's own MSI capability:
// on the i.MX6 that bit gates the MSIs of the devices below the port, and
// Linux sets it on every i.MX variant (pci-imx6.c imx6_pcie_probe,
// PCI_MSI_FLAGS_ENABLE at the MSI capability the DBI lists); it is read
// back so the gate is open before any device is told to send. A root port
// without an MSI capability is an error (ErrNoCap).
func (rc *RC) EnableMSI(addr dma.Addr) error {
	if addr == 0 || addr&3 != 0 {
		return fmt.Errorf("pcie: MSI address %#x: %w", addr, ErrConfig)
	}
	off := uint32(rc.findDBICap(CapMSI))
	if off == 0 {
		return fmt.Errorf("pcie: %s root port has no MSI capability: %w", rc.soc.Name, ErrNoCap)
	}
	// Message Control is the upper half of the capability's first
	// dword; the lower half (ID, next pointer) is read-only.
	v := rc.dbi.Read32(off)
	rc.dbi.Write32(off, v|msiCtlEnable<<16)
	if rc.dbi.Read32(off)&(msiCtlEnable<<16) == 0 {
		return fmt.Errorf("pcie: %s root port MSI Enable does not stick: %w", rc.soc.Name, ErrConfig)
	}
	rc.msiAddr = uint64(addr)
	rc.dbi.Write32(plMSIAddrLo, uint32(addr))
	rc.dbi.Write32(plMSIAddrHi, uint32(uint64(addr)>>32))
	rc.dbi.Write32(plMSIMask, 0)
	rc.dbi.Write32(plMSIEnable, 0xFFFF_FFFF)
	return nil
}

// MSIPending returns the vectors signalled and not yet acknowledged.
func (rc *RC) MSIPending() uint32 { return rc.dbi.Read32(plMSIStatus) }

// AckMSI clears the given vectors. Writing exactly the bits that are set
// is right for the silicon (write 1 to clear) and for QEMU 7.2 (which
// toggles the bits written).
func (rc *RC) AckMSI(bits uint32) {
	if bits != 0 {
		rc.dbi.Write32(plMSIStatus, bits)
	}
}

// ServeMSI acknowledges every pending vector and calls fn for each.
func (rc *RC) ServeMSI(fn func(vector int)) int {
	p := rc.MSIPending()
	rc.AckMSI(p)
	n := 0
	for v := 0; v < 32; v++ {
		if p&(1<<v) != 0 {
			n++
			if fn != nil {
				fn(v)
			}
		}
	}
	return n
}

// EnableMSI points the function's MSI capability at the root complex's
// receiver with one message carrying vector, enables it and disables the
// function's INTx. EnableMSI on the RC must have been called.
func (d *Device) EnableMSI(vector int) error {
	if d.MSI == nil {
		return fmt.Errorf("pcie: %v MSI: %w", d.BDF, ErrNoCap)
	}
	if vector < 0 || vector > 31 || d.rc.msiAddr == 0 {
		return fmt.Errorf("pcie: %v MSI vector %d (receiver at %#x): %w", d.BDF, vector, d.rc.msiAddr, ErrConfig)
	}
	o := d.MSI.Offset
	ctl, err := d.ReadConfig32(o)
	if err != nil {
		return err
	}
	// Disabled while the address changes; one message (MME = 0).
	ctl &^= (1 | 7<<4) << 16
	if err := d.WriteConfig32(o, ctl); err != nil {
		return err
	}
	data := o + 8
	if err := d.WriteConfig32(o+4, uint32(d.rc.msiAddr)); err != nil {
		return err
	}
	if d.MSI.Is64 {
		if err := d.WriteConfig32(o+8, uint32(d.rc.msiAddr>>32)); err != nil {
			return err
		}
		data = o + 12
	}
	dv, err := d.ReadConfig32(data)
	if err != nil {
		return err
	}
	if err := d.WriteConfig32(data, dv&0xFFFF_0000|uint32(vector)); err != nil {
		return err
	}
	if err := d.WriteConfig32(o, ctl|1<<16); err != nil {
		return err
	}
	return d.setCommand(cmdINTxDisable, cmdINTxDisable)
}

// SetINTx enables or disables the function's legacy interrupt (command
// register Interrupt Disable).
func (d *Device) SetINTx(on bool) error {
	v := uint16(cmdINTxDisable)
	if on {
		v = 0
	}
	return d.setCommand(cmdINTxDisable, v)
}

// INTxPending reports the function's Interrupt Status bit.
func (d *Device) INTxPending() (bool, error) {
	v, err := d.ReadConfig32(cfgCommand)
	if err != nil {
		return false, err
	}
	return v>>16&statusINTx != 0, nil
}

// EnableMSIX points MSI-X table entry of the function at the root
// complex's receiver with vector as data, unmasks that entry and enables
// MSI-X (function mask off), disabling INTx. The table is written through
// the memory window (Map), so its BAR must be assigned. Entries not
// programmed stay masked (their reset state).
func (d *Device) EnableMSIX(entry, vector int) error {
	x := d.MSIX
	if x == nil {
		return fmt.Errorf("pcie: %v MSI-X: %w", d.BDF, ErrNoCap)
	}
	if entry < 0 || entry >= x.TableSize || vector < 0 || vector > 31 || d.rc.msiAddr == 0 {
		return fmt.Errorf("pcie: %v MSI-X entry %d vector %d (table of %d, receiver at %#x): %w",
			d.BDF, entry, vector, x.TableSize, d.rc.msiAddr, ErrConfig)
	}
	if x.TableBAR > 5 {
		return fmt.Errorf("pcie: %v MSI-X table in BAR%d: %w", d.BDF, x.TableBAR, ErrRange)
	}
	ctl, err := d.ReadConfig32(x.Offset)
	if err != nil {
		return err
	}
	// Function mask on while the entry changes.
	ctl = ctl&^(1<<31) | 1<<30
	if err := d.WriteConfig32(x.Offset, ctl); err != nil {
		return err
	}
	w, err := d.rc.Map(d, x.TableBAR, uint64(x.TableOffset)+16*uint64(entry), 16)
	if err != nil {
		return fmt.Errorf("pcie: %v MSI-X table: %w", d.BDF, err)
	}
	w.Write32(0, uint32(d.rc.msiAddr))
	w.Write32(4, uint32(d.rc.msiAddr>>32))
	w.Write32(8, uint32(vector))
	w.Write32(12, 0) // vector control: unmasked
	w.Release()
	if err := d.WriteConfig32(x.Offset, ctl&^(1<<30)|1<<31); err != nil {
		return err
	}
	return d.setCommand(cmdINTxDisable, cmdINTxDisable)
}
