// Package pcireport is the PCIe part of the boards' /stats and console
// (nic.pcie, the PCIE lines), shared by every board with a root complex:
// it starts the root complex, enumerates the bus and describes what it
// found. It never fails the boot: a link that does not train or a bad
// device is reported, not fatal.
package pcireport

import (
	"fmt"
	"io"

	"github.com/tamanic/tamanic/pcie"
)

// Device is what /stats lists for one PCIe function.
type Device struct {
	BDF    string `json:"bdf"`
	Vendor uint16 `json:"vendor"`
	Device uint16 `json:"device"`
	Class  uint32 `json:"class"`
	BARs   []BAR  `json:"bars"`
	Gen    int    `json:"link_gen"`
	Width  int    `json:"link_width"`
	IRQ    int    `json:"irq"`
	// BAR0 holds dwords 0 and 2 of BAR0 read through the memory window
	// (an Intel 8257x's CTRL and STATUS), when asked for and BAR0 is a
	// memory BAR.
	BAR0     []uint32 `json:"bar0,omitempty"`
	Problems []string `json:"problems,omitempty"`
}

// BAR is one assigned or refused BAR.
type BAR struct {
	Index    int    `json:"index"`
	Addr     uint64 `json:"addr"`
	Size     uint64 `json:"size"`
	Assigned bool   `json:"assigned"`
	IO       bool   `json:"io"`
}

// Report is the root complex's state for /stats (nic.pcie).
type Report struct {
	LinkUp  bool     `json:"link_up"`
	Gen     int      `json:"link_gen"`
	Width   int      `json:"link_width"`
	Error   string   `json:"error,omitempty"`
	Devices []Device `json:"devices"`
}

// Run starts rc and enumerates its bus; rc and err are pcie.New's
// results. With bar0, dwords 0 and 2 of each device's memory BAR0 are
// read through the window. It returns rc (nil when pcie.New failed) and
// the report.
func Run(rc *pcie.RC, err error, bar0 bool) (*pcie.RC, Report) {
	rep := Report{Devices: []Device{}}
	if err != nil {
		rep.Error = err.Error()
		return nil, rep
	}
	if err := rc.Start(); err != nil {
		rep.Error = err.Error()
		return rc, rep
	}
	rep.LinkUp = true
	rep.Gen, rep.Width = rc.Link()
	devs, err := rc.Enumerate()
	if err != nil {
		rep.Error = err.Error()
		return rc, rep
	}
	for _, d := range devs {
		pd := Device{BDF: d.BDF.String(), Vendor: d.Vendor, Device: d.DeviceID, Class: d.Class, IRQ: d.IRQ}
		if d.PCIe != nil {
			pd.Gen, pd.Width = d.PCIe.Speed, d.PCIe.Width
		}
		for _, b := range d.BARs {
			if b.Size != 0 {
				pd.BARs = append(pd.BARs, BAR{Index: b.Index, Addr: b.Addr, Size: b.Size, Assigned: b.Assigned, IO: b.IO})
			}
		}
		if b := d.BARs[0]; bar0 && b.Assigned && !b.IO && b.Size >= 16 {
			if w, err := rc.Map(d, 0, 0, 16); err == nil {
				pd.BAR0 = []uint32{w.Read32(0), w.Read32(8)}
				w.Release()
			} else {
				pd.Problems = append(pd.Problems, err.Error())
			}
		}
		for _, p := range d.Problems {
			pd.Problems = append(pd.Problems, p.Error())
		}
		rep.Devices = append(rep.Devices, pd)
	}
	return rc, rep
}

// Print writes the PCIE console lines: the link, then one line per
// device with its IDs, BARs, BAR0 dwords and problems.
func Print(w io.Writer, rep Report) {
	fmt.Fprintf(w, "PCIE link_up=%v gen=%d width=%d devices=%d", rep.LinkUp, rep.Gen, rep.Width, len(rep.Devices))
	if rep.Error != "" {
		fmt.Fprintf(w, " error=%q", rep.Error)
	}
	fmt.Fprintln(w)
	for _, d := range rep.Devices {
		fmt.Fprintf(w, "PCIE %s %04x:%04x class=%06x", d.BDF, d.Vendor, d.Device, d.Class)
		for _, b := range d.BARs {
			fmt.Fprintf(w, " bar%d=%#x/%#x", b.Index, b.Addr, b.Size)
		}
		if len(d.BAR0) == 2 {
			fmt.Fprintf(w, " bar0[0]=%#08x bar0[8]=%#08x", d.BAR0[0], d.BAR0[1])
		}
		for _, p := range d.Problems {
			fmt.Fprintf(w, " problem=%q", p)
		}
		fmt.Fprintln(w)
	}
}
