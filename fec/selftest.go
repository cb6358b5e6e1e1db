package fec

import (
	"errors"
	"fmt"
	"time"

	"github.com/tamanic/tamanic/bounce"
	"github.com/tamanic/tamanic/internal/loopframe"
	"github.com/tamanic/tamanic/internal/pkt"
	"github.com/tamanic/tamanic/tso"
)

// The loopback self-test (issue 29): before the stack uses the NIC, the MAC
// loops its own traffic back (RCR LOOP, SetLoopback) and every frame that
// comes back is compared byte for byte with what was sent, in each TX
// placement: a stale cache line shows as a difference at its offset, a lost
// fragment as a short frame, a wrong RX checksum verdict against a software
// sum, and the MIB counters against the frames sent. It is what Linux's
// `ethtool -t` loopback tests do for the e1000e (e1000_loopback_test); the
// ENET's Linux driver has none.

// SetLoopback puts the MAC in its internal loopback or takes it out, by a
// restart (as SetLink): RCR LOOP with MII_MODE set and RMII_MODE, RGMII_EN,
// RMII_10T and DRT clear (IMX6ULLRM 22.5.10: LOOP is an MII internal
// loopback). Frames in flight complete with ErrAborted. In loopback nothing
// is sent on the wire and nothing from the wire is received.
func (n *NIC) SetLoopback(on bool) error {
	n.ctl.Lock()
	defer n.unlockCtl()
	n.loop = on
	err := n.restartLocked()
	if err != nil && on {
		// Not left armed: the next restart (a link change) must bring
		// the MAC back to the wire (a review found it stuck in loopback
		// after a failed self-test).
		n.loop = false
	}
	return err
}

// Loopback is where the self-test's frames turn back.
type Loopback int

const (
	// LoopAuto is the PHY's loopback when the driver has taken a PHY
	// (StartLink, FindPHY), else the MAC's.
	LoopAuto Loopback = iota
	// LoopMAC is the MAC's internal loopback (RCR LOOP, SetLoopback).
	// It is an MII loopback: on an RMII or RGMII board the MAC runs its
	// MII interface meanwhile, whose clocks such a board may not give
	// it (not verified on silicon).
	LoopMAC
	// LoopPHY is the PHY's loopback (BMCR bit 14, IEEE 802.3
	// 22.2.4.1.2): the MAC keeps its interface, speed and the board's
	// clocks, and the PHY turns the frames back before the medium, as
	// Linux's genphy_loopback does for ethtool's self-test (loopback at
	// the link's speed and duplex, autonegotiation off, BMSR link status
	// awaited; on the way out loopback cleared and autonegotiation
	// restarted).
	LoopPHY
)

func (l Loopback) String() string {
	switch l {
	case LoopMAC:
		return "mac"
	case LoopPHY:
		return "phy"
	}
	return "auto"
}

// SelfTestOptions tune SelfTest. The zero value tests bounce, sg and tso
// in the PHY's loopback, or the MAC's where the driver has no PHY.
type SelfTestOptions struct {
	// Loopback chooses the loopback (default LoopAuto).
	Loopback Loopback
	// Timeout bounds the wait for each mode's frames to come back
	// (default 100 ms: the longest mode moves under 100 KB).
	Timeout time.Duration
	// Sleep waits between polls (default time.Sleep).
	Sleep func(time.Duration)
}

// SelfTestResult is one TX mode's loopback.
type SelfTestResult struct {
	// Mode is "bounce" or "sg" (frames of 60 to 1,514 bytes in fragments
	// starting at every offset of a word) or "tso" (one 64 KiB TCP packet
	// through the segmenter, or as much as the ring takes).
	Mode string `json:"mode"`
	// Loopback is where the frames turned back: "mac" or "phy".
	Loopback string `json:"loopback"`
	// Sent and Returned count frames; Failures the checks that failed
	// (a frame missing, different, or with a wrong checksum verdict, a MIB
	// counter off); First describes the first failure.
	Sent     int    `json:"sent"`
	Returned int    `json:"returned"`
	Failures int    `json:"failures"`
	First    string `json:"first,omitempty"`
	// Restarts counts MAC restarts during the mode's last try (a link
	// change); with any, the mode's result is not trusted.
	Restarts int `json:"restarts,omitempty"`
	// Foreign counts frames received that the test did not send (from
	// the wire: a MAC in loopback receives none).
	Foreign int `json:"foreign,omitempty"`
	// Unsupported: nothing came back and the MAC counted nothing sent
	// (no loopback and no MIB: QEMU). Neither a pass nor a failure.
	Unsupported bool `json:"unsupported,omitempty"`
	// Elapsed is the mode's time, sending to last check.
	Elapsed time.Duration `json:"elapsed_ns"`
}

// OK reports whether every frame came back as sent.
func (r SelfTestResult) OK() bool { return r.Failures == 0 && r.Returned == r.Sent && r.Sent > 0 }

// String is the console line's body: "mode=sg frames=17 ok 3.1ms", or the
// failures and the first of them.
func (r SelfTestResult) String() string {
	if r.Unsupported {
		return fmt.Sprintf("mode=%s loopback unsupported here (nothing came back, no frame counted sent) loop=%s", r.Mode, r.Loopback)
	}
	if r.OK() {
		return fmt.Sprintf("mode=%s frames=%d ok %.1fms loop=%s", r.Mode, r.Sent, float64(r.Elapsed)/1e6, r.Loopback)
	}
	return fmt.Sprintf("mode=%s frames=%d returned=%d failures=%d first=%q %.1fms loop=%s",
		r.Mode, r.Sent, r.Returned, r.Failures, r.First, float64(r.Elapsed)/1e6, r.Loopback)
}

// SelfTest runs the loopback self-test: the NIC is put in loopback, each
// mode's frames are sent and checked, the NIC's strategy and loopback are
// restored. The stack must not be receiving from the NIC meanwhile (run it
// before the endpoint is attached). An error means the test could not run
// (a restart failed); failures are in the results.
func (n *NIC) SelfTest(o SelfTestOptions) ([]SelfTestResult, error) {
	res, _, err := n.SelfTestCounted(o)
	return res, err
}

// SelfTestCounts is what the self-test added to the driver's counters
// (Stats), so that a check that every frame the driver sent came from
// the stack can leave them out.
type SelfTestCounts struct {
	TxFrames      uint64 `json:"tx_frames"`
	TxGSOPackets  uint64 `json:"tx_gso_packets"`
	TxGSOSegments uint64 `json:"tx_gso_segments"`
	RxFrames      uint64 `json:"rx_frames"`
	RxSkipped     uint64 `json:"rx_skipped"`
}

// SelfTestCounted is SelfTest that also returns what it added to the
// driver's counters.
func (n *NIC) SelfTestCounted(o SelfTestOptions) ([]SelfTestResult, SelfTestCounts, error) {
	s0 := n.Stats()
	res, err := n.selfTest(o)
	s1 := n.Stats()
	c := SelfTestCounts{TxFrames: s1.Tx.Frames - s0.Tx.Frames, TxGSOPackets: s1.Tx.GSOPackets - s0.Tx.GSOPackets,
		TxGSOSegments: s1.Tx.GSOSegments - s0.Tx.GSOSegments, RxFrames: s1.Rx.Frames - s0.Rx.Frames,
		RxSkipped: s1.Rx.Skipped - s0.Rx.Skipped}
	return res, c, err
}

func (n *NIC) selfTest(o SelfTestOptions) (out []SelfTestResult, err error) {
	if o.Timeout <= 0 {
		o.Timeout = 100 * time.Millisecond
	}
	if o.Sleep == nil {
		o.Sleep = time.Sleep
	}
	prev := n.Strategy()
	kind := o.Loopback
	if kind == LoopAuto {
		kind = LoopMAC
		if n.phyTaken.Load() {
			kind = LoopPHY
		}
	}
	switch kind {
	case LoopPHY:
		restore, lerr := n.phyLoopOn(o)
		if lerr != nil {
			return nil, fmt.Errorf("fec: self-test: PHY loopback on: %w", lerr)
		}
		defer func() {
			if rerr := restore(); rerr != nil && err == nil {
				err = fmt.Errorf("fec: self-test: PHY loopback off: %w", rerr)
			}
		}()
	case LoopMAC:
		if err := n.SetLoopback(true); err != nil {
			return nil, fmt.Errorf("fec: self-test: loopback on: %w", err)
		}
	default:
		return nil, fmt.Errorf("fec: self-test: loopback %d unknown", kind)
	}
	for _, mode := range []string{"bounce", "sg", "tso"} {
		s := bounce.SG
		if mode == "bounce" {
			s = bounce.Bounce
		}
		n.SetStrategy(s)
		// A restart (the link watch's, when autonegotiation completes
		// during the test) aborts the mode's frames: run it again, up to
		// twice more, and say so if it never ran undisturbed.
		var res SelfTestResult
		for try := 0; try < 3; try++ {
			r0 := n.Stats().Restarts
			res = n.selfTestMode(mode, o)
			if res.Restarts = int(n.Stats().Restarts - r0); res.Restarts == 0 {
				break
			}
		}
		if res.Restarts > 0 && res.Failures == 0 {
			res.Failures, res.Unsupported = 1, false
			res.First = fmt.Sprintf("the MAC was restarted %d times during the mode (a link change), three tries", res.Restarts)
		}
		res.Loopback = kind.String()
		out = append(out, res)
	}
	n.SetStrategy(prev)
	if kind == LoopMAC {
		if err := n.SetLoopback(false); err != nil {
			return out, fmt.Errorf("fec: self-test: loopback off: %w", err)
		}
	}
	return out, nil
}

// phyLoopTimeout bounds the wait for a PHY put in loopback to report its
// link (Linux genphy_loopback: 500 ms).
const phyLoopTimeout = 500 * time.Millisecond

// phyLoopOn puts the driver's PHY in loopback at the link's speed and
// duplex (100 Mb/s full duplex when the link is down), programs the MAC
// for the same, and waits for BMSR's link status, as Linux's
// genphy_loopback does. The link watch (PollLink) leaves the PHY alone
// until restore, which takes the PHY out of loopback, restarts
// autonegotiation if it was on (Linux: phy_config_aneg) and puts back the
// link the driver had; the link watch then follows the negotiation.
func (n *NIC) phyLoopOn(o SelfTestOptions) (restore func() error, err error) {
	if !n.phyTaken.Load() {
		return nil, errors.New("no PHY taken by the driver (StartLink, FindPHY)")
	}
	addr := n.PHYAddr()
	n.pollMu.Lock()
	n.phyLooped.Store(true)
	n.pollMu.Unlock()
	l0 := n.Link()
	done := func() {
		n.pollMu.Lock()
		n.phyLooped.Store(false)
		n.pollMu.Unlock()
	}
	bmcr0, err := n.MDIORead(addr, MII_BMCR)
	if err != nil {
		done()
		return nil, err
	}
	loop := Link{Up: true, Speed: 100, FullDuplex: true}
	if l0.Up {
		loop = l0
		// Full duplex always: a half-duplex MAC (RCR DRT) receives nothing
		// while it transmits, and the looped frame returns within 512 BT
		// (IEEE 802.3 22.2.4.1.2); the PHY in loopback ignores BMCR's
		// duplex (22.2.4.1.8); Linux micrel.c ksz9031_set_loopback forces it.
		loop.FullDuplex = true
	}
	ctl := uint16(BMCR_LOOPBACK)
	switch loop.Speed {
	case 1000:
		ctl |= BMCR_SPEED1000
	case 100:
		ctl |= BMCR_SPEED100
	}
	if loop.FullDuplex {
		ctl |= BMCR_FULLDPLX
	}
	restore = func() error {
		v := bmcr0 &^ (BMCR_LOOPBACK | BMCR_RESET)
		if v&BMCR_ANENABLE != 0 {
			v |= BMCR_ANRESTART
		}
		if werr := n.MDIOWrite(addr, MII_BMCR, v); werr != nil {
			// The PHY may still be looped: the link watch keeps off the
			// link and writes v again at each poll until it takes
			// (PollLink), rather than read the loop's link as the wire's.
			n.pollMu.Lock()
			n.phyRestore.pending, n.phyRestore.addr, n.phyRestore.bmcr, n.phyRestore.link = true, addr, v, l0
			n.pollMu.Unlock()
			return werr
		}
		done()
		return n.afterPHYLoop(v, l0)
	}
	if err := n.MDIOWrite(addr, MII_BMCR, ctl); err != nil {
		return nil, errors.Join(err, restore())
	}
	if err := n.applyLink(loop); err != nil {
		return nil, errors.Join(err, restore())
	}
	// BMSR's link status latches low: the first read may show the drop
	// the mode change made. Linux's genphy_loopback sleeps 5 ms before its
	// first read (phy_read_poll_timeout, sleep_before_read): a PHY may
	// still report the old link for a moment.
	o.Sleep(5 * time.Millisecond)
	deadline := time.Now().Add(phyLoopTimeout)
	for {
		bmsr, err := n.MDIORead(addr, MII_BMSR)
		if err != nil {
			return nil, errors.Join(err, restore())
		}
		if bmsr&BMSR_LSTATUS != 0 {
			return restore, nil
		}
		if time.Now().After(deadline) {
			return nil, errors.Join(fmt.Errorf("PHY %d: no link %v after %v in loopback (BMCR %#04x)", addr, loop, phyLoopTimeout, ctl), restore())
		}
		o.Sleep(time.Millisecond)
	}
}

// afterPHYLoop sets the link the driver reports once the PHY has left
// its loopback with BMCR v: down when autonegotiation was restarted (it
// takes seconds on silicon; the link watch brings the link up when it
// completes), else the forced link l0 the driver had.
func (n *NIC) afterPHYLoop(v uint16, l0 Link) error {
	if v&BMCR_ANENABLE != 0 {
		return n.applyLink(Link{})
	}
	return n.applyLink(l0)
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
	mib0 := n.mibValues()
	// Whatever an earlier mode left in the RX ring is not this mode's.
	n.Reclaim()
	n.drainRx()
	free0 := n.TxFree()
	var check func(i int, f []byte, c CsumInfo)
	var finish func()
	switch mode {
	case "tso":
		check, finish = n.selfTestGSO(&res, fail)
	default:
		check, finish = n.selfTestFrames(&res, fail, o)
	}
	deadline := time.Now().Add(o.Timeout)
	got := 0
	for got < res.Sent && time.Now().Before(deadline) {
		n.Reclaim()
		p, err := n.Receive()
		if err != nil {
			fail("receive: %v", err)
			break
		}
		if p == nil {
			if got == 0 && time.Since(start) > 10*time.Millisecond && n.Reclaim() >= 0 && n.TxFree() == free0 &&
				n.mibValues()["RMON_T_PACKETS"] == mib0["RMON_T_PACKETS"] {
				// Nothing back and nothing counted sent after 10 ms: a
				// MAC with neither loopback nor MIB (below); no need to
				// wait out the timeout.
				break
			}
			o.Sleep(50 * time.Microsecond)
			continue
		}
		if !loopframe.Is(p.Data, n.MAC()) {
			// Not the test's: a frame from the wire (a MAC that does not
			// loop back receives it) is ignored, and counted.
			res.Foreign++
			p.Release()
			continue
		}
		check(got, p.Data, p.Csum)
		p.Release()
		got++
	}
	res.Returned = got
	mib1 := n.mibValues()
	n.Reclaim()
	if stuck := free0 - n.TxFree(); stuck > 0 {
		// The uDMA never returned these descriptors: the transmitter
		// sent nothing. Not "unsupported": QEMU, which has no loopback,
		// does complete them (a review found a stalled TX reported
		// unsupported).
		fail("TX: %d descriptors never completed within %v (the transmitter sent nothing)", stuck, o.Timeout)
		n.drainRx()
		res.Elapsed = time.Since(start)
		return res
	}
	if got == 0 && res.Sent > 0 && mib1["RMON_T_PACKETS"] == mib0["RMON_T_PACKETS"] {
		// Nothing came back and the MIB counted nothing sent: a MAC
		// without loopback or MIB (QEMU's ENET implements neither: "TODO:
		// Implement LOOP mode", "TODO: Implement MIB" in imx_fec.c). Not
		// a pass, not a failure.
		res.Unsupported, res.Failures, res.First = true, 0, ""
		n.Reclaim()
		n.drainRx()
		res.Elapsed = time.Since(start)
		return res
	}
	finish()
	if got < res.Sent {
		fail("%d of %d frames came back within %v", got, res.Sent, o.Timeout)
	}
	// Counters: every frame sent was counted out and in (IMX6ULLRM
	// 22.5.28 MIB block).
	for _, c := range []struct {
		name string
		want int
	}{{"RMON_T_PACKETS", res.Sent}, {"RMON_R_PACKETS", got}} {
		if d := int(mib1[c.name] - mib0[c.name]); d != c.want {
			fail("MIB %s counted %d, want %d", c.name, d, c.want)
		}
	}
	// A frame that came back late belongs to no later mode.
	n.Reclaim()
	n.drainRx()
	res.Elapsed = time.Since(start)
	return res
}

// selfTestFrames sends the UDP frames of loopframe.Set, each in up to
// three fragments starting at word offsets 0 to 3, and returns the check
// of each frame that comes back (in order, matched by IP ID) and the end
// of the mode.
func (n *NIC) selfTestFrames(res *SelfTestResult, fail func(string, ...any), o SelfTestOptions) (func(int, []byte, CsumInfo), func()) {
	// The frames, in fragments at every word offset, and two with a wrong
	// UDP checksum: they must come back unchanged and no verdict may
	// claim them (an RX checker that flags nothing passed every good
	// frame; a review found it).
	frames := loopframe.Set(n.MAC())
	csum := n.CsumOffload()
	for i := range frames {
		f := &frames[i]
		if f.Bad {
			if err := n.stTransmit(o, f.Frags, TxOptions{}); err != nil {
				fail("transmit frame %d (%d bytes): %v", i, len(f.Want), err)
				continue
			}
			res.Sent++
			continue
		}
		if csum {
			// The MAC inserts them: the driver zeroes the fields.
			err := n.stTransmit(o, f.Frags, TxOptions{Csum: true})
			if err != nil {
				fail("transmit frame %d (%d bytes): %v", i, len(f.Want), err)
				continue
			}
		} else if err := n.stTransmit(o, f.Frags, TxOptions{}); err != nil {
			fail("transmit frame %d (%d bytes): %v", i, len(f.Want), err)
			continue
		}
		res.Sent++
	}
	ret := loopframe.NewReturns(frames)
	check := func(_ int, got []byte, c CsumInfo) {
		id, bad := ret.Frame(got, c.L4)
		if bad != "" {
			fail("%s", bad)
			return
		}
		checkVerdict(got, c, csum, fail, id)
	}
	finish := func() {
		if m := ret.Missing(); m != "" && res.Sent == len(frames) {
			// A destination address read stale is filtered.
			fail("%s (a destination address read stale is filtered)", m)
		}
	}
	return check, finish
}

// stTransmit sends frags, waiting while the ring is full (descriptors the
// uDMA has not returned yet) up to o.Timeout.
func (n *NIC) stTransmit(o SelfTestOptions, frags [][]byte, opts TxOptions) error {
	end := time.Now().Add(o.Timeout)
	for {
		err := n.Transmit(frags, opts, nil)
		if !errors.Is(err, ErrRingFull) || time.Now().After(end) {
			return err
		}
		n.Reclaim()
		o.Sleep(50 * time.Microsecond)
	}
}

// checkVerdict compares the driver's RX checksum verdict for frame id with
// a software sum: a verdict may claim only what the sum confirms, and with
// checksum offload a good TCP or UDP frame must be claimed.
func checkVerdict(f []byte, c CsumInfo, offload bool, fail func(string, ...any), id int) {
	h, err := pkt.Parse(f)
	if err != nil {
		fail("frame %d: %v", id, err)
		return
	}
	ipOK := pkt.IPv4HeaderOK(f, &h)
	l4OK, checked := pkt.TransportOK(f, &h)
	switch {
	case c.IPv4 && !ipOK, c.L4 && !(l4OK && checked):
		fail("frame %d: checksum claimed verified (ip %v l4 %v), software sum says ip %v l4 %v", id, c.IPv4, c.L4, ipOK, l4OK)
	case offload && checked && l4OK && ipOK && !c.L4:
		fail("frame %d: good checksums not claimed verified (ip %v l4 %v)", id, c.IPv4, c.L4)
	}
}

// selfTestGSO sends one TCP packet of 64 KiB (or as many MSS the TX ring
// takes) through TransmitGSO and checks that its segments come back with
// contiguous sequence numbers, valid checksums and, together, the payload.
func (n *NIC) selfTestGSO(res *SelfTestResult, fail func(string, ...any)) (func(int, []byte, CsumInfo), func()) {
	// 64 KiB less the headers (an IPv4 datagram's length is 16 bits), or
	// what the ring takes.
	size := min(0xffff-40, n.MaxGSOSegments(1)*loopframe.MSS)
	t := loopframe.NewTSO(n.MAC(), size)
	if err := n.TransmitGSO(t.Hdr, [][]byte{t.Payload}, tso.Options{Type: tso.TCP, MSS: loopframe.MSS}, nil); err != nil {
		fail("transmit a %d-byte TSO packet: %v", size, err)
	} else {
		res.Sent = t.Segs
	}
	csum := n.CsumOffload()
	check := func(i int, f []byte, c CsumInfo) {
		// Every header byte as the segmenter must write it (Linux
		// tso_build_hdr): loopframe.TSO.Segment.
		bad, tcp := t.Segment(i, f)
		for _, b := range bad {
			fail("%s", b)
		}
		if tcp {
			checkVerdict(f, c, csum, fail, i)
		}
	}
	finish := func() {
		if b := t.Finish(res.Failures > 0); b != "" {
			fail("%s", b)
		}
	}
	return check, finish
}

// mibValues reads the MIB counters by name.
func (n *NIC) mibValues() map[string]uint32 {
	m := map[string]uint32{}
	for _, c := range n.MIB() {
		m[c.Name] = c.Value
	}
	return m
}

// drainRx receives and releases whatever is in the RX ring.
func (n *NIC) drainRx() {
	for {
		p, err := n.Receive()
		if err != nil || p == nil {
			return
		}
		p.Release()
	}
}
