package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// boardRuns is one board's results.json.
type boardRuns struct {
	board string
	keys  []key
	g     map[key]map[string][]Run
}

// compare reads the results.json of each "board=dir" argument and writes
// the boards' bounce/sg/TSO figures side by side to w: for every
// configuration, each board's plain-boot throughput and icount guest
// instructions per MiB (medians).
func compare(w io.Writer, args []string) error {
	var bs []boardRuns
	for _, a := range args {
		name, dir, ok := strings.Cut(a, "=")
		if !ok {
			return fmt.Errorf("compare: %q is not board=dir", a)
		}
		b, err := os.ReadFile(filepath.Join(dir, "results.json"))
		if err != nil {
			return fmt.Errorf("compare: %w", err)
		}
		var all []Run
		if err := json.Unmarshal(b, &all); err != nil {
			return fmt.Errorf("compare: %s: %w", dir, err)
		}
		keys, g := groups(all)
		bs = append(bs, boardRuns{name, keys, g})
	}
	if len(bs) == 0 {
		return fmt.Errorf("compare: no boards")
	}
	fmt.Fprintln(w, "\n### Boards side by side (QEMU; Mbit/s: plain boot, median; M/MiB: guest instructions per MiB under icount, median)")
	fmt.Fprint(w, "\n| direction | TX mode | copybreak |")
	sep := "|---|---|---|"
	for _, b := range bs {
		fmt.Fprintf(w, " %s Mbit/s | %s M/MiB |", b.board, b.board)
		sep += "---|---|"
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, sep)
	// Rows: every configuration any board ran (the i.MX7D adds its
	// e1000e modes), in first-seen order.
	var rows []key
	seen := map[key]bool{}
	for _, b := range bs {
		for _, k := range b.keys {
			if !seen[k] {
				seen[k] = true
				rows = append(rows, k)
			}
		}
	}
	for _, k := range rows {
		fmt.Fprintf(w, "| %s | %s | %d |", dirName(k.dir), k.mode, k.cb)
		for _, b := range bs {
			p, ic := b.g[k]["plain"], b.g[k]["icount"]
			if len(p) == 0 && len(ic) == 0 {
				fmt.Fprint(w, " – | – |")
				continue
			}
			fmt.Fprintf(w, " %.1f | %.2f |", col(p, func(r Run) float64 { return r.Mbps }),
				col(ic, func(r Run) float64 { return r.BusyPerMiB })/1e6)
		}
		fmt.Fprintln(w)
	}
	return nil
}
