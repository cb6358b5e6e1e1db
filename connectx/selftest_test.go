package connectx_test

import (
	"strings"
	"testing"
	"time"

	"github.com/tamanic/tamanic/connectx"
	"github.com/tamanic/tamanic/connectx/connectxtest"
	"github.com/tamanic/tamanic/dma"
	"github.com/tamanic/tamanic/dma/dmatest"
	"github.com/tamanic/tamanic/internal/loopframe"
)

// selfTest runs the NIC's self-test on r and returns its sg and lso
// results, checking that the loopback was restored.
func selfTest(t *testing.T, r *connectxtest.Rig) []connectx.SelfTestResult {
	t.Helper()
	uc0, mc0, _ := r.Model.LocalLoopback()
	res, err := r.NIC.SelfTest(connectx.SelfTestOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 2 || res[0].Mode != "sg" || res[1].Mode != "lso" {
		t.Fatalf("results %+v: want sg and lso", res)
	}
	for _, x := range res {
		t.Logf("%s", x)
	}
	uc, mc, tirs := r.Model.LocalLoopback()
	if uc != uc0 || mc != mc0 {
		t.Errorf("vport local loopback uc %v mc %v after the self-test, was %v %v", uc, mc, uc0, mc0)
	}
	for tir, b := range tirs {
		if b != 0 {
			t.Errorf("TIR %#x self_lb_block %d after the self-test", tir, b)
		}
	}
	return res
}

// TestSelfTestPasses: on the model, whose vport loops a unicast frame to
// its own address back when disable_uc_local_lb is clear and the TIR's
// self_lb_block unicast bit is set, every frame of both modes comes back
// as sent; the loopback is restored; a frame to the NIC's own address
// sent afterwards goes to the wire again.
func TestSelfTestPasses(t *testing.T) {
	r := connectxtest.NewRig(t, connectxtest.RigOptions{})
	res, counts, err := r.NIC.SelfTestCounted(connectx.SelfTestOptions{})
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
		t.Fatalf("results %+v: want 19 sg frames and 46 LSO segments", res)
	}
	if st := r.Model.Stats(); st.TxLoopback != 19+46 || st.RxLoopback != 19+46 || st.RxSelfLBBlocked != 0 || st.TxFrames != 0 {
		t.Errorf("model stats %+v: want 65 frames looped, none on the wire", st)
	}
	if counts.TxPackets != 19+1 || counts.TxLSO != 1 || counts.RxPackets != 19+46 || counts.RxErrors != 0 {
		t.Errorf("counts %+v", counts)
	}
	if uc, _, tirs := r.Model.LocalLoopback(); uc || len(tirs) != 1 {
		t.Errorf("after the test: local loopback %v, TIRs %v", uc, tirs)
	}
	var wire [][]byte
	r.Model.SetPeer(func(f []byte) { wire = append(wire, f) })
	f := make([]byte, 60)
	loopframe.UDP(f, r.NIC.MAC(), 0, 0)
	if err := r.NIC.Transmit([][]byte{f}, false, nil); err != nil {
		t.Fatal(err)
	}
	if len(wire) != 1 {
		t.Errorf("after the self-test a frame to the NIC's own address reached the wire %d times", len(wire))
	}
}

// TestBringUpTurnsLocalLoopbackOff: a firmware that starts the vport's
// local loopback on has it turned off at bring-up, as Linux does (main.c
// mlx5_core_set_hca_defaults, "Disable local_lb by default"), and the
// self-test leaves it off.
func TestBringUpTurnsLocalLoopbackOff(t *testing.T) {
	r := connectxtest.NewRig(t, connectxtest.RigOptions{Model: func(o *connectxtest.Options) { o.LocalLoopback = true }})
	if uc, mc, _ := r.Model.LocalLoopback(); uc || mc {
		t.Errorf("after bring-up: local loopback uc %v mc %v, want both off", uc, mc)
	}
	for _, x := range selfTest(t, r) {
		if !x.OK() {
			t.Errorf("%s", x)
		}
	}
	if uc, mc, _ := r.Model.LocalLoopback(); uc || mc {
		t.Errorf("after the self-test: local loopback uc %v mc %v, want both off", uc, mc)
	}
}

// TestSelfTestNoLocalLBCap: a firmware without disable_local_lb_uc has
// the loopback always on; the driver must not try to change it (the
// model refuses the field) and the test passes.
func TestSelfTestNoLocalLBCap(t *testing.T) {
	r := connectxtest.NewRig(t, connectxtest.RigOptions{Model: func(o *connectxtest.Options) { o.NoLocalLBCap = true }})
	for _, x := range selfTest(t, r) {
		if !x.OK() {
			t.Errorf("%s", x)
		}
	}
}

// The seeded faults: each must make the self-test fail, and say where.

// skipClean is a dma.Memory whose next skip ToDevice mappings longer
// than a cache line reach RAM with only their first line cleaned: the
// card reads the rest as RAM held it before the CPU wrote it (zeros
// here), and the DMA model reports the stale read.
type skipClean struct {
	*dmatest.Memory
	skip int
}

func (m *skipClean) Map(b *dma.Buffer, p []byte, dir dma.Dir) error {
	if dir != dma.ToDevice || len(p) <= 64 || m.skip == 0 {
		return m.Memory.Map(b, p, dir)
	}
	m.skip--
	saved := append([]byte(nil), p[64:]...)
	clear(p[64:])
	err := m.Memory.Map(b, p, dir) // the clean copies what RAM holds
	copy(p[64:], saved)            // the CPU's writes, still in its cache
	return err
}

// TestSelfTestFindsSeededFaults: a missing cache clean (a byte differs
// at an offset), a wrong RX checksum verdict, a data segment lost on the
// way to the wire.
func TestSelfTestFindsSeededFaults(t *testing.T) {
	t.Run("missing cache clean", func(t *testing.T) {
		mem := dmatest.New(t, dmatest.Options{CoherentSize: 4 << 20})
		sm := &skipClean{Memory: mem}
		r := connectxtest.NewRig(t, connectxtest.RigOptions{Mem: mem, Config: func(c *connectx.Config) { c.Mem = sm }})
		sm.skip = 1
		res := selfTest(t, r)
		if v := mem.Take(); len(v) == 0 {
			t.Error("the DMA model saw no stale read")
		}
		if res[0].OK() || !strings.Contains(res[0].First, "byte") {
			t.Fatalf("sg: %v, want a differing byte named", res[0])
		}
		if !res[1].OK() {
			t.Errorf("lso: %v (the fault fired once, in sg)", res[1])
		}
	})
	t.Run("missing cache clean in the LSO payload", func(t *testing.T) {
		mem := dmatest.New(t, dmatest.Options{CoherentSize: 4 << 20})
		sm := &skipClean{Memory: mem}
		r := connectxtest.NewRig(t, connectxtest.RigOptions{Mem: mem, Config: func(c *connectx.Config) { c.Mem = sm }})
		sm.skip = 1 << 20
		res := selfTest(t, r)
		mem.Take()
		if res[1].OK() || !strings.Contains(res[1].First, "byte") {
			t.Fatalf("lso: %v, want a differing payload byte named", res[1])
		}
	})
	t.Run("wrong checksum verdict", func(t *testing.T) {
		r := connectxtest.NewRig(t, connectxtest.RigOptions{})
		r.Model.SetFaults(connectxtest.Faults{WrongVerdict: 1})
		res := selfTest(t, r)
		if res[0].OK() || !strings.Contains(res[0].First, "checksum") {
			t.Fatalf("sg: %v, want the wrong verdict found", res[0])
		}
	})
	t.Run("wrong verdict on a bad checksum", func(t *testing.T) {
		r := connectxtest.NewRig(t, connectxtest.RigOptions{})
		// The 17 good frames first, then the first bad one: its wrong
		// UDP checksum claimed good.
		r.Model.SetFaults(connectxtest.Faults{WrongVerdict: 18})
		res := selfTest(t, r)
		if res[0].OK() || res[0].Failures < 18 {
			t.Fatalf("sg: %v, want 18 wrong verdicts found", res[0])
		}
	})
	t.Run("dropped data segment", func(t *testing.T) {
		r := connectxtest.NewRig(t, connectxtest.RigOptions{})
		r.Model.SetFaults(connectxtest.Faults{DropSegment: 1})
		res := selfTest(t, r)
		if res[0].OK() || !strings.Contains(res[0].First, "bytes") {
			t.Fatalf("sg: %v, want the short frame found", res[0])
		}
		if !res[1].OK() {
			t.Errorf("lso: %v (the fault fired once, in sg)", res[1])
		}
	})
}

// TestSelfTestReceiveError: a frame the card returns with an error CQE
// is a failure, named, and the test still ends within its bound and
// restores the loopback.
func TestSelfTestReceiveError(t *testing.T) {
	r := connectxtest.NewRig(t, connectxtest.RigOptions{})
	r.Model.SetFaults(connectxtest.Faults{FailRx: 0x01})
	res := selfTest(t, r)
	if res[0].OK() || !strings.Contains(res[0].First, "receive error") {
		t.Fatalf("sg: %v, want the receive error named", res[0])
	}
}

// TestSelfTestSmallRxRing: with the smallest rings (32 WQEBBs, fewer
// receive buffers than the sg mode has frames: 16 against 19), and with some of them held by the stack
// (the endpoint may keep frames across a run-time self-test), every
// frame still comes back: the test sends no faster than the buffers the
// card has posted are taken, and sizes its LSO packet by them (a review
// of this self-test found frames lost to RxNoBuffer).
func TestSelfTestSmallRxRing(t *testing.T) {
	for _, held := range []int{0, 5} {
		r := connectxtest.NewRig(t, connectxtest.RigOptions{Config: func(c *connectx.Config) { c.RxRing, c.TxRing = 16, 32 }})
		var keep []interface{ Release() error }
		for i := 0; i < held; i++ {
			f := make([]byte, 60)
			loopframe.UDP(f, [6]byte{2, 0, 0, 0, 0, 9}, 0, 0)
			if !r.Model.Deliver(f) {
				t.Fatal("model did not deliver")
			}
			r.NIC.Poll()
			fr, err := r.NIC.Receive()
			if fr == nil || err != nil {
				t.Fatalf("held frame %d: %v", i, err)
			}
			keep = append(keep, fr)
		}
		for _, x := range selfTest(t, r) {
			if !x.OK() {
				t.Errorf("held %d: %s", held, x)
			}
		}
		if st := r.Model.Stats(); st.RxNoBuffer != 0 {
			t.Errorf("held %d: %d frames found no buffer", held, st.RxNoBuffer)
		}
		for _, f := range keep {
			if err := f.Release(); err != nil {
				t.Error(err)
			}
		}
	}
}

// TestSelfTestCommandFails: a loopback the card refuses to set up is an
// error, never a pass, and leaves nothing changed: MODIFY_TIR refused
// after the vport's loopback was turned on turns it off again.
func TestSelfTestCommandFails(t *testing.T) {
	for _, op := range []uint16{connectx.OpModifyTIR, connectx.OpModifyNICVportCtx} {
		r := connectxtest.NewRig(t, connectxtest.RigOptions{})
		r.Model.SetFaults(connectxtest.Faults{FailOp: op, FailStatus: 0x03})
		res, err := r.NIC.SelfTest(connectx.SelfTestOptions{})
		if err == nil || len(res) != 0 {
			t.Errorf("op %#x refused: results %v, error %v", op, res, err)
		}
		r.Model.SetFaults(connectxtest.Faults{})
		uc, mc, tirs := r.Model.LocalLoopback()
		if uc || mc {
			t.Errorf("op %#x refused: vport loopback left uc %v mc %v", op, uc, mc)
		}
		for tir, b := range tirs {
			if b != 0 {
				t.Errorf("op %#x refused: TIR %#x self_lb_block %d", op, tir, b)
			}
		}
	}
}

// TestSelfTestFramesWaitingBeforeIt: frames from the wire that wait in
// the RX ring when the self-test starts (at run time, ones the stack had
// not taken yet) are received and dropped before each mode's count
// starts; they are foreign, but not counted twice against the driver's
// RxPackets: a healthy card passes.
func TestSelfTestFramesWaitingBeforeIt(t *testing.T) {
	r := connectxtest.NewRig(t, connectxtest.RigOptions{})
	for i := range 3 {
		f := make([]byte, 80)
		copy(f, []byte{0x02, 0, 0, 0, 0, 0x99}) // to someone else (promiscuous vport)
		copy(f[6:], []byte{0x02, 0, 0, 0, 0, byte(i)})
		f[12], f[13] = 0x88, 0xb5
		if !r.Model.Deliver(f) {
			t.Fatal("the model dropped a frame from the wire")
		}
	}
	res := selfTest(t, r)
	for _, x := range res {
		if !x.OK() {
			t.Errorf("%s", x)
		}
	}
	if res[0].Foreign != 3 {
		t.Errorf("sg: %d foreign frames, want the 3 that waited", res[0].Foreign)
	}
}

// TestSelfTestSmallMTU: with an MTU below 1,500 (Config.MTU 1280), the
// card refuses the set's 1,513- and 1,514-byte frames and the LSO
// packet's 1,502-byte segments as too long for its MTU: a healthy card
// must not fail for it. The sg mode sends the frames that fit and checks
// them; the lso mode, whose MSS is fixed, is unsupported and says why.
func TestSelfTestSmallMTU(t *testing.T) {
	r := connectxtest.NewRig(t, connectxtest.RigOptions{Config: func(c *connectx.Config) { c.MTU = 1280 }})
	res := selfTest(t, r)
	if !res[0].OK() || res[0].Sent != 17 {
		t.Errorf("sg: %s, want the 17 frames within the MTU back", res[0])
	}
	if !res[1].Unsupported || res[1].Failures != 0 || !strings.Contains(res[1].Reason, "MTU 1280") {
		t.Errorf("lso: %s, want unsupported for the MTU", res[1])
	}
	if st := r.NIC.Stats(); st.TxBadPacket != 0 || st.TxErrors != 0 {
		t.Errorf("driver stats %+v: the self-test sent what the MTU refuses", st)
	}
}

// TestSelfTestRxBuffersHeld: when the stack holds nearly every receive
// buffer (a run-time test), the self-test cannot run; that is an error
// ("could not run"), not a failed mode charged to the card, and the
// loopback is left untouched.
func TestSelfTestRxBuffersHeld(t *testing.T) {
	r := connectxtest.NewRig(t, connectxtest.RigOptions{Config: func(c *connectx.Config) { c.RxRing = 16 }})
	var keep []interface{ Release() error }
	for i := 0; i < 14; i++ {
		f := make([]byte, 60)
		loopframe.UDP(f, [6]byte{2, 0, 0, 0, 0, 9}, 0, 0)
		if !r.Model.Deliver(f) {
			t.Fatal("model did not deliver")
		}
		r.NIC.Poll()
		fr, err := r.NIC.Receive()
		if fr == nil || err != nil {
			t.Fatalf("held frame %d: %v", i, err)
		}
		keep = append(keep, fr)
	}
	cmds := r.Model.Stats().Commands
	res, err := r.NIC.SelfTest(connectx.SelfTestOptions{})
	for _, x := range res {
		if x.Failures != 0 {
			t.Errorf("%s: a failure charged to the card", x)
		}
	}
	if err == nil || !strings.Contains(err.Error(), "receive buffers") {
		t.Errorf("err %v, want the held receive buffers named", err)
	}
	if n := r.Model.Stats().Commands - cmds; n != 0 {
		t.Errorf("%d commands: the loopback was touched", n)
	}
	for _, f := range keep {
		if err := f.Release(); err != nil {
			t.Error(err)
		}
	}
}

// TestSelfTestFindsNoCsumInsertion: the sg mode asks the card to insert
// the IPv4 header and UDP checksums; a card that ignores the request must
// fail it. The frames therefore leave the driver with those fields zero
// (as the ENET's self-test sends them), not already correct.
func TestSelfTestFindsNoCsumInsertion(t *testing.T) {
	r := connectxtest.NewRig(t, connectxtest.RigOptions{})
	r.Model.SetFaults(connectxtest.Faults{NoCsumInsert: 1000})
	res := selfTest(t, r)
	if res[0].OK() || res[0].Failures < 17 {
		t.Errorf("sg: %s, want every good frame's missing checksums found", res[0])
	}
	if !res[1].OK() {
		t.Errorf("lso: %s (LSO always computes its segments' checksums)", res[1])
	}
}

// TestSelfTestStuckSendQueue: a card that takes the sg mode's doorbells
// and never executes them fails sg; lso is not run on top of the stuck
// queue (a review found its 46 segments queued behind sg's, all 65
// frames leaving for the wire once the card let them go), and is a
// failure too.
func TestSelfTestStuckSendQueue(t *testing.T) {
	r := connectxtest.NewRig(t, connectxtest.RigOptions{})
	var wire int
	r.Model.SetPeer(func([]byte) { wire++ })
	r.Model.SetFaults(connectxtest.Faults{HoldTx: true})
	res, err := r.NIC.SelfTest(connectx.SelfTestOptions{Timeout: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range res {
		t.Logf("%s", x)
		if x.OK() || x.Unsupported {
			t.Errorf("%s: want a failure", x)
		}
	}
	if len(res) != 2 || res[1].Sent != 0 || !strings.Contains(res[1].First, "not run") {
		t.Fatalf("results %+v: want lso not run", res)
	}
	r.Model.ReleaseTx()
	if wire > res[0].Sent {
		t.Errorf("%d frames reached the wire once the card let them go, the sg mode sent %d", wire, res[0].Sent)
	}
}
