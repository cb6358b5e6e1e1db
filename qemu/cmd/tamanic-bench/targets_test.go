package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tamanic/tamanic/qemu"
)

func costRuns(dir, mode string, patches []string, busy ...float64) []qemu.CostRun {
	var rs []qemu.CostRun
	for i, b := range busy {
		rs = append(rs, qemu.CostRun{Dir: dir, Mode: mode, Copybreak: 512, Run: i, GVisorPatches: patches, Busy: b})
	}
	return rs
}

// TestTargetsReportVerdicts: a target is met only when every run is at or
// under it, stock first, then patched; one run over is enough to miss it,
// and a target without runs is "not measured", never met.
func TestTargetsReportVerdicts(t *testing.T) {
	p := []string{"0001-a", "0002-b"}
	var stock, patched []qemu.CostRun
	stock = append(stock, costRuns("tx", "tso", nil, 3.8e6, 3.9e6, 3.95e6)...)
	patched = append(patched, costRuns("tx", "tso", p, 3.7e6, 3.7e6, 3.7e6)...)
	stock = append(stock, costRuns("tx", "bounce", nil, 18.4e6, 18.5e6, 18.6e6)...)
	patched = append(patched, costRuns("tx", "bounce", p, 14.8e6, 14.9e6, 15.01e6)...) // one run over
	stock = append(stock, costRuns("tx", "sg", nil, 18.0e6, 18.1e6, 18.2e6)...)
	patched = append(patched, costRuns("tx", "sg", p, 14.4e6, 14.5e6, 14.6e6)...)
	// host->guest only in the wrong files: a patched run in the stock file
	// and a stock one in the patched file must not count.
	stock = append(stock, costRuns("rx", "tso", p, 7.0e6)...)
	patched = append(patched, costRuns("rx", "tso", nil, 7.0e6)...)
	var b strings.Builder
	targetsReport(&b, stock, patched)
	out := b.String()
	for _, want := range []string{
		"| sg+tso guest→host at most 4 M per MiB sent | 3.80–3.95 M (3.90) | 3.70–3.70 M (3.70) | met |",
		"| bounce guest→host at most 15 M per MiB sent | 18.40–18.60 M (18.50) | 14.80–15.01 M (14.90) | not met |",
		"| sg guest→host at most 15 M per MiB sent | 18.00–18.20 M (18.10) | 14.40–14.60 M (14.50) | met with the gVisor patches |",
		"| host→guest at most 8 M per MiB received | – | – | not measured |",
		"0001-a, 0002-b",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
}

// TestWriteTargetsAppendsToTheReport: -targets writes its table and
// appends it to the report beside it, and refuses a wrong argument count.
func TestWriteTargetsAppendsToTheReport(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, rs []qemu.CostRun) string {
		var b strings.Builder
		b.WriteString("[")
		for i, r := range rs {
			if i > 0 {
				b.WriteString(",")
			}
			b.WriteString(`{"dir":"` + r.Dir + `","mode":"` + r.Mode + `","copybreak":512,"busy_per_mib":7.5e6`)
			if len(r.GVisorPatches) > 0 {
				b.WriteString(`,"gvisor_patches":["0001-a"]`)
			}
			b.WriteString("}")
		}
		b.WriteString("]")
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	s := write("stock.json", costRuns("rx", "tso", nil, 0))
	p := write("patched.json", costRuns("rx", "tso", []string{"0001-a"}, 0))
	if err := os.WriteFile(filepath.Join(dir, "report.md"), []byte("# report\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := writeTargets(filepath.Join(dir, "targets.md"), []string{s}); err == nil {
		t.Fatal("one argument accepted")
	}
	if err := writeTargets(filepath.Join(dir, "targets.md"), []string{s, p}); err != nil {
		t.Fatal(err)
	}
	rep, _ := os.ReadFile(filepath.Join(dir, "report.md"))
	want := "| host→guest at most 8 M per MiB received | 7.50–7.50 M (7.50) | 7.50–7.50 M (7.50) | met |"
	if !strings.HasPrefix(string(rep), "# report\n") || !strings.Contains(string(rep), want) {
		t.Fatalf("report.md:\n%s", rep)
	}
}
