package netstack_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tamanic/tamanic/fec/fectest"
)

// The stall campaign (issue 17): many host transfers between two gVisor
// stacks on the ENET model, in every configuration, each one recorded so
// that one which stops, or runs twice as slow as the median of its
// configuration, leaves its evidence behind. It is off unless asked for:
//
//	go test ./netstack -run Campaign -campaign 5 [-campaign.size 4194304] [-campaign.out DIR]
var (
	campaignReps = flag.Int("campaign", 0, "repetitions of each stall-campaign configuration (0: skip the campaign)")
	campaignSize = flag.Int64("campaign.size", 4<<20, "bytes per direction of each campaign transfer")
	campaignOut  = flag.String("campaign.out", "", "directory for the evidence of slow or stalled transfers (default: a new one under the system temp dir)")
	campaignSACK = flag.Bool("campaign.sack", false, "turn SACK on in the test stacks (gVisor's default is on; the test stacks, like the firmware's, run with it off)")
	campaignOnly = flag.String("campaign.only", "", "run only configurations whose name contains this")
)

// campaignConfig is one cell of the campaign's matrix.
type campaignConfig struct {
	mode   mode
	faults bool // loss, duplication, reordering on the wire
	write  int  // bytes per write, 0 for io.Copy's 32 KiB
	both   bool // both directions at once
}

func (c campaignConfig) String() string {
	f, w, d := "clean", "large", "oneway"
	if c.faults {
		f = "lossy"
	}
	if c.write != 0 {
		w = fmt.Sprintf("w%d", c.write)
	}
	if c.both {
		d = "both"
	}
	return strings.Join([]string{c.mode.name, f, w, d}, "/")
}

// snapPcap records the first 128 bytes of each frame (headers: sequence
// and acknowledgement numbers, windows, options) into memory, in libpcap
// format, so a transfer's whole conversation costs little until kept.
type snapPcap struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

const snapLen = 128

func newSnapPcap() *snapPcap {
	p := &snapPcap{}
	var h [24]byte
	binary.LittleEndian.PutUint32(h[0:], 0xA1B2C3D4)
	binary.LittleEndian.PutUint16(h[4:], 2)
	binary.LittleEndian.PutUint16(h[6:], 4)
	binary.LittleEndian.PutUint32(h[16:], snapLen)
	binary.LittleEndian.PutUint32(h[20:], 1) // LINKTYPE_ETHERNET
	p.buf.Write(h[:])
	return p
}

func (p *snapPcap) add(t time.Time, f []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var h [16]byte
	k := min(len(f), snapLen)
	binary.LittleEndian.PutUint32(h[0:], uint32(t.Unix()))
	binary.LittleEndian.PutUint32(h[4:], uint32(t.Nanosecond()/1000))
	binary.LittleEndian.PutUint32(h[8:], uint32(k))
	binary.LittleEndian.PutUint32(h[12:], uint32(len(f)))
	p.buf.Write(h[:])
	p.buf.Write(f[:k])
}

func (p *snapPcap) save(path string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return os.WriteFile(path, p.buf.Bytes(), 0o644)
}

// timeline samples both hosts' endpoint, driver, model and TCP state
// every 250 ms, so a slow transfer shows how it got slow.
type timeline struct {
	mu    sync.Mutex
	lines []string
	stop  chan struct{}
	done  chan struct{}
}

func sampleTimeline(hs ...*host) *timeline {
	tl := &timeline{stop: make(chan struct{}), done: make(chan struct{})}
	start := time.Now()
	go func() {
		defer close(tl.done)
		tk := time.NewTicker(250 * time.Millisecond)
		defer tk.Stop()
		for {
			var b strings.Builder
			fmt.Fprintf(&b, "== t=%v\n", time.Since(start).Round(time.Millisecond))
			for i, h := range hs {
				ms := h.rig.Model.Stats()
				es := h.ep.Stats()
				ns := h.rig.NIC.Stats()
				ts := h.s.Stats().TCP
				fmt.Fprintf(&b, "host%d ep{txPk %d gso %d held %d ringFull %d rxPk %d} nic{tx %+v rx %+v} model{tx %d rx %d noDesc %d kicks %d} tcp{sent %d retrans %d timeouts %d fastRetrans %d}\n",
					i, es.TxPackets, es.TxGSOPackets, es.TxHeld, es.TxRingFull, es.RxPackets, ns.Tx, ns.Rx,
					ms.TxFrames, ms.RxFrames, ms.RxNoDescriptor, ms.Kicks,
					ts.SegmentsSent.Value(), ts.Retransmits.Value(), ts.Timeouts.Value(), ts.FastRetransmit.Value())
			}
			tl.mu.Lock()
			tl.lines = append(tl.lines, b.String())
			tl.mu.Unlock()
			select {
			case <-tl.stop:
				return
			case <-tk.C:
			}
		}
	}()
	return tl
}

func (tl *timeline) end() string {
	close(tl.stop)
	<-tl.done
	tl.mu.Lock()
	defer tl.mu.Unlock()
	return strings.Join(tl.lines, "")
}

// campaignRun is one finished transfer (one or both directions).
type campaignRun struct {
	cfg      campaignConfig
	rep      int
	elapsed  time.Duration
	bytes    int64
	err      error
	pcap     *snapPcap
	timeline string
	diag     string
	stalled  bool // the no-progress watchdog fired
}

// stallLog catches the watchdog's "STALL" lines (harness_test.go's watch)
// while still logging them.
type stallLog struct {
	testing.TB
	hit atomic.Bool
}

func (s *stallLog) Logf(format string, args ...any) {
	if strings.HasPrefix(format, "STALL") {
		s.hit.Store(true)
	}
	s.TB.Helper()
	s.TB.Logf(format, args...)
}

func runCampaignOnce(t *testing.T, cfg campaignConfig, rep int, n int64) campaignRun {
	a, b, w := pair(t, hostOptions{mode: cfg.mode, noTrace: true})
	p := newSnapPcap()
	var k atomic.Int64
	wc := &wireCheck{}
	w.SetFilter(func(from int, f []byte) fectest.Action {
		p.add(time.Now(), f)
		wc.filter(from, f)
		if !cfg.faults {
			return fectest.Pass
		}
		switch i := k.Add(1); {
		case i%97 == 0:
			return fectest.Drop
		case i%89 == 0:
			return fectest.Duplicate
		case i%83 == 0:
			return fectest.Delay
		}
		return fectest.Pass
	})
	sl := &stallLog{TB: t}
	tl := sampleTimeline(a, b)
	v6 := rep%2 == 1
	x := xfer{write: cfg.write, timeout: 3 * time.Minute}
	start := time.Now()
	errs := make([]error, 2)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); errs[0] = transferWith(sl, a, b, v6, 5001, n, x) }()
	total := n
	if cfg.both {
		total = 2 * n
		wg.Add(1)
		go func() { defer wg.Done(); errs[1] = transferWith(sl, b, a, v6, 5002, n, x) }()
	}
	wg.Wait()
	el := time.Since(start)
	r := campaignRun{cfg: cfg, rep: rep, elapsed: el, bytes: total, err: errors.Join(errs...), pcap: p,
		timeline: tl.end(), stalled: sl.hit.Load()}
	r.diag = "== host a (10.0.0.1)\n" + a.diag() + "== host b (10.0.0.2)\n" + b.diag()
	if r.err == nil {
		wc.verify(t)
		drained(t, a, b)
	}
	return r
}

// TestCampaign is the stall campaign; see the flags above.
func TestCampaign(t *testing.T) {
	if *campaignReps <= 0 {
		t.Skip("the stall campaign runs with -campaign N (repetitions per configuration)")
	}
	out := *campaignOut
	if out == "" {
		var err error
		if out, err = os.MkdirTemp("", "tamanic-campaign-"); err != nil {
			t.Fatal(err)
		}
	} else if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	var cfgs []campaignConfig
	for _, m := range modes {
		for _, faults := range []bool{false, true} {
			for _, write := range []int{0, 1000} {
				for _, both := range []bool{false, true} {
					c := campaignConfig{mode: m, faults: faults, write: write, both: both}
					if strings.Contains(c.String(), *campaignOnly) {
						cfgs = append(cfgs, c)
					}
				}
			}
		}
	}
	n := *campaignSize
	var transfers, slow, stalls, failed int
	var moved int64
	var spread []string
	var all []time.Duration
	campaignStart := time.Now()
	for _, cfg := range cfgs {
		var runs []campaignRun
		for rep := range *campaignReps {
			var r campaignRun
			t.Run(fmt.Sprintf("%s/%d", cfg, rep), func(t *testing.T) { r = runCampaignOnce(t, cfg, rep, n) })
			if r.pcap == nil { // the subtest failed before it could run
				failed++
				continue
			}
			runs = append(runs, r)
		}
		var els []time.Duration
		for _, r := range runs {
			if r.err == nil {
				els = append(els, r.elapsed)
			}
		}
		slices.Sort(els)
		var med time.Duration
		if len(els) > 0 {
			med = els[len(els)/2]
			spread = append(spread, fmt.Sprintf("%-36s n=%d min %v median %v max %v", cfg, len(els),
				els[0].Round(time.Millisecond), med.Round(time.Millisecond), els[len(els)-1].Round(time.Millisecond)))
			all = append(all, els...)
		}
		for _, r := range runs {
			transfers++
			moved += r.bytes
			bad := r.err != nil || r.stalled || (len(els) >= 3 && r.elapsed > 2*med)
			if r.err != nil {
				failed++
			}
			if r.stalled {
				stalls++
			}
			if !bad {
				continue
			}
			slow++
			base := filepath.Join(out, strings.ReplaceAll(fmt.Sprintf("%s-%d", cfg, r.rep), "/", "_"))
			if err := r.pcap.save(base + ".pcap"); err != nil {
				t.Error(err)
			}
			rep := fmt.Sprintf("config %s rep %d: %v (median %v) err %v stalled %v\n%s\n== timeline\n%s",
				cfg, r.rep, r.elapsed, med, r.err, r.stalled, r.diag, r.timeline)
			if err := os.WriteFile(base+".txt", []byte(rep), 0o644); err != nil {
				t.Error(err)
			}
			// A stop or a failure fails the campaign; a slow transfer
			// is kept and logged for study (on a shared machine the
			// scheduler alone can double a 50 ms transfer).
			report := t.Logf
			if r.err != nil || r.stalled {
				report = t.Errorf
			}
			report("SLOW or STALLED: %s rep %d took %v (median %v), err %v, watchdog %v; evidence in %s.{pcap,txt}",
				cfg, r.rep, r.elapsed.Round(time.Millisecond), med.Round(time.Millisecond), r.err, r.stalled, base)
		}
	}
	slices.Sort(all)
	t.Logf("campaign: %d configurations x %d repetitions = %d transfers, %d MiB moved in %v; %d slow (>2x median) or stalled, %d watchdog stalls, %d failed; evidence dir %s",
		len(cfgs), *campaignReps, transfers, moved>>20, time.Since(campaignStart).Round(time.Second), slow, stalls, failed, out)
	if len(all) > 0 {
		t.Logf("all transfers: min %v median %v max %v", all[0].Round(time.Millisecond), all[len(all)/2].Round(time.Millisecond), all[len(all)-1].Round(time.Millisecond))
	}
	for _, s := range spread {
		t.Log(s)
	}
}
