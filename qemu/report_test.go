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
