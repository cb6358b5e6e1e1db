package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeResults writes a board's results.json as the bench writes it (the
// Run fields under their JSON names) and returns its directory.
func writeResults(t *testing.T, js string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "results.json"), []byte(js), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestCompare: two boards' results side by side. Each cell is the median
// of that board's runs of the configuration (plain boot for Mbit/s,
// icount for instructions per MiB, in millions); the rows are every
// configuration any board ran, in first-seen order; a board that did not
// run a configuration shows dashes.
func TestCompare(t *testing.T) {
	evk := writeResults(t, `[
 {"boot":"plain","dir":"tx","mode":"bounce","copybreak":512,"mbps":100},
 {"boot":"plain","dir":"tx","mode":"bounce","copybreak":512,"mbps":80},
 {"boot":"plain","dir":"tx","mode":"bounce","copybreak":512,"mbps":90},
 {"boot":"icount","dir":"tx","mode":"bounce","copybreak":512,"guest_busy_per_mib":23e6},
 {"boot":"icount","dir":"tx","mode":"bounce","copybreak":512,"guest_busy_per_mib":21e6},
 {"boot":"icount","dir":"tx","mode":"bounce","copybreak":512,"guest_busy_per_mib":26.5e6},
 {"boot":"plain","dir":"rx","mode":"tso","copybreak":0,"mbps":200.04},
 {"boot":"icount","dir":"rx","mode":"tso","copybreak":0,"guest_busy_per_mib":10e6}
]`)
	imx7 := writeResults(t, `[
 {"boot":"icount","dir":"tx","mode":"bounce","copybreak":512,"guest_busy_per_mib":30.126e6},
 {"boot":"plain","dir":"tx","mode":"bounce","copybreak":512,"mbps":70},
 {"boot":"plain","dir":"tx","mode":"e1000e-tso","copybreak":0,"mbps":300},
 {"boot":"plain","dir":"tx","mode":"e1000e-tso","copybreak":0,"mbps":310},
 {"boot":"icount","dir":"tx","mode":"e1000e-tso","copybreak":0,"guest_busy_per_mib":5e6}
]`)
	var w strings.Builder
	if err := compare(&w, []string{"mx6ullevk=" + evk, "mcimx7d=" + imx7}); err != nil {
		t.Fatal(err)
	}
	want := `
### Boards side by side (QEMU; Mbit/s: plain boot, median; M/MiB: guest instructions per MiB under icount, median)

| direction | TX mode | copybreak | mx6ullevk Mbit/s | mx6ullevk M/MiB | mcimx7d Mbit/s | mcimx7d M/MiB |
|---|---|---|---|---|---|---|
| guest→host | bounce | 512 | 90.0 | 23.00 | 70.0 | 30.13 |
| host→guest | tso | 0 | 200.0 | 10.00 | – | – |
| guest→host | e1000e-tso | 0 | – | – | 310.0 | 5.00 |
`
	if got := w.String(); got != want {
		t.Errorf("compare wrote:\n%s\nwant:\n%s", got, want)
	}
}

// TestCompareErrors: a malformed argument, a missing or unreadable
// results.json and no boards at all are errors naming the problem, and
// nothing is reported as a table.
func TestCompareErrors(t *testing.T) {
	good := writeResults(t, `[{"boot":"plain","dir":"tx","mode":"sg","copybreak":0,"mbps":1}]`)
	bad := writeResults(t, `[{"boot":"plain",`)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"mx6ullevk"}, `"mx6ullevk" is not board=dir`},
		{[]string{"mx6ullevk=" + good, "sabrelite=" + filepath.Join(good, "absent")}, "results.json"},
		{[]string{"sabrelite=" + bad}, bad},
		{nil, "no boards"},
	} {
		var w strings.Builder
		err := compare(&w, c.args)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("compare(%q) = %v, want an error with %q", c.args, err, c.want)
		}
		if strings.Contains(w.String(), "|") {
			t.Errorf("compare(%q) wrote a table before failing:\n%s", c.args, w.String())
		}
	}
}
