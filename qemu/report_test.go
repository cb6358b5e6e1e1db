package qemu

import (
	"os"
	"path/filepath"
	"testing"
)

// TestWriteTables: the rows and tables are written; the tables are
// appended to a report.md that exists, and no report.md is made when
// there is none.
func TestWriteTables(t *testing.T) {
	for _, withReport := range []bool{false, true} {
		dir := t.TempDir()
		rep := filepath.Join(dir, "report.md")
		if withReport {
			if err := os.WriteFile(rep, []byte("head\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if err := WriteTables(dir, "x", []int{1, 2}, "| t |\n"); err != nil {
			t.Fatal(err)
		}
		if b, err := os.ReadFile(filepath.Join(dir, "x.json")); err != nil || string(b) != "[\n  1,\n  2\n]" {
			t.Errorf("x.json %q %v", b, err)
		}
		if b, err := os.ReadFile(filepath.Join(dir, "x.md")); err != nil || string(b) != "| t |\n" {
			t.Errorf("x.md %q %v", b, err)
		}
		b, err := os.ReadFile(rep)
		switch {
		case withReport && (err != nil || string(b) != "head\n| t |\n"):
			t.Errorf("report.md %q %v", b, err)
		case !withReport && err == nil:
			t.Errorf("report.md made: %q", b)
		}
	}
}

// TestE1000EAddr: the 82574L's console line gives its MAC only at the
// address asked for; another address, no line or no MAC is an error.
func TestE1000EAddr(t *testing.T) {
	c := "PCIE link_up=true\nE1000E ip=10.0.2.1/24 mac=52:54:00:12:34:58 link=true speed=1000 irq=intx\nREADY ip=10.0.0.1/24"
	if mac, err := E1000EAddr(c, "10.0.2.1/24"); err != nil || mac.String() != "52:54:00:12:34:58" {
		t.Fatalf("%v %v", mac, err)
	}
	for _, bad := range []struct{ console, prefix string }{
		{c, "10.0.2.15/24"},
		{c, "10.0.2.1/16"},
		{"READY ip=10.0.0.1/24", "10.0.2.1/24"},
		{"E1000E ip=10.0.2.1/24 link=true", "10.0.2.1/24"},
	} {
		if _, err := E1000EAddr(bad.console, bad.prefix); err == nil {
			t.Errorf("%q at %s: no error", bad.console, bad.prefix)
		}
	}
	if NICLabel("mcimx7d", "e1000e") != "i.MX7D 82574L" || NICLabel("", "") != "" || NICLabel("sabrelite", "enet") != "sabrelite enet" {
		t.Error("NICLabel")
	}
}
