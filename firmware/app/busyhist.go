package app

import (
	"strconv"
	"sync"
	"time"
)

// busyHist is the distribution of the guest's busy time per answer of an
// echo service: for each request answered, the CPU time the firmware
// spent, not idle, since the same connection's (UDP: the service's)
// previous answer. With one request outstanding that is everything one
// transaction cost (the interrupt, the receive path, the service, the
// send and its completion), and an upper bound on the time from the
// request's arrival to the answer when nothing waits in between. Under
// QEMU's -icount shift=0 a nanosecond is an instruction. The request/
// response benchmark (tamanic-bench -rr) reads it from /stats and diffs
// two readings for the percentiles of its run.
type busyHist struct {
	mu     sync.Mutex
	counts [busyBuckets]uint32
	over   uint32
}

// busyBuckets of busyBucketNs each: 1 µs buckets up to 4 ms (16 KiB);
// longer samples count in over.
const (
	busyBucketNs = 1000
	busyBuckets  = 4096
)

// BusyHistStats is a busyHist in /stats: Counts maps a bucket's lower
// bound in microseconds (decimal) to its count, omitting empty buckets;
// Over counts the samples of busyBuckets µs or more.
type BusyHistStats struct {
	BucketNs int               `json:"bucket_ns"`
	Counts   map[string]uint32 `json:"counts,omitempty"`
	Over     uint32            `json:"over,omitempty"`
}

func (h *busyHist) add(ns int64) {
	b := ns / busyBucketNs
	h.mu.Lock()
	switch {
	case ns < 0:
		// A clock read out of order: not a sample.
	case b >= busyBuckets:
		h.over++
	default:
		h.counts[b]++
	}
	h.mu.Unlock()
}

// stats returns the histogram; with counts false only its bucket width
// and Over (GET /stats without the control token: the counts take up to
// 4,096 map entries, about 140 KiB of JSON, which any peer could make a
// board render again and again; a review found it). The counts are
// copied under the lock and rendered outside it, so a reading does not
// hold up the echo's answers.
func (h *busyHist) stats(counts bool) BusyHistStats {
	st := BusyHistStats{BucketNs: busyBucketNs}
	h.mu.Lock()
	st.Over = h.over
	var c [busyBuckets]uint32
	if counts {
		c = h.counts
	}
	h.mu.Unlock()
	if !counts {
		return st
	}
	for i, n := range c {
		if n == 0 {
			continue
		}
		if st.Counts == nil {
			st.Counts = map[string]uint32{}
		}
		st.Counts[strconv.Itoa(i)] = n
	}
	return st
}

// busyRecorder records one connection's (or the UDP service's) answers
// into a busyHist.
type busyRecorder struct {
	h    *busyHist
	busy func() int64
	prev int64
	seen bool
}

// recorder returns a recorder for h on ctl's idle time and boot-relative
// clock; nil ctl (tests without controls) records nothing.
func (h *busyHist) recorder(ctl Controls) *busyRecorder {
	if ctl == nil {
		return &busyRecorder{}
	}
	boot := time.Now()
	return &busyRecorder{h: h, busy: func() int64 { return int64(time.Since(boot)) - ctl.IdleNanoseconds() }}
}

// answered records the busy time since the previous answer (the first
// answer only sets the mark: what came before it was the connection's
// set-up, or nothing of this service).
func (r *busyRecorder) answered() {
	if r.h == nil {
		return
	}
	b := r.busy()
	if r.seen {
		r.h.add(b - r.prev)
	}
	r.prev, r.seen = b, true
}
