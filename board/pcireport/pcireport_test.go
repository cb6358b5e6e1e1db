package pcireport

import (
	"errors"
	"strings"
	"testing"
)

// TestRunWithoutRootComplex: a root complex that could not be made is
// reported with its error, no link, an empty device list (never null in
// /stats) and no root complex to attach devices from.
func TestRunWithoutRootComplex(t *testing.T) {
	rc, rep := Run(nil, errors.New("pcie: no such SoC"), true)
	if rc != nil || rep.LinkUp || rep.Error != "pcie: no such SoC" || rep.Devices == nil || len(rep.Devices) != 0 {
		t.Fatalf("rc %v, report %+v", rc, rep)
	}
}

// TestPrint: the PCIE console lines the QEMU tests and users read.
func TestPrint(t *testing.T) {
	var b strings.Builder
	Print(&b, Report{LinkUp: true, Gen: 1, Width: 1, Devices: []Device{{
		BDF: "01:00.0", Vendor: 0x8086, Device: 0x10d3, Class: 0x020000,
		BARs:     []BAR{{Index: 0, Addr: 0x40000000, Size: 0x20000, Assigned: true}},
		BAR0:     []uint32{0x00140241, 0x00080283},
		Problems: []string{"BAR 5: refused"},
	}}})
	want := "PCIE link_up=true gen=1 width=1 devices=1\n" +
		"PCIE 01:00.0 8086:10d3 class=020000 bar0=0x40000000/0x20000 bar0[0]=0x00140241 bar0[8]=0x00080283 problem=\"BAR 5: refused\"\n"
	if b.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", b.String(), want)
	}
	b.Reset()
	Print(&b, Report{Error: "pcie: link did not come up", Devices: []Device{}})
	if want := "PCIE link_up=false gen=0 width=0 devices=0 error=\"pcie: link did not come up\"\n"; b.String() != want {
		t.Fatalf("got %q, want %q", b.String(), want)
	}
}
