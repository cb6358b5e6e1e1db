package connectx

import (
	"errors"
	"fmt"
	"time"

	"github.com/tamanic/tamanic/internal/loopframe"
	"github.com/tamanic/tamanic/internal/pkt"
	"github.com/tamanic/tamanic/tso"
)

// The loopback self-test (issue 29), the ConnectX's counterpart of the
// ENET's and the 82574L's. The ConnectX has no MAC or PHY loopback the
// PRM lets a NIC vport driver set; what it has is the vport's local
// loopback, the one Linux's `ethtool -t` uses (en_selftest.c
// mlx5e_test_loopback): a unicast frame sent to the vport's own address
// comes back to its receive path when the NIC vport context's
// disable_uc_local_lb is clear (vport.c mlx5_nic_vport_update_local_lb),
// and the TIR, in the same transport domain as the sending TIS, lets that
// self loopback through when its self_lb_block unicast bit is set
// (en_common.c mlx5e_refresh_tirs(priv, true, false); the bit's meaning is
// "allowed", whatever its name: connectxtest/loopback.go lists the
// sources). Both are set for the test and restored after, as Linux does.
//
// The frames go through the whole data path: send WQEs with an inline
// header and data segments mapped in place from every word offset
// (a stale cache line shows as a byte that differs at its offset, a lost
// data segment as a short frame), checksum insertion requested through
// the eth segment's cs_flags, one 64 KiB packet segmented by the card's
// LSO, receive buffers, the CQE checksum verdicts (checked against a
// software sum) and the driver's counters. The loop is inside the card,
// before the port: it says nothing of the cable or the PHY, and whether
// silicon loops with the link down is UNCONFIRMED.
//
// Differences from Linux: Linux turns the multicast loopback on too and
// sends one 60-byte frame; the driver turns on unicast only (its frames
// are unicast, and a multicast loopback left on would loop the stack's
// broadcasts back to it) and sends the frame set of package loopframe.
// Linux's cleanup (mlx5e_test_loopback_cleanup) turns the vport's local
// loopback off first and refreshes the TIRs after; the driver undoes in
// the reverse order of its set-up, the TIR first (a frame still in the
// card is then dropped by the TIR rather than sent to the wire). Like
// Linux (main.c mlx5_core_set_hca_defaults, "Disable local_lb by
// default") the driver's bring-up turns the vport's local loopback off
// where the firmware lets it (vport in bringup.go); the self-test still
// restores what it found.

// SelfTestOptions tune SelfTest.
type SelfTestOptions struct {
	// Timeout bounds each wait of a mode: for send queue room, for its
	// frames to come back, for its sends to complete (default 200 ms,
	// Linux's MLX5E_LB_VERIFY_TIMEOUT).
	Timeout time.Duration
	// Sleep waits between polls (default time.Sleep).
	Sleep func(time.Duration)
}

// SelfTestResult is one TX mode's loopback.
type SelfTestResult struct {
	// Mode is "sg" (UDP frames of 60 to 1,514 bytes, those the MTU
	// takes, in up to three fragments from word offsets 0 to 3, checksums
	// inserted by the card, and two frames with a wrong UDP checksum sent
	// as they are) or "lso" (one TCP packet of up to 64 KiB segmented by
	// the card at an MSS of 1,448; unsupported below MTU 1,488).
	Mode string `json:"mode"`
	// Sent and Returned count frames (segments for lso); Failures the
	// checks that failed; First describes the first.
	Sent     int    `json:"sent"`
	Returned int    `json:"returned"`
	Failures int    `json:"failures"`
	First    string `json:"first,omitempty"`
	// Foreign counts frames received that the test did not send.
	Foreign int `json:"foreign,omitempty"`
	// Unsupported: the card cannot do what the mode checks (no LSO, or
	// a vport local loopback the firmware does not let the driver turn
	// on), so nothing was checked; Reason says why. Neither a pass nor a
	// failure.
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
// "mode=sg frames=19 FAIL returned=18 failures=2 first=... 201.0ms" or
// "mode=lso unsupported: ...".
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
// (Stats).
type SelfTestCounts struct {
	TxPackets uint64 `json:"tx_packets"`
	TxLSO     uint64 `json:"tx_lso"`
	RxPackets uint64 `json:"rx_packets"`
	RxBytes   uint64 `json:"rx_bytes"`
	RxErrors  uint64 `json:"rx_errors"`
	TxErrors  uint64 `json:"tx_errors"`
}

// SelfTest runs the loopback self-test: the vport's local loopback and
// the TIR's self loopback are turned on, each mode's frames are sent and
// checked, and both are restored, whatever happened. Nothing else may
// receive from or poll the NIC meanwhile (run it before the stack's
// endpoint exists); completions of the test's sends reach the SetTxDone
// callback with a nil cookie. An error means the test could not run, or
// the loopback could not be restored; failures are in the results.
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
	c := SelfTestCounts{TxPackets: s1.TxPackets - s0.TxPackets, TxLSO: s1.TxLSO - s0.TxLSO,
		RxPackets: s1.RxPackets - s0.RxPackets, RxBytes: s1.RxBytes - s0.RxBytes,
		RxErrors: s1.RxErrors - s0.RxErrors, TxErrors: s1.TxErrors - s0.TxErrors}
	return res, c, err
}

func (n *NIC) selfTest(o SelfTestOptions) (out []SelfTestResult, err error) {
	if o.Timeout <= 0 {
		o.Timeout = 200 * time.Millisecond
	}
	if o.Sleep == nil {
		o.Sleep = time.Sleep
	}
	if e := n.Err(); e != nil {
		return nil, fmt.Errorf("connectx: self-test: %w", e)
	}
	// A mode keeps no more frames out than the card has receive buffers
	// posted, less two (selfTestMode); with fewer than four (the stack
	// holds the rest at run time) nothing can be checked: the test
	// cannot run, which is no verdict on the card.
	if p := n.rxPosted(); p < 4 {
		return nil, fmt.Errorf("connectx: self-test: only %d receive buffers posted (the rest held by the stack)", p)
	}
	restore, reason, err := n.setLoopback()
	if err != nil {
		return nil, fmt.Errorf("connectx: self-test: %w", err)
	}
	if reason != "" {
		for _, m := range []string{"sg", "lso"} {
			out = append(out, SelfTestResult{Mode: m, Unsupported: true, Reason: reason})
		}
		return out, nil
	}
	defer func() {
		// Never left on: the stack would receive its own unicast
		// frames, and the TIR would keep the test's setting.
		if rerr := restore(); rerr != nil {
			err = errors.Join(err, fmt.Errorf("connectx: self-test: restoring the loopback: %w", rerr))
		}
	}()
	for _, mode := range []string{"sg", "lso"} {
		// A mode whose sends the card still holds after its waits failed
		// (a stuck send queue): the next mode would only queue more frames
		// behind them, to leave for the wire whenever the card lets them
		// go, loopback or not. It is reported as a failure, not run.
		if k := n.txInFlight(); len(out) > 0 && k > 0 {
			out = append(out, SelfTestResult{Mode: mode, Failures: 1,
				First: fmt.Sprintf("not run: %d send WQEBBs of mode %s still not completed", k, out[len(out)-1].Mode)})
			continue
		}
		out = append(out, n.selfTestMode(mode, o))
	}
	return out, nil
}

// Bits the loopback writes (mlx5_ifc.h; connectxtest/loopback.go has the
// sources).
const (
	capLocalLBUC      = 1 << 30 // cmd_hca_cap 0x7C: disable_local_lb_uc
	capLocalLBMC      = 1 << 29 // cmd_hca_cap 0x7C: disable_local_lb_mc
	vportDisableUCLB  = 1 << 1  // nic_vport_context dword 0
	vportDisableMCLB  = 1 << 2  // nic_vport_context dword 0
	fieldDisableUCLB  = 1 << 11 // modify_nic_vport_field_select
	fieldDisableMCLB  = 1 << 10 // modify_nic_vport_field_select
	OpModifyTIR       = 0x901
	modifyTIRSelfLBEn = 1 << 4 // modify_tir_in modify_bitmask, dword 0x14
	tirSelfLBUnicast  = 1      // tirc self_lb_block bit 0 (MLX5_TIRC_SELF_LB_BLOCK_BLOCK_UNICAST)
)

// vportUCLoopDisabled reads disable_uc_local_lb (Linux
// mlx5_nic_vport_query_local_lb).
func (n *NIC) vportUCLoopDisabled() (bool, error) {
	out, err := n.execLocked(newIn(OpQueryNICVportContext, 0, 0x10), 0x110)
	if err != nil {
		return false, fmt.Errorf("QUERY_NIC_VPORT_CONTEXT: %w", err)
	}
	return be32(out, 0x10)&vportDisableUCLB != 0, nil
}

// setVportUCLoop writes disable_uc_local_lb (Linux
// mlx5_nic_vport_update_local_lb, unicast only) and reads it back.
func (n *NIC) setVportUCLoop(on bool) error {
	in := newIn(OpModifyNICVportCtx, 0, 0x200)
	put32(in, 0x0C, fieldDisableUCLB)
	if !on {
		put32(in, 0x100, vportDisableUCLB)
	}
	if _, err := n.execLocked(in, 0x10); err != nil {
		return fmt.Errorf("MODIFY_NIC_VPORT_CONTEXT disable_uc_local_lb: %w", err)
	}
	dis, err := n.vportUCLoopDisabled()
	if err != nil {
		return err
	}
	if dis == on {
		return fmt.Errorf("disable_uc_local_lb reads %v after writing %v", dis, !on)
	}
	return nil
}

// setTIRSelfLB writes the TIR's self_lb_block (MODIFY_TIR, bitmask
// self_lb_en; Linux mlx5e_refresh_tirs).
func (n *NIC) setTIRSelfLB(bits uint32) error {
	in := newIn(OpModifyTIR, 0, 0x110)
	put32(in, 0x08, n.obj.tir)
	put32(in, 0x14, modifyTIRSelfLBEn)
	Field{0x20 + 0x24, 25, 24}.Set(in, bits)
	if _, err := n.execLocked(in, 0x10); err != nil {
		return fmt.Errorf("MODIFY_TIR self_lb_block %d: %w", bits, err)
	}
	return nil
}

// execLocked runs a command with the NIC's lock held (the data path's
// commands, RQ recovery among them, take it too).
func (n *NIC) execLocked(in []byte, outLen int) ([]byte, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil, ErrClosed
	}
	if n.failed != nil {
		return nil, n.failed
	}
	return n.exec(in, outLen)
}

// setLoopback turns the loopback on and returns what restores it, or
// the reason the card cannot loop (nothing changed then).
func (n *NIC) setLoopback() (restore func() error, unsupported string, err error) {
	dis, err := n.vportUCLoopDisabled()
	if err != nil {
		return nil, "", err
	}
	if dis && !n.caps.LocalLBUC {
		return nil, "the vport's unicast local loopback is off (disable_uc_local_lb) and the firmware does not let it be changed (no disable_local_lb_uc cap)", nil
	}
	if dis {
		if err := n.setVportUCLoop(true); err != nil {
			return nil, "", err
		}
	}
	undoVport := func() error {
		if !dis {
			return nil
		}
		return n.setVportUCLoop(false)
	}
	if err := n.setTIRSelfLB(tirSelfLBUnicast); err != nil {
		return nil, "", errors.Join(err, undoVport())
	}
	return func() error { return errors.Join(n.setTIRSelfLB(0), undoVport()) }, "", nil
}

// rxPosted counts the receive buffers the card holds.
func (n *NIC) rxPosted() uint32 {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.rq.pc - n.rq.cc
}

// txInFlight counts the send WQEBBs the card has not completed.
func (n *NIC) txInFlight() uint32 {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.sq.pc - n.sq.cc
}

// stCheck is a mode's sending (which calls pace after each frame it
// queued, with the count so far), its check of each frame that comes
// back (i counts them) and its end.
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
	// Whatever waits in the RX ring is not this mode's; it is foreign,
	// and counted in the RxPackets the check below expects, so the
	// counters are read first.
	s0 := n.Stats()
	res.Foreign += n.drainRx()
	// The receive buffers the card holds now: the stack may keep some
	// frames across a run-time test, and a frame that finds no buffer
	// is dropped by the card. The sender never has more frames out than
	// that, less two.
	room := int(n.rxPosted()) - 2
	if room < 2 {
		fail("only %d receive buffers posted (the rest held by the stack)", room+2)
		res.Elapsed = time.Since(start)
		return res
	}
	var c stCheck
	if mode == "lso" {
		if n.caps.MaxLSO < 2*loopframe.MSS+54 {
			res.Unsupported, res.Reason = true, fmt.Sprintf("the card's LSO takes %d bytes (max_lso_cap)", n.caps.MaxLSO)
			return res
		}
		if n.cfg.MTU < loopframe.MSS+40 {
			// The segments (MSS 1,448 + 40 bytes of TCP/IPv4 headers)
			// would not fit the MTU: the driver refuses them.
			res.Unsupported, res.Reason = true, fmt.Sprintf("the test's %d-byte segments exceed MTU %d", loopframe.MSS+40, n.cfg.MTU)
			return res
		}
		c = n.selfTestLSO(&res, fail, o, room)
	} else {
		c = n.selfTestFrames(&res, fail, o)
	}
	got := 0
	take := func() bool {
		n.Poll()
		fr, err := n.Receive()
		if err != nil {
			fail("receive: %v", err)
			return true
		}
		if fr == nil {
			return false
		}
		f := fr.(*Frame)
		if !loopframe.Is(f.Bytes(), n.mac) {
			res.Foreign++
		} else {
			c.frame(got, f)
			got++
		}
		if err := f.Release(); err != nil {
			fail("release: %v", err)
		}
		return true
	}
	deadline := time.Now().Add(o.Timeout)
	c.send(func(sent int) {
		for sent-got >= room && time.Now().Before(deadline) {
			if !take() {
				o.Sleep(50 * time.Microsecond)
			}
		}
	}, deadline)
	deadline = time.Now().Add(o.Timeout)
	for got < res.Sent && time.Now().Before(deadline) {
		if !take() {
			o.Sleep(50 * time.Microsecond)
		}
	}
	res.Returned = got
	// Every send completes before the mode ends: a WQE the card still
	// holds may still send once the loopback is off.
	for n.txInFlight() > 0 && time.Now().Before(deadline.Add(o.Timeout)) {
		n.Poll()
		o.Sleep(50 * time.Microsecond)
	}
	if k := n.txInFlight(); k > 0 {
		fail("TX: %d WQEBBs never completed within %v", k, o.Timeout)
	}
	c.finish()
	if got < res.Sent {
		link := ""
		if !n.Link() {
			link = " (the port's link is down: whether the card loops without it is UNCONFIRMED)"
		}
		fail("%d of %d frames came back within %v%s", got, res.Sent, o.Timeout, link)
	}
	// The driver's counters: every WQE posted and completed without an
	// error, every frame received once, no receive error.
	s1 := n.Stats()
	wqes := uint64(res.Sent)
	if mode == "lso" {
		wqes = 1
	}
	for _, k := range []struct {
		name      string
		got, want uint64
	}{{"TxPackets", s1.TxPackets - s0.TxPackets, wqes}, {"TxErrors", s1.TxErrors - s0.TxErrors, 0},
		{"RxPackets", s1.RxPackets - s0.RxPackets, uint64(got + res.Foreign)}, {"RxErrors", s1.RxErrors - s0.RxErrors, 0}} {
		if k.got != k.want {
			fail("driver counter %s counted %d, want %d", k.name, k.got, k.want)
		}
	}
	res.Foreign += n.drainRx()
	res.Elapsed = time.Since(start)
	return res
}

// stSend posts one send, waiting (polling) while the SQ is full until
// until.
func (n *NIC) stSend(o SelfTestOptions, until time.Time, send func() error) error {
	for {
		err := send()
		if !errors.Is(err, ErrRingFull) || time.Now().After(until) {
			return err
		}
		n.Poll()
		o.Sleep(50 * time.Microsecond)
	}
}

// selfTestFrames sends the frames of loopframe.Set to the vport's own
// address, in up to three fragments from word offsets 0 to 3, with
// checksum insertion; then two frames with a wrong UDP checksum without
// it, which must come back unchanged and unclaimed. Frames longer than an
// untagged frame of the MTU (MTU+14) are left out: the driver refuses
// them (an MTU below 1,500).
func (n *NIC) selfTestFrames(res *SelfTestResult, fail func(string, ...any), o SelfTestOptions) stCheck {
	frames := loopframe.Set(n.mac)
	ret := loopframe.NewReturns(frames)
	sent, back := make([]bool, len(frames)), make([]bool, len(frames))
	tries := 0
	send := func(pace func(int), until time.Time) {
		for i, f := range frames {
			if len(f.Want) > n.cfg.MTU+14 {
				continue
			}
			tries++
			// With checksum offload the card must insert them: the
			// IPv4 header and UDP checksum fields leave zero (gVisor
			// leaves a TCP checksum to the card likewise), so a card
			// that ignores cs_flags returns frames that differ from
			// Want. Without it the frames go as they are.
			csum := n.caps.CsumCap && !f.Bad
			if csum {
				zeroAt(f.Frags, 14+10, 2)
				zeroAt(f.Frags, 34+6, 2)
			}
			if err := n.stSend(o, until, func() error { return n.Transmit(f.Frags, csum, nil) }); err != nil {
				fail("transmit frame %d (%d bytes): %v", i, len(f.Want), err)
				continue
			}
			sent[i] = true
			res.Sent++
			pace(res.Sent)
		}
	}
	frame := func(_ int, f *Frame) {
		_, l4 := f.Verified()
		id, bad := ret.Frame(f.Bytes(), l4)
		if id >= 0 {
			back[id] = true
		}
		if bad != "" {
			fail("%s", bad)
			return
		}
		n.checkVerdict(f, fail, fmt.Sprintf("frame %d", id))
	}
	finish := func() {
		if res.Sent != tries {
			return // the transmit failures are named
		}
		for id, f := range frames {
			if sent[id] && !back[id] {
				fail("frame %d (%d bytes, fragments%s) did not come back", id, len(f.Want), f.Desc)
				return
			}
		}
	}
	return stCheck{send, frame, finish}
}

// checkVerdict compares the card's verdicts (CQE L3_OK, L4_OK) for f
// with a software sum: a verdict may claim only what the sum confirms,
// and with checksum offload (CsumCap) a good IPv4 header and TCP or UDP
// checksum must be claimed.
func (n *NIC) checkVerdict(f *Frame, fail func(string, ...any), what string) {
	b := f.Bytes()
	h, err := pkt.Parse(b)
	if err != nil {
		fail("%s: %v", what, err)
		return
	}
	ip4, l4 := f.Verified()
	ipOK := pkt.IPv4HeaderOK(b, &h)
	l4OK, checked := pkt.TransportOK(b, &h)
	switch {
	case ip4 && !ipOK, l4 && !(l4OK && checked):
		fail("%s: checksum claimed verified (ip %v l4 %v), software sum says ip %v l4 %v", what, ip4, l4, ipOK, l4OK)
	case n.caps.CsumCap && (!h.IPv6 && ipOK && !ip4 || checked && l4OK && !l4):
		fail("%s: good checksums not claimed verified (ip %v l4 %v)", what, ip4, l4)
	}
}

// selfTestLSO sends one TCP packet of up to 64 KiB (what max_lso_cap
// and room, the receive buffers, take) for the card to segment, and
// checks every segment's headers and checksums and, together, the
// payload.
func (n *NIC) selfTestLSO(res *SelfTestResult, fail func(string, ...any), o SelfTestOptions, room int) stCheck {
	size := min(0xffff-40, n.caps.MaxLSO-54, room*loopframe.MSS)
	t := loopframe.NewTSO(n.mac, size)
	send := func(_ func(int), until time.Time) {
		err := n.stSend(o, until, func() error {
			return n.TransmitGSO(t.Hdr, [][]byte{t.Payload}, tso.Options{Type: tso.TCP, MSS: loopframe.MSS}, nil)
		})
		if err != nil {
			fail("transmit a %d-byte LSO packet: %v", size, err)
			return
		}
		res.Sent = t.Segs
	}
	frame := func(i int, f *Frame) {
		bad, tcp := t.Segment(i, f.Bytes())
		for _, b := range bad {
			fail("%s", b)
		}
		if tcp {
			n.checkVerdict(f, fail, fmt.Sprintf("segment %d", i))
		}
	}
	finish := func() {
		if b := t.Finish(res.Failures > 0); b != "" {
			fail("%s", b)
		}
	}
	return stCheck{send, frame, finish}
}

// zeroAt zeroes the k bytes at offset off of the frame that frags make.
func zeroAt(frags [][]byte, off, k int) {
	for _, f := range frags {
		for ; k > 0 && off < len(f); off, k = off+1, k-1 {
			f[off] = 0
		}
		off -= len(f)
	}
}

// drainRx receives and releases whatever waits in the RX ring, and
// returns how many frames that was.
func (n *NIC) drainRx() int {
	k := 0
	for i := 0; i < 2*int(n.rq.size); i++ {
		n.Poll()
		f, err := n.Receive()
		if err == nil && f == nil {
			break
		}
		if f != nil {
			k++
			_ = f.Release()
		}
	}
	return k
}
