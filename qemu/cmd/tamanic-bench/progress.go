package main

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// progress reports each transfer on stderr as the bench goes: which board,
// boot, mode, direction and run, the transfer's figure when it ends, and an
// estimate of the time left. The estimate weighs transfers by their bytes:
// wall time so far (boots and iperf3 tests included) per byte transferred,
// times the bytes still planned.
type progress struct {
	w     io.Writer
	board string
	runs  int // runs per configuration
	now   func() time.Time
	start time.Time
	// Transfers and bytes planned and done.
	total, done           int
	totalBytes, doneBytes int64
}

func newProgress(w io.Writer, board string, runs int, now func() time.Time) *progress {
	return &progress{w: w, board: board, runs: runs, now: now, start: now()}
}

// plan adds n transfers of size bytes each to the work still to do.
func (p *progress) plan(n int, size int64) {
	if p == nil || n <= 0 {
		return
	}
	p.total += n
	p.totalBytes += int64(n) * size
}

// bootName names a boot as the progress line shows it.
func bootName(boot string) string {
	if boot == "icount+gdb" {
		return "profile"
	}
	return boot
}

func cbName(cb int) string {
	if cb < 0 {
		return "off"
	}
	return fmt.Sprint(cb)
}

// begin reports that a transfer starts (i counts from 0).
func (p *progress) begin(boot, dir, mode string, cb, i int, size int64) {
	if p == nil {
		return
	}
	n := p.runs
	if boot == "icount+gdb" {
		n = 1
	}
	c := "" // copybreak applies to tamanic's receive path only
	if dir == "rx" && mode != BaselineMode && !strings.HasPrefix(mode, "e1000e-") {
		c = " copybreak " + cbName(cb)
	}
	fmt.Fprintf(p.w, "[%d/%d] %s %s %s %s%s run %d/%d (%s)...\n", p.done+1, max(p.total, p.done+1),
		p.board, bootName(boot), mode, dirName(dir), c, i+1, n, mib(size))
}

// end reports the transfer's figure (or its error) and the time left.
func (p *progress) end(r Run, err error) {
	if p == nil {
		return
	}
	p.done++
	p.doneBytes += r.Bytes
	el := p.now().Sub(p.start)
	fig := ""
	switch {
	case err != nil:
		fig = "failed: " + err.Error()
	case r.Boot == "plain":
		fig = fmt.Sprintf("%.1f Mbit/s", r.Mbps)
	default:
		fig = fmt.Sprintf("%.2f M instructions/MiB", r.BusyPerMiB/1e6)
	}
	fmt.Fprintf(p.w, "    %s; %s elapsed, %s\n", fig, el.Round(time.Second), left(el, p.doneBytes, p.totalBytes))
}

// left estimates the time still needed from the elapsed time and the bytes
// done of those planned.
func left(elapsed time.Duration, done, total int64) string {
	if done <= 0 {
		return "time left unknown"
	}
	if done >= total {
		return "planned transfers done"
	}
	rem := time.Duration(float64(elapsed) * float64(total-done) / float64(done))
	return fmt.Sprintf("about %s left", rem.Round(time.Second))
}

func mib(n int64) string {
	if n%(1<<20) == 0 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d bytes", n)
}

// note reports a step that is not a transfer (a build, a boot, the
// iperf3 tests), with the time elapsed so far.
func (p *progress) note(what string) {
	if p == nil {
		return
	}
	fmt.Fprintf(p.w, "%s: %s (%s elapsed)\n", p.board, what, p.now().Sub(p.start).Round(time.Second))
}
