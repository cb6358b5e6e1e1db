package e1000e_test

import (
	"strings"
	"testing"
	"time"

	"github.com/tamanic/tamanic/e1000e"
	"github.com/tamanic/tamanic/e1000e/e1000etest"
)

// selfTest runs the NIC's self-test on r and returns its sg and tso
// results.
func selfTest(t *testing.T, r *rig) []e1000e.SelfTestResult {
	t.Helper()
	res, err := r.nic.SelfTest(e1000e.SelfTestOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 2 || res[0].Mode != "sg" || res[1].Mode != "tso" {
		t.Fatalf("results %+v: want sg and tso", res)
	}
	for _, x := range res {
		t.Logf("%s", x)
	}
	if r.nic.Loopback() {
		t.Error("the MAC was left in loopback")
	}
	return res
}

// TestSelfTestPasses: on the model, which loops transmitted frames back
// under RCTL.LBM = 01b, every frame of both modes comes back as sent; the
// CTRL and RCTL bits the loopback changed are restored; a frame sent
// afterwards goes to the wire again; the counts say what the test added.
func TestSelfTestPasses(t *testing.T) {
	r := newRig(t, rigOptions{})
	ctrl0, rctl0 := r.model.Read32(e1000e.CTRL), r.model.Read32(e1000e.RCTL)
	res, counts, err := r.nic.SelfTestCounted(e1000e.SelfTestOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range res {
		if !x.OK() || !strings.Contains(x.String(), " ok ") {
			t.Errorf("%s", x)
		}
		t.Logf("%s", x)
	}
	if len(res) != 2 || res[0].Sent != 19 || res[1].Sent != 46 {
		t.Fatalf("results %+v: want 19 sg frames and 46 TSO segments", res)
	}
	if c, r := r.model.Read32(e1000e.CTRL), r.model.Read32(e1000e.RCTL); c != ctrl0 || r != rctl0 {
		t.Errorf("CTRL %#x RCTL %#x after the self-test, were %#x %#x", c, r, ctrl0, rctl0)
	}
	if st := r.model.Stats(); st.Looped != 19+46 || st.LoopDropped != 0 {
		t.Errorf("model stats %+v: want 65 frames looped", st)
	}
	if counts.TxFrames != 19+1 || counts.TxGSOPackets != 1 || counts.TxGSOSegs != 46 || counts.RxFrames != 19+46 || counts.RxCsumBad != 2 {
		t.Errorf("counts %+v", counts)
	}
	var wire [][]byte
	r.model.OnTransmit(func(f []byte) { wire = append(wire, f) })
	if err := r.nic.Transmit([][]byte{make([]byte, 60)}, false, nil); err != nil {
		t.Fatal(err)
	}
	if len(wire) != 1 {
		t.Errorf("after the self-test a frame sent reached the wire %d times", len(wire))
	}
}

// TestSelfTestKeepsLoopbackOverAReset: a Reset during the test (the
// watchdog's) brings the MAC back in loopback, and the test is run again.
func TestSelfTestKeepsLoopbackOverAReset(t *testing.T) {
	r := newRig(t, rigOptions{})
	if err := r.nic.SetLoopback(true); err != nil {
		t.Fatal(err)
	}
	if err := r.nic.Reset(); err != nil {
		t.Fatal(err)
	}
	if rctl := r.model.Read32(e1000e.RCTL); rctl&(3<<6) != 1<<6 {
		t.Fatalf("RCTL %#x after a Reset in loopback: LBM not 01b", rctl)
	}
	if err := r.nic.SetLoopback(false); err != nil {
		t.Fatal(err)
	}
	for _, x := range selfTest(t, r) {
		if !x.OK() {
			t.Errorf("%s", x)
		}
	}
}

// The seeded faults: each must make the self-test fail, and say where.

// TestSelfTestStaleCacheLine: the device reads a cache line of a TX
// buffer as RAM held it before the CPU's writes (a missing clean): a byte
// differs, at an offset the result names.
func TestSelfTestStaleCacheLine(t *testing.T) {
	r := newRig(t, rigOptions{})
	r.model.SetFaults(e1000etest.Faults{StaleLine: 1})
	res := selfTest(t, r)
	if res[0].OK() || !strings.Contains(res[0].First, "byte") || !strings.Contains(res[0].String(), "FAIL") {
		t.Fatalf("sg: %v, want a differing byte found", res[0])
	}
	if !res[1].OK() {
		t.Errorf("tso: %v (the fault fired once, in sg)", res[1])
	}
}

// TestSelfTestStaleLineInTSOPayload: a stale line in the TSO payload is
// found too.
func TestSelfTestStaleLineInTSOPayload(t *testing.T) {
	r := newRig(t, rigOptions{})
	// The fault cannot be armed between the modes from here: every TX
	// read is stale, and both modes must fail.
	r.model.SetFaults(e1000etest.Faults{StaleLine: 1 << 20})
	res := selfTest(t, r)
	if res[0].OK() || res[1].OK() {
		t.Fatalf("with every TX read stale: %v", res)
	}
	if !strings.Contains(res[1].First, "byte") {
		t.Errorf("tso: %v, want the payload byte named", res[1])
	}
}

// TestSelfTestWrongVerdict: a TCP/UDP checksum verdict the software sum
// contradicts fails the mode.
func TestSelfTestWrongVerdict(t *testing.T) {
	r := newRig(t, rigOptions{})
	r.model.SetFaults(e1000etest.Faults{WrongVerdict: 1})
	res := selfTest(t, r)
	if res[0].OK() || !strings.Contains(res[0].First, "checksum") {
		t.Fatalf("sg: %v, want the wrong verdict found", res[0])
	}
}

// TestSelfTestWrongVerdictOnBadChecksum: with every verdict turned over,
// every frame fails, the two sent with a wrong UDP checksum (claimed
// good) included.
func TestSelfTestWrongVerdictOnBadChecksum(t *testing.T) {
	r := newRig(t, rigOptions{})
	r.model.SetFaults(e1000etest.Faults{WrongVerdict: 1 << 20})
	res := selfTest(t, r)
	if res[0].Failures != res[0].Sent || res[1].OK() {
		t.Fatalf("every verdict wrong: %v, want every sg frame failed", res)
	}
}

// TestSelfTestDroppedFrame: a frame lost in the loopback fails the mode,
// naming the frame.
func TestSelfTestDroppedFrame(t *testing.T) {
	r := newRig(t, rigOptions{})
	r.model.SetFaults(e1000etest.Faults{DropLoop: 1})
	res := selfTest(t, r)
	if res[0].OK() || res[0].Unsupported || res[0].Returned != res[0].Sent-1 || !strings.Contains(res[0].First, "frame 0") {
		t.Fatalf("sg: %v, want frame 0 missing", res[0])
	}
	if !res[1].OK() {
		t.Errorf("tso: %v", res[1])
	}
	if res[0].Elapsed > 500*time.Millisecond {
		t.Errorf("sg took %v: the wait is not bounded", res[0].Elapsed)
	}
}

// TestSelfTestNoLoopbackFails: a device that ignores the loopback (TX
// completes, nothing reaches the receiver) fails, quickly: the 82574L
// has its MAC loopback (and QEMU 7.2 loops), so that is a dead receiver
// or a loopback that did not take, not a device without one.
func TestSelfTestNoLoopbackFails(t *testing.T) {
	r := newRig(t, rigOptions{model: e1000etest.Options{NoLoopback: true}})
	for _, x := range selfTest(t, r) {
		if x.Unsupported || x.OK() || x.Failures == 0 || !strings.Contains(x.First, "no frame reached the receiver") {
			t.Errorf("%s: want a failure", x)
		}
		if x.Elapsed > 50*time.Millisecond {
			t.Errorf("%s: the test waited out its timeout", x)
		}
	}
}

// TestSelfTestStalledTX: descriptors the controller never writes back are
// a failure, not "unsupported".
func TestSelfTestStalledTX(t *testing.T) {
	r := newRig(t, rigOptions{model: e1000etest.Options{ManualTX: true}})
	res, err := r.nic.SelfTest(e1000e.SelfTestOptions{Timeout: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range res {
		if x.OK() || x.Unsupported || !strings.Contains(x.First, "never completed") {
			t.Errorf("%s: want a stalled TX failure", x)
		}
	}
	r.model.ProcessTX() // let the model finish before the rig's checks
	// With the smallest TX ring the sending waits for descriptors too:
	// within one deadline per mode, not one timeout per frame (17 frames:
	// 340 ms or more). The bound leaves room for a loaded machine (a CI
	// run with other work beside it took more than 60 ms once).
	r = newRig(t, rigOptions{model: e1000etest.Options{ManualTX: true}, cfg: func(c *e1000e.Config) { c.TxRing = 8 }})
	res, err = r.nic.SelfTest(e1000e.SelfTestOptions{Timeout: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range res {
		if x.OK() || x.Unsupported || x.Elapsed > 250*time.Millisecond {
			t.Errorf("%s: want a stalled TX failure within twice the timeout", x)
		}
		t.Logf("%s", x)
	}
	r.model.ProcessTX()
}

// TestSelfTestTSOAsIPFragments: a device that sends the TSO packet as IP
// fragments (QEMU 7.2's e1000e) gets "unsupported" for tso when the
// fragments reassemble exactly into the packet sent, and a failure when
// one is corrupted.
func TestSelfTestTSOAsIPFragments(t *testing.T) {
	r := newRig(t, rigOptions{model: e1000etest.Options{FragmentTSO: true}})
	res := selfTest(t, r)
	if !res[0].OK() {
		t.Errorf("sg: %v", res[0])
	}
	if !res[1].Unsupported || res[1].Failures != 0 || !strings.Contains(res[1].String(), "IPv4 fragments") {
		t.Errorf("tso: %v, want unsupported (IP fragments)", res[1])
	}
	r.model.SetFaults(e1000etest.Faults{StaleLine: 1 << 20})
	res = selfTest(t, r)
	if res[1].OK() || res[1].Unsupported || !strings.Contains(res[1].First, "byte") {
		t.Errorf("tso with stale payload: %v, want a failure naming the byte", res[1])
	}
	// 19 sg frames lost (sg: nothing reached the receiver), then 3 of
	// the fragments.
	r.model.SetFaults(e1000etest.Faults{DropLoop: 19 + 3})
	res = selfTest(t, r)
	if res[1].OK() || res[1].Unsupported {
		t.Errorf("tso with fragments lost: %v, want a failure", res[1])
	}
}

// TestSelfTestSmallRings: with the smallest rings (8 descriptors each)
// the test still fits its frames and TSO packet in them and passes.
func TestSelfTestSmallRings(t *testing.T) {
	r := newRig(t, rigOptions{cfg: func(c *e1000e.Config) { c.TxRing, c.RxRing = 8, 8 }})
	for _, x := range selfTest(t, r) {
		if !x.OK() {
			t.Errorf("%s", x)
		}
	}
}
