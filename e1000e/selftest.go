package e1000e

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/tamanic/tamanic/internal/loopframe"
	"github.com/tamanic/tamanic/internal/pkt"
	"github.com/tamanic/tamanic/tso"
)

// The loopback self-test (issue 29), the 82574L's counterpart of the
// ENET's (fec.NIC.SelfTest): before the stack uses the NIC, the MAC loops
// its own traffic back (SetLoopback) and every frame that comes back is
// compared byte for byte with what was sent. The TX path's own work is
// what it checks: fragments gathered from every word offset (a stale cache
// line shows as a byte that differs at its offset, a lost fragment as a
// short frame), checksums inserted through a context descriptor, one
// 64 KiB packet segmented by the controller, the RX checksum verdicts
// against a software sum, and the statistics registers against the frames
// sent. Linux's `ethtool -t` loopback test (ethtool.c e1000_loopback_test)
// sends 1 KiB frames from one buffer each and checks three bytes of them.

// SelfTestOptions tune SelfTest.
type SelfTestOptions struct {
	// Timeout bounds each wait of a mode: for TX descriptors to free up,
	// for its frames to come back (default 100 ms).
	Timeout time.Duration
	// Sleep waits between polls (default time.Sleep).
	Sleep func(time.Duration)
}

// SelfTestResult is one TX mode's loopback.
type SelfTestResult struct {
	// Mode is "sg" (UDP frames of 60 to 1,514 bytes in up to three
	// fragments starting at word offsets 0 to 3, checksums inserted by
	// the controller, and two frames with a wrong UDP checksum sent as
	// they are) or "tso" (one 64 KiB TCP packet segmented by the
	// controller at an MSS of 1,448).
	Mode string `json:"mode"`
	// Sent and Returned count frames (segments for tso); Failures the
	// checks that failed (a frame missing or different, a wrong checksum
	// verdict, a statistics register off); First describes the first.
	Sent     int    `json:"sent"`
	Returned int    `json:"returned"`
	Failures int    `json:"failures"`
	First    string `json:"first,omitempty"`
	// Resets counts adapter resets during the mode's last try (the
	// watchdog's): with any, the mode's result is not trusted.
	Resets int `json:"resets,omitempty"`
	// Foreign counts frames received that the test did not send.
	Foreign int `json:"foreign,omitempty"`
	// Unsupported: the device did not do what the mode checks, so
	// nothing was checked (Reason says what it did instead): TX
	// completed but no frame reached the receiver (no loopback), or the
	// 64 KiB packet came back as IP fragments rather than TCP segments
	// (QEMU before 8.0). Neither a pass nor a failure.
	Unsupported bool   `json:"unsupported,omitempty"`
	Reason      string `json:"reason,omitempty"`
	// Elapsed is the mode's time, sending to last check.
	Elapsed time.Duration `json:"elapsed_ns"`
}

// OK reports whether every frame came back as sent.
func (r SelfTestResult) OK() bool {
	return r.Failures == 0 && !r.Unsupported && r.Returned == r.Sent && r.Sent > 0
}

// String is the console line's body: "mode=sg frames=19 ok 1.2ms",
// "mode=sg frames=19 FAIL returned=18 failures=2 first=... 101.0ms" or
// "mode=tso unsupported: ...".
func (r SelfTestResult) String() string {
	ms := float64(r.Elapsed) / 1e6
	switch {
	case r.Unsupported:
		return fmt.Sprintf("mode=%s unsupported: %s %.1fms", r.Mode, r.Reason, ms)
	case r.OK():
		return fmt.Sprintf("mode=%s frames=%d ok %.1fms", r.Mode, r.Sent, ms)
	}
	return fmt.Sprintf("mode=%s frames=%d FAIL returned=%d failures=%d first=%q %.1fms",
		r.Mode, r.Sent, r.Returned, max(r.Failures, 1), r.First, ms)
}

// SelfTestCounts is what the self-test added to the driver's counters
// (Stats), so that a check that every frame the driver moved was the
// stack's can leave them out.
type SelfTestCounts struct {
	TxFrames     uint64 `json:"tx_frames"`
	TxGSOPackets uint64 `json:"tx_gso_packets"`
	TxGSOSegs    uint64 `json:"tx_gso_segs"`
	RxFrames     uint64 `json:"rx_frames"`
	RxBytes      uint64 `json:"rx_bytes"`
	RxCsumBad    uint64 `json:"rx_csum_bad"`
	RxErrors     uint64 `json:"rx_errors"`
}

// SelfTest runs the loopback self-test: the MAC is put in loopback, each
// mode's frames are sent and checked, and the loopback is taken off
// again, whatever happened. Nothing else may receive from the NIC
// meanwhile (run it before the stack's endpoint exists). An error means
// the test could not run; failures are in the results.
func (n *NIC) SelfTest(o SelfTestOptions) ([]SelfTestResult, error) {
	res, _, err := n.SelfTestCounted(o)
	return res, err
}

// SelfTestCounted is SelfTest that also returns what it added to the
// driver's counters.
func (n *NIC) SelfTestCounted(o SelfTestOptions) ([]SelfTestResult, SelfTestCounts, error) {
	s0 := n.Stats()
	res, err := n.selfTest(o)
	s1 := n.Stats()
	c := SelfTestCounts{TxFrames: s1.Tx.Frames - s0.Tx.Frames, TxGSOPackets: s1.Tx.GSOPackets - s0.Tx.GSOPackets,
		TxGSOSegs: s1.Tx.GSOSegs - s0.Tx.GSOSegs, RxFrames: s1.Rx.Frames - s0.Rx.Frames, RxBytes: s1.Rx.Bytes - s0.Rx.Bytes,
		RxCsumBad: s1.Rx.CsumBad - s0.Rx.CsumBad, RxErrors: s1.Rx.Errors - s0.Rx.Errors}
	return res, c, err
}

func (n *NIC) selfTest(o SelfTestOptions) (out []SelfTestResult, err error) {
	if o.Timeout <= 0 {
		o.Timeout = 100 * time.Millisecond
	}
	if o.Sleep == nil {
		o.Sleep = time.Sleep
	}
	if err := n.SetLoopback(true); err != nil {
		return nil, fmt.Errorf("e1000e: self-test: %w", err)
	}
	defer func() {
		// Never left in loopback: the stack's frames would never leave.
		if lerr := n.SetLoopback(false); lerr != nil {
			err = errors.Join(err, fmt.Errorf("e1000e: self-test: loopback off: %w", lerr))
		}
	}()
	for _, mode := range []string{"sg", "tso"} {
		// A Reset (the watchdog's) aborts the mode's frames: run it
		// again, up to twice more, and say so if it never ran
		// undisturbed.
		var res SelfTestResult
		for try := 0; try < 3; try++ {
			r0 := n.Stats().Resets
			res = n.selfTestMode(mode, o)
			if res.Resets = int(n.Stats().Resets - r0); res.Resets == 0 {
				break
			}
		}
		if n.TxInFlight() > 0 {
			// A transmitter that stalled holds the test's frames: reset
			// the adapter while still in loopback (which the reset keeps)
			// so that they never reach the wire once loopback is off, as
			// Linux's e1000_diag_test resets after its offline tests. The
			// mode has failed already (its descriptors never completed).
			if rerr := n.Reset(); rerr != nil {
				err = errors.Join(err, fmt.Errorf("e1000e: self-test: reset after a stalled mode: %w", rerr))
			}
		}
		if res.Resets > 0 && res.Failures == 0 {
			res.Failures, res.Unsupported, res.Reason = 1, false, ""
			res.First = fmt.Sprintf("the adapter was reset %d times during the mode, three tries", res.Resets)
		}
		out = append(out, res)
	}
	return out, nil
}

// stCheck is a mode's sending (which calls pace after each frame it
// queued, with the count so far, and waits for TX descriptors until
// until), its check of each frame that comes back (i counts them) and
// its end.
type stCheck struct {
	send   func(pace func(sent int), until time.Time)
	frame  func(i int, f *Frame)
	finish func()
}

func (n *NIC) selfTestMode(mode string, o SelfTestOptions) SelfTestResult {
	res := SelfTestResult{Mode: mode}
	fail := func(format string, a ...any) {
		if res.Failures == 0 {
			res.First = fmt.Sprintf(format, a...)
		}
		res.Failures++
	}
	start := time.Now()
	// Whatever is left in the rings is not this mode's.
	n.reclaim()
	n.drainRx()
	hw0 := n.HWStats()
	var c stCheck
	var frags *stFragments
	switch mode {
	case "tso":
		c, frags = n.selfTestGSO(&res, fail)
	default:
		c = n.selfTestFrames(&res, fail, o)
	}
	got := 0
	// take receives and checks one frame, and reports whether there was
	// one.
	take := func() bool {
		n.reclaim()
		f, err := n.Receive()
		if err != nil {
			fail("receive: %v", err)
			return true
		}
		if f == nil {
			return false
		}
		switch d := f.Bytes(); {
		case !loopframe.Is(d, n.mac):
			// Not the test's: from the wire (a MAC not looping back
			// receives it), ignored and counted.
			res.Foreign++
		case frags != nil && frags.take(d):
			// An IP fragment of the TSO packet (stFragments).
			got++
		default:
			c.frame(got, f)
			got++
		}
		f.Release()
		return true
	}
	// The frames come back faster than they could be taken: the sender
	// waits while the RX ring might be full.
	// One deadline for all the sending, one for what comes back after:
	// a mode takes at most twice the timeout.
	deadline := time.Now().Add(o.Timeout)
	c.send(func(sent int) {
		for sent-got > n.rx.n-2 && time.Now().Before(deadline) {
			if !take() {
				o.Sleep(50 * time.Microsecond)
			}
		}
	}, deadline)
	deadline = time.Now().Add(o.Timeout)
	lastLook := time.Now()
	for got < res.Sent && time.Now().Before(deadline) {
		if take() {
			continue
		}
		if got == 0 && time.Since(start) > 10*time.Millisecond && time.Since(lastLook) > time.Millisecond {
			// Nothing back after 10 ms: if TX is done and the receiver
			// saw nothing, no need to wait out the timeout.
			lastLook = time.Now()
			if n.TxInFlight() == 0 && n.HWStats().TotalRx == hw0.TotalRx {
				break
			}
		}
		o.Sleep(50 * time.Microsecond)
	}
	res.Returned = got
	n.reclaim()
	hw1 := n.HWStats()
	if stuck := n.TxInFlight(); stuck > 0 {
		// The controller never wrote these descriptors back: it sent
		// nothing. A failure, not "unsupported".
		fail("TX: %d descriptors never completed within %v (the transmitter sent nothing)", stuck, o.Timeout)
		n.drainRx()
		res.Elapsed = time.Since(start)
		return res
	}
	if got == 0 && res.Sent > 0 && n.TxInFlight() == 0 && hw1.TotalRx == hw0.TotalRx {
		// Every descriptor came back done, and no frame reached the
		// receiver (TPR did not move). The 82574L has its MAC loopback
		// (and QEMU 7.2's e1000e loops too), so this is a dead receiver
		// or a loopback that did not take: a failure, not "unsupported"
		// (a review found it read as unsupported).
		fail("no frame reached the receiver (%d sent, TX completed, TPR unchanged): the receiver or the MAC loopback does not work", res.Sent)
		n.drainRx()
		res.Elapsed = time.Since(start)
		return res
	}
	if frags != nil && frags.n > 0 {
		// The device sent IP fragments, not TCP segments.
		frags.finish(&res, fail, got)
		n.drainRx()
		res.Elapsed = time.Since(start)
		return res
	}
	c.finish()
	if got < res.Sent {
		fail("%d of %d frames came back within %v", got, res.Sent, o.Timeout)
	}
	// The statistics registers counted every frame out and in (82574
	// datasheet statistics: GPTC, GPRC, TPR; the controller counts each
	// TSO segment as a packet).
	for _, k := range []struct {
		name      string
		got, want uint64
	}{{"GPTC", hw1.GoodTx - hw0.GoodTx, uint64(res.Sent)}, {"GPRC", hw1.GoodRx - hw0.GoodRx, uint64(got)},
		{"TPR", hw1.TotalRx - hw0.TotalRx, uint64(got)}} {
		if k.got != k.want {
			fail("statistics register %s counted %d, want %d", k.name, k.got, k.want)
		}
	}
	n.drainRx()
	res.Elapsed = time.Since(start)
	return res
}

// selfTestFrames sends the UDP frames of loopframe.Set, each in up to
// three fragments starting at word offsets 0 to 3, with checksum
// insertion (the driver writes the checksum seeds into the first), then
// two frames with a wrong UDP checksum without it: they must come back
// unchanged and unclaimed (an RX checker that flags nothing would pass
// every good frame).
func (n *NIC) selfTestFrames(res *SelfTestResult, fail func(string, ...any), o SelfTestOptions) stCheck {
	frames := loopframe.Set(n.mac)
	send := func(pace func(int), until time.Time) {
		for i, f := range frames {
			if err := n.stTransmit(o, until, f.Frags, !f.Bad); err != nil {
				fail("transmit frame %d (%d bytes): %v", i, len(f.Want), err)
				continue
			}
			res.Sent++
			pace(res.Sent)
		}
	}
	ret := loopframe.NewReturns(frames)
	frame := func(_ int, fr *Frame) {
		got := fr.Bytes()
		id, bad := ret.Frame(got, fr.L4)
		if bad != "" {
			fail("%s", bad)
			return
		}
		checkVerdict(got, fr, fail, fmt.Sprintf("frame %d", id))
	}
	finish := func() {
		if m := ret.Missing(); m != "" && res.Sent == len(frames) {
			fail("%s", m)
		}
	}
	return stCheck{send, frame, finish}
}

// stTransmit sends frags, waiting while the ring is full until until.
func (n *NIC) stTransmit(o SelfTestOptions, until time.Time, frags [][]byte, csum bool) error {
	for {
		err := n.Transmit(frags, csum, nil)
		if !errors.Is(err, ErrRingFull) || time.Now().After(until) {
			return err
		}
		n.reclaim()
		o.Sleep(50 * time.Microsecond)
	}
}

// checkVerdict compares the controller's RX checksum verdicts for frame f
// with a software sum: a verdict may claim only what the sum confirms,
// and a good IPv4 header and TCP or UDP checksum must be claimed (RXCSUM
// IPOFL and TUOFL are on).
func checkVerdict(f []byte, fr *Frame, fail func(string, ...any), what string) {
	h, err := pkt.Parse(f)
	if err != nil {
		fail("%s: %v", what, err)
		return
	}
	ipOK := pkt.IPv4HeaderOK(f, &h)
	l4OK, checked := pkt.TransportOK(f, &h)
	switch {
	case fr.IPv4 && !ipOK, fr.L4 && !(l4OK && checked):
		fail("%s: checksum claimed verified (ip %v l4 %v), software sum says ip %v l4 %v", what, fr.IPv4, fr.L4, ipOK, l4OK)
	case !h.IPv6 && ipOK && !fr.IPv4, checked && l4OK && !fr.L4:
		fail("%s: good checksums not claimed verified (ip %v l4 %v)", what, fr.IPv4, fr.L4)
	}
}

// selfTestGSO sends one TCP packet of 64 KiB (or what the rings take)
// through TransmitGSO and checks that its segments come back with the
// headers the controller must write, valid checksums and, together, the
// payload.
func (n *NIC) selfTestGSO(res *SelfTestResult, fail func(string, ...any)) (stCheck, *stFragments) {
	// 64 KiB less the headers (an IPv4 datagram's length is 16 bits), or
	// what the TX ring takes (a context and a header descriptor, then
	// 8 KiB a data descriptor: TransmitGSO's budget), or what the RX ring
	// holds at once (the segments arrive faster than they are taken).
	size := min(0xffff-40, min(n.tx.n-3, MaxDataDescs-1)*MaxPerDesc, (n.rx.n-2)*loopframe.MSS)
	t := loopframe.NewTSO(n.mac, size)
	// The packet as one datagram, checksums computed in software: what
	// IP fragments of it must reassemble into.
	whole := append(append([]byte(nil), t.Hdr...), t.Payload...)
	fixTCP(whole)
	frags := &stFragments{whole: whole}
	send := func(func(int), time.Time) {
		if err := n.TransmitGSO(t.Hdr, [][]byte{t.Payload}, tso.Options{Type: tso.TCP, MSS: loopframe.MSS}, nil); err != nil {
			fail("transmit a %d-byte TSO packet: %v", size, err)
		} else {
			res.Sent = t.Segs
		}
	}
	frame := func(i int, fr *Frame) {
		// Every header byte as the controller writes it (82574
		// datasheet, TCP segmentation: IPv4 total length and ID per
		// segment, PSH and FIN only in the last): loopframe.TSO.Segment.
		f := fr.Bytes()
		bad, tcp := t.Segment(i, f)
		for _, b := range bad {
			fail("%s", b)
		}
		if tcp {
			checkVerdict(f, fr, fail, fmt.Sprintf("segment %d", i))
		}
	}
	finish := func() {
		if b := t.Finish(res.Failures > 0); b != "" {
			fail("%s", b)
		}
	}
	return stCheck{send, frame, finish}, frags
}

// stFragments collects what comes back of the TSO packet as IPv4
// fragments instead of TCP segments: QEMU's e1000e before 8.0 "segments"
// a TSO packet, when its network backend takes no virtio-net header, by
// IP fragmentation (hw/net/net_tx_pkt.c net_tx_pkt_do_sw_fragmentation:
// eth_setup_ip4_fragmentation per gso_size piece of the datagram, the TCP
// header only in the first), which the silicon never does.
type stFragments struct {
	whole []byte // the datagram, checksums computed in software
	n     int    // fragments taken
	data  []byte // the reassembled IP payload
	have  []bool // its 8-byte units received
	last  bool   // the fragment without MF came
	bad   string // the first fragment found wrong
}

// take keeps frame f if it is an IPv4 fragment of the TSO packet.
func (s *stFragments) take(f []byte) bool {
	if len(f) < 34 || binary.BigEndian.Uint16(f[12:]) != pkt.EtherTypeIPv4 || f[23] != pkt.ProtoTCP ||
		binary.BigEndian.Uint16(f[20:])&0x3FFF == 0 {
		return false
	}
	s.n++
	if s.data == nil {
		s.data = make([]byte, len(s.whole)-34)
		s.have = make([]bool, (len(s.data)+7)/8)
	}
	ihl := int(f[14]&0xF) * 4
	tot := int(binary.BigEndian.Uint16(f[16:]))
	off := int(binary.BigEndian.Uint16(f[20:])&0x1FFF) * 8
	mf := f[20]&0x20 != 0
	h := pkt.Headers{L3: 14, L4: 14 + ihl}
	switch {
	case s.bad != "":
	case ihl != 20 || 14+tot != len(f) || tot < ihl:
		s.bad = fmt.Sprintf("fragment %d: IPv4 header length %d, total %d in a %d-byte frame", s.n-1, ihl, tot, len(f))
	case binary.BigEndian.Uint16(f[18:]) != loopframe.ID0 || !bytes.Equal(f[:14], s.whole[:14]) || !bytes.Equal(f[26:34], s.whole[26:34]):
		s.bad = fmt.Sprintf("fragment %d: headers % x", s.n-1, f[:34])
	case !pkt.IPv4HeaderOK(f, &h):
		s.bad = fmt.Sprintf("fragment %d: IPv4 header checksum wrong", s.n-1)
	case off+tot-ihl > len(s.data) || (mf && (tot-ihl)%8 != 0):
		s.bad = fmt.Sprintf("fragment %d: offset %d, %d bytes, past the %d-byte datagram", s.n-1, off, tot-ihl, len(s.data))
	default:
		copy(s.data[off:], f[34:])
		for u := off / 8; u < (off+tot-ihl+7)/8; u++ {
			s.have[u] = true
		}
		if !mf {
			s.last = true
		}
	}
	return true
}

// finish judges the fragments: reassembled exactly into the packet sent,
// the mode is unsupported (the segmentation was not checked, the gather
// of its bytes was); anything else is a failure.
func (s *stFragments) finish(res *SelfTestResult, fail func(string, ...any), got int) {
	missing := 0
	for _, h := range s.have {
		if !h {
			missing++
		}
	}
	switch {
	case s.bad != "":
		fail("%s", s.bad)
	case got != s.n:
		fail("%d TCP segments and %d IP fragments of the TSO packet came back", got-s.n, s.n)
	case missing > 0 || !s.last:
		fail("%d IP fragments of the TSO packet came back, %d bytes of it missing", s.n, 8*missing)
	default:
		if k := loopframe.FirstDiff(s.data, s.whole[34:]); k >= 0 {
			fail("TSO packet reassembled from %d IP fragments: byte %d of the IP payload is %#02x, sent %#02x", s.n, k, s.data[k], s.whole[34+k])
			return
		}
		res.Unsupported, res.Returned = true, got
		res.Reason = fmt.Sprintf("segmentation not checked: the %d-byte datagram came back as %d IPv4 fragments, not TCP segments (QEMU before 8.0 emulates TSO so); their bytes and checksums match what was sent",
			len(s.whole)-14, s.n)
	}
}

// fixTCP writes the IPv4 header and TCP checksums of the one-datagram
// TCP/IPv4 frame f.
func fixTCP(f []byte) {
	ip := f[14:34]
	binary.BigEndian.PutUint16(ip[10:], 0)
	binary.BigEndian.PutUint16(ip[10:], ^pkt.Fold(pkt.Sum(0, ip)))
	tcp := f[34:]
	binary.BigEndian.PutUint16(tcp[16:], 0)
	binary.BigEndian.PutUint16(tcp[16:], ^pkt.Fold(pkt.Sum(pkt.PseudoSum(ip, false, pkt.ProtoTCP, len(tcp)), tcp)))
}

// drainRx receives and releases whatever is in the RX ring.
func (n *NIC) drainRx() {
	for k := 0; k < 2*n.rx.n; k++ {
		f, err := n.Receive()
		if err == nil && f == nil {
			return
		}
		if f != nil {
			f.Release()
		}
	}
}
