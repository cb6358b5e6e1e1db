package main

import (
	"fmt"
	"math"
	"net/http"
	"time"

	"github.com/tamanic/tamanic/firmware/app"
)

// trial is one trial's outcome.
type trial struct {
	n        int
	received int64
	lost     int64
	rate     float64 // achieved: datagrams a second over the first to the last
	errs     int64   // the source's send errors
	st       app.PPSStats
}

// rxTrial sends n datagrams of size bytes at rate to the firmware's sink
// and returns what it counted. It calls mid (if set) between arming and
// sending, after (if set) once the last datagram is sent.
func (b *bench) rxTrial(size, rate, n int, mid, after func() error) (trial, error) {
	b.id++
	id := b.id
	secs := min(int(int64(n)/int64(rate))+10, int(app.PPSMaxTime/time.Second))
	if _, err := b.do(http.MethodPost, fmt.Sprintf("/pps?op=rx&port=%d&id=%d&count=%d&secs=%d", benchPort, id, n, secs)); err != nil {
		return trial{}, err
	}
	defer b.do(http.MethodPost, "/pps?op=stop")
	if mid != nil {
		if err := mid(); err != nil {
			return trial{}, err
		}
	}
	f := make([]byte, frameHeader+size)
	t0 := time.Now()
	var last time.Time
	for i := 0; i < n; i++ {
		due := t0.Add(time.Duration(int64(i) * int64(time.Second) / int64(rate)))
		if d := time.Until(due); d > 0 {
			time.Sleep(d)
		}
		if err := b.w.send(b.w.craft(f, size, id, uint64(i))); err != nil {
			return trial{}, fmt.Errorf("wire: %w", err)
		}
		last = time.Now()
	}
	t := trial{n: n, rate: float64(n-1) / last.Sub(t0).Seconds()}
	if after != nil {
		if err := after(); err != nil {
			return t, err
		}
	}
	// Until the sink has counted them all, or its count stands still
	// for 300 ms (what is still in QEMU's or the guest's queues is then
	// lost, as a board would drop it).
	var prev int64 = -1
	for still := time.Duration(0); ; {
		st, err := b.ppsStats()
		if err != nil {
			return t, err
		}
		t.st, t.received, t.lost = st, st.Received, st.Lost
		if st.ID != id {
			return t, fmt.Errorf("sink reports session %d, want %d", st.ID, id)
		}
		if st.Received == int64(n) || still >= 300*time.Millisecond {
			break
		}
		if st.Received == prev {
			still += 100 * time.Millisecond
		} else {
			still = 0
		}
		prev = st.Received
		time.Sleep(100 * time.Millisecond)
	}
	return t, sinkCounts(t.st, id, n)
}

// sinkCounts says whether the sink's counts st of a receive trial of n
// datagrams, session id, are to be taken: of the session, adding up
// (received, distinct, and lost make n), and nothing repeated: on this
// wire a repeat means the wire or the guest duplicated a datagram.
func sinkCounts(st app.PPSStats, id uint64, n int) error {
	if st.ID != id {
		return fmt.Errorf("sink reports session %d, want %d", st.ID, id)
	}
	if st.Received+st.Lost != int64(n) {
		return fmt.Errorf("sink counted %d and lost %d of %d (%+v)", st.Received, st.Lost, n, st)
	}
	if st.Duplicates != 0 {
		return fmt.Errorf("sink counted %d repeated datagrams (%+v)", st.Duplicates, st)
	}
	return nil
}

// txTrial asks the firmware's source for n datagrams of size bytes at
// rate and counts what arrives. mid runs after the request, within the
// source's start delay (delay), after once the datagrams stop coming.
func (b *bench) txTrial(size, rate, n int, delay time.Duration, mid, after func() error) (trial, error) {
	b.id++
	id := b.id
	c := newSeqCounter(id, n)
	b.w.rx.Store(c)
	defer b.w.rx.Store(nil)
	if _, err := b.do(http.MethodPost, fmt.Sprintf("/pps?op=tx&port=%d&id=%d&count=%d&size=%d&rate=%d&delay_ms=%d",
		benchPort, id, n, size, rate, delay.Milliseconds())); err != nil {
		return trial{}, err
	}
	defer b.do(http.MethodPost, "/pps?op=stop")
	if mid != nil {
		if err := mid(); err != nil {
			return trial{}, err
		}
	}
	// Until every datagram is here, or none came for 300 ms after the
	// time the source should have taken (the guest's clock may run slow
	// under icount; its count is read only after).
	t0 := time.Now()
	expect := delay + time.Duration(int64(n)*int64(time.Second)/int64(rate))
	var prev int64
	for still := time.Duration(0); ; time.Sleep(20 * time.Millisecond) {
		got, _ := c.counts()
		if got == int64(n) {
			break
		}
		if got != prev {
			still, prev = 0, got
		} else if time.Since(t0) > expect {
			still += 20 * time.Millisecond
			if still >= 300*time.Millisecond {
				break
			}
		}
		if time.Since(t0) > expect+30*time.Second {
			break
		}
	}
	if after != nil {
		if err := after(); err != nil {
			return trial{}, err
		}
	}
	got, _ := c.counts()
	t := trial{n: n, received: got, lost: int64(n) - got}
	if bad := c.badSum.Load(); bad != 0 {
		// Not a rate's failure: the firmware sent what a peer drops.
		return t, fmt.Errorf("%d of the source's datagrams arrived with a bad IPv4 or UDP checksum", bad)
	}
	st, err := b.ppsStats()
	if err != nil {
		return t, err
	}
	if st.ID != id {
		return t, fmt.Errorf("source reports session %d, want %d", st.ID, id)
	}
	t.st, t.errs = st, st.SendErrors
	if st.LastNs > st.FirstNs {
		t.rate = float64(n-1) / (float64(st.LastNs-st.FirstNs) / 1e9)
	}
	return t, nil
}

// ok says whether a trial at rate passed: nothing lost, no send error,
// and (send) the source kept within 5% of the rate.
func (t trial) ok(dir string, rate int) bool {
	if t.lost != 0 || t.errs != 0 {
		return false
	}
	return dir == "rx" || t.rate >= 0.95*float64(rate)
}

// search finds the highest rate at which a trial of the row passes: the
// rate doubles from start until a trial fails (or o.maxRate
// passes), then o.bisect bisections (geometric) between the last pass
// and the first failure.
func (b *bench) search(r Row, o options, start int) (Row, error) {
	run1 := func(rate int) (bool, float64, error) {
		n := max(100, int(float64(rate)*o.trial.Seconds()))
		// The guest's busy share from arming to the last datagram
		// (a /stats reading each side).
		var t trial
		var err error
		var busy0, up0, busy1, up1 int64
		mid := func() (err error) { busy0, up0, err = b.busy(); return err }
		after := func() (err error) { busy1, up1, err = b.busy(); return err }
		const delay = 150 * time.Millisecond
		if r.Dir == "rx" {
			t, err = b.rxTrial(r.Size, rate, n, mid, after)
		} else {
			t, err = b.txTrial(r.Size, rate, n, delay, mid, after)
			// The source's start delay, which the window holds, is
			// idle but for the first reading's end.
			up0 += int64(delay)
		}
		if err != nil {
			return false, 0, err
		}
		share := float64(busy1-busy0) / float64(max(1, up1-up0))
		r.Trials++
		pass := t.ok(r.Dir, rate)
		if !pass && r.BusyAtFail == 0 {
			r.BusyAtFail = share
		}
		fmt.Printf("  trial %s %s %-6s cb=%-4s %4d B at %6d/s: %d of %d, lost %d, send errors %d, achieved %.0f/s, guest busy %.0f%%: %v\n",
			r.Firmware, r.Dir, r.Mode, cbName(r.Copybreak), r.Size, rate, t.received, n, t.lost, t.errs, t.rate, 100*share, map[bool]string{true: "pass", false: "FAIL"}[pass])
		return pass, min(t.rate, float64(rate)), nil
	}
	// A rate that fails is tried once more: on the shared host QEMU's
	// I/O thread can be descheduled for longer than its socket's receive
	// buffer (the kernel's rmem_default, 208 KiB: about 90 full frames)
	// holds at the rate, and those frames are dropped before the guest
	// sees them. The guest's busy share in each failed trial is printed
	// (and the first kept): far below 100%, the guest was not the limit.
	run := func(rate int) (bool, float64, error) {
		pass, achieved, err := run1(rate)
		if err == nil && !pass {
			pass, achieved, err = run1(rate)
		}
		return pass, achieved, err
	}
	good, bad := 0, 0
	for rate := start; ; rate *= 2 {
		rate = min(rate, o.maxRate)
		pass, achieved, err := run(rate)
		if err != nil {
			return r, err
		}
		if !pass {
			bad = rate
			break
		}
		good, r.PPS = rate, achieved
		if rate >= o.maxRate {
			break
		}
	}
	for good == 0 && bad > 100 {
		// Failed at the start rate: halve until a pass.
		rate := bad / 2
		pass, achieved, err := run(rate)
		if err != nil {
			return r, err
		}
		if pass {
			good, r.PPS = rate, achieved
		} else {
			bad = rate
		}
	}
	for i := 0; i < o.bisect && bad > 0 && good > 0; i++ {
		mid := int(math.Sqrt(float64(good) * float64(bad)))
		if mid <= good || mid >= bad {
			break
		}
		pass, achieved, err := run(mid)
		if err != nil {
			return r, err
		}
		if pass {
			good, r.PPS = mid, achieved
		} else {
			bad = mid
		}
	}
	r.FailPPS = float64(bad)
	return r, nil
}

// icountRun measures the guest's busy instructions per datagram over a
// run of o.icountN at o.icountRate: the busy time between a /stats
// reading after the session opens and one after its last datagram (rx:
// 300 ms after the last is sent, for the guest to finish), less what a
// reading itself adds (two back to back) and the idle guest's background
// (timers, the link poll: b.bgPerNs over the window), over the datagrams.
func (b *bench) icountRun(r Row, o options) (Row, error) {
	r.N, r.Rate = o.icountN, o.icountRate
	var s0, sa, u0, s1, u1 int64
	mid := func() error {
		var err error
		if sa, _, err = b.busy(); err != nil {
			return err
		}
		s0, u0, err = b.busy()
		r.StatsBusyNs = s0 - sa
		return err
	}
	after := func() error {
		if r.Dir == "rx" {
			time.Sleep(300 * time.Millisecond)
		}
		var err error
		s1, u1, err = b.busy()
		return err
	}
	var t trial
	var err error
	if r.Dir == "rx" {
		t, err = b.rxTrial(r.Size, r.Rate, r.N, mid, after)
	} else {
		t, err = b.txTrial(r.Size, r.Rate, r.N, 500*time.Millisecond, mid, after)
	}
	if err != nil {
		return r, err
	}
	if first := t.st.StartNs + t.st.FirstNs; t.st.Received+t.st.Sent > 0 && u0 > first {
		return r, fmt.Errorf("icount run: the window opened (uptime %d) after the first datagram (%d): raise the source's delay", u0, first)
	}
	if last := t.st.StartNs + t.st.LastNs; u1 < last {
		return r, fmt.Errorf("icount run: the window closed (uptime %d) before the last datagram (%d)", u1, last)
	}
	r.Lost = t.lost
	r.BgNs = int64(b.bgPerNs * float64(u1-u0))
	// Over the datagrams the guest handled: those the sink counted, or
	// the source sent (one lost before the guest cost it nothing).
	handled := t.st.Received
	if r.Dir == "tx" {
		handled = t.st.Sent
	}
	if handled <= 0 {
		return r, fmt.Errorf("icount run: the guest handled no datagram (%+v)", t.st)
	}
	r.InstrPerPkt = float64(s1-s0-r.StatsBusyNs-r.BgNs) / float64(handled)
	fmt.Printf("icount %s %s %-6s cb=%-4s %4d B: %.0f instructions/packet (%d at %d/s, lost %d; taken off: a /stats reading %d, background %d)\n",
		r.Firmware, r.Dir, r.Mode, cbName(r.Copybreak), r.Size, r.InstrPerPkt, r.N, r.Rate, r.Lost, r.StatsBusyNs, r.BgNs)
	return r, nil
}

// background measures the idle guest's busy time per nanosecond of its
// clock: two /stats readings back to back (what a reading adds), then
// one a second later.
func (b *bench) background() error {
	a, _, err := b.busy()
	if err != nil {
		return err
	}
	c0, u0, err := b.busy()
	if err != nil {
		return err
	}
	time.Sleep(time.Second)
	c1, u1, err := b.busy()
	if err != nil {
		return err
	}
	b.bgPerNs = max(0, float64(c1-c0-(c0-a))/float64(max(1, u1-u0)))
	return nil
}
