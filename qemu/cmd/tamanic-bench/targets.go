package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/tamanic/tamanic/qemu"
)

// costTarget is one of issue 16's cost targets: at most Max instructions
// per MiB for the transfer dir:mode:copybreak.
type costTarget struct {
	Name           string
	Dir, Mode      string
	Copybreak      int
	Max            float64
	Per            string
	stock, patched []float64
}

// issue16Targets are the next cost step's targets (issue 16 item 4),
// measured by tamanic-cost under icount.
func issue16Targets() []costTarget {
	return []costTarget{
		{Name: "sg+tso guest→host", Dir: "tx", Mode: "tso", Copybreak: 512, Max: 4e6, Per: "sent"},
		{Name: "bounce guest→host", Dir: "tx", Mode: "bounce", Copybreak: 512, Max: 15e6, Per: "sent"},
		{Name: "sg guest→host", Dir: "tx", Mode: "sg", Copybreak: 512, Max: 15e6, Per: "sent"},
		{Name: "host→guest", Dir: "rx", Mode: "tso", Copybreak: 512, Max: 8e6, Per: "received"},
	}
}

// targetsReport writes the targets table from two tamanic-cost runs of
// the same configurations, back to back: stock gVisor and gVisor with the
// patches. A target is met when every run is at or under it; "met with
// the gVisor patches" when only the patched runs are. A target with no
// runs says so rather than passing.
func targetsReport(w io.Writer, stock, patched []qemu.CostRun) {
	ts := issue16Targets()
	var names []string
	for _, r := range patched {
		names = r.GVisorPatches
		break
	}
	for i := range ts {
		t := &ts[i]
		for _, r := range stock {
			if r.Dir == t.Dir && r.Mode == t.Mode && r.Copybreak == t.Copybreak && len(r.GVisorPatches) == 0 {
				t.stock = append(t.stock, r.Busy)
			}
		}
		for _, r := range patched {
			if r.Dir == t.Dir && r.Mode == t.Mode && r.Copybreak == t.Copybreak && len(r.GVisorPatches) > 0 {
				t.patched = append(t.patched, r.Busy)
			}
		}
	}
	fmt.Fprintln(w, "\n### Issue 16's cost targets (tamanic-cost under icount, stock and patched gVisor back to back)")
	fmt.Fprintf(w, "\nGuest instructions per MiB, min–max (median) of the runs. Patched: gVisor with %s (docs/gvisor-patches/).\n\n",
		strings.Join(names, ", "))
	fmt.Fprintln(w, "| target | stock gVisor | patched gVisor | |")
	fmt.Fprintln(w, "|---|---|---|---|")
	for _, t := range ts {
		fmt.Fprintf(w, "| %s at most %.0f M per MiB %s | %s | %s | %s |\n",
			t.Name, t.Max/1e6, t.Per, rangeM(t.stock), rangeM(t.patched), t.verdict())
	}
}

// verdict says whether every run met the target.
func (t costTarget) verdict() string {
	met := func(v []float64) bool { return len(v) > 0 && slices.Max(v) <= t.Max }
	switch {
	case len(t.stock) == 0 && len(t.patched) == 0:
		return "not measured"
	case met(t.stock):
		return "met"
	case met(t.patched):
		return "met with the gVisor patches"
	}
	return "not met"
}

// rangeM formats runs as "min–max (median)" in millions.
func rangeM(v []float64) string {
	if len(v) == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f–%.2f M (%.2f)", slices.Min(v)/1e6, slices.Max(v)/1e6, median(v)/1e6)
}

// writeTargets is -targets: args are the stock and the patched
// tamanic-cost -json files.
func writeTargets(out string, args []string) error {
	if len(args) != 2 {
		return fmt.Errorf("targets: want two tamanic-cost -json files (stock, patched), got %d arguments", len(args))
	}
	stock, err := qemu.ReadCostRuns(args[0])
	if err != nil {
		return fmt.Errorf("targets: %w", err)
	}
	patched, err := qemu.ReadCostRuns(args[1])
	if err != nil {
		return fmt.Errorf("targets: %w", err)
	}
	var rep strings.Builder
	targetsReport(&rep, stock, patched)
	return publish("targets", out, rep.String())
}

// publish prints a report section, writes it to out and appends it to the
// report.md beside out when there is one (what is the section's name, for
// errors).
func publish(what, out, text string) error {
	fmt.Print(text)
	if err := os.WriteFile(out, []byte(text), 0o644); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	report := filepath.Join(filepath.Dir(out), "report.md")
	f, err := os.OpenFile(report, os.O_APPEND|os.O_WRONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	defer f.Close()
	if _, err := io.WriteString(f, text); err != nil {
		return fmt.Errorf("%s: appending to %s: %w", what, report, err)
	}
	return nil
}
