package connectx_test

import (
	"bytes"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tamanic/tamanic/connectx"
	"github.com/tamanic/tamanic/connectx/connectxtest"
)

// TestReceiveErrorRecovers: a receive error other than a length error
// (local protection, syndrome 4) puts the RQ in ERR, and the card flushes
// every posted buffer. The driver reports the error once, takes the
// flush CQEs, resets the RQ and posts the buffers again (the ones the
// stack holds when it releases them): reception goes on, it does not
// stop for good.
func TestReceiveErrorRecovers(t *testing.T) {
	r := connectxtest.NewRig(t, connectxtest.RigOptions{MAC: [6]byte{2, 0xC7, 0, 0, 0, 2},
		Config: func(c *connectx.Config) { c.RxRing = 16 }})
	f := udp4(make([]byte, 200), true)
	if !r.Model.Deliver(f) {
		t.Fatal("first frame not delivered")
	}
	held, err := r.NIC.Receive()
	if err != nil || held == nil {
		t.Fatalf("first frame: %v %v", held, err)
	}
	r.Model.SetFaults(connectxtest.Faults{FailRx: 0x04})
	if r.Model.Deliver(f) {
		t.Fatal("the failing frame was delivered")
	}
	fr, err := r.NIC.Receive()
	if fr != nil || !errors.Is(err, connectx.ErrRxError) {
		t.Fatalf("after the error CQE: %v %v", fr, err)
	}
	if fr, err := r.NIC.Receive(); fr != nil || err != nil {
		t.Fatalf("flush CQEs reported: %v %v", fr, err)
	}
	if err := held.Release(); err != nil { // lent during the error
		t.Fatal(err)
	}
	for i := 0; i < 40; i++ {
		g := udp4(bytes.Repeat([]byte{byte(i)}, 100+i), true)
		if !r.Model.Deliver(g) {
			t.Fatalf("frame %d after the error not delivered: model %+v", i, r.Model.Stats())
		}
		fr, err := r.NIC.Receive()
		if err != nil || fr == nil || !bytes.Equal(fr.Bytes(), g) {
			t.Fatalf("frame %d after the error: %v %v", i, fr, err)
		}
		if err := fr.Release(); err != nil {
			t.Fatal(err)
		}
	}
	st, ms := r.NIC.Stats(), r.Model.Stats()
	if st.RQRecoveries != 1 || st.RxErrors != 1 || st.RxFlushed != 14 || ms.RxFlushed != 14 {
		t.Fatalf("driver %+v model %+v", st, ms)
	}
}

// TestReceiveErrorNoRecovery: a receive error whose syndrome leaves the RQ
// ready (local access, 0x11; Linux recovers only after 0x02, 0x04, 0x05,
// en/health.h cqe_syndrome_needs_recover) is reported and counted, its
// buffer is posted again, and reception goes on without an RQ reset. So is
// a needs-recovery syndrome that finds the RQ still ready when the driver
// asks (QUERY_RQ), as Linux's recovery asks before it resets.
func TestReceiveErrorNoRecovery(t *testing.T) {
	r := connectxtest.NewRig(t, connectxtest.RigOptions{MAC: [6]byte{2, 0xC7, 0, 0, 0, 2},
		Config: func(c *connectx.Config) { c.RxRing = 16 }})
	for k, fl := range []connectxtest.Faults{{FailRx: 0x11}, {FailRx: 0x04, FailRxReady: true}} {
		cmds := r.NIC.Stats().Commands
		r.Model.SetFaults(fl)
		if r.Model.Deliver(udp4(make([]byte, 200), true)) {
			t.Fatalf("%+v: the failing frame was delivered", fl)
		}
		if fr, err := r.NIC.Receive(); fr != nil || !errors.Is(err, connectx.ErrRxError) {
			t.Fatalf("%+v: after the error CQE: %v %v", fl, fr, err)
		}
		// Only a syndrome Linux recovers from costs a QUERY_RQ.
		if asked := r.NIC.Stats().Commands - cmds; asked != k {
			t.Fatalf("%+v: %d commands after the error CQE, want %d", fl, asked, k)
		}
		for i := 0; i < 40; i++ {
			g := udp4(bytes.Repeat([]byte{byte(i)}, 100+i), true)
			if !r.Model.Deliver(g) {
				t.Fatalf("%+v: frame %d after the error not delivered: model %+v driver %+v", fl, i, r.Model.Stats(), r.NIC.Stats())
			}
			fr, err := r.NIC.Receive()
			if err != nil || fr == nil || !bytes.Equal(fr.Bytes(), g) {
				t.Fatalf("%+v: frame %d after the error: %v %v", fl, i, fr, err)
			}
			if err := fr.Release(); err != nil {
				t.Fatal(err)
			}
		}
		st := r.NIC.Stats()
		if st.RQRecoveries != 0 || st.RxErrors != uint64(k+1) || st.RxErrNoRecovery != uint64(k+1) || st.RxFlushed != 0 {
			t.Fatalf("%+v: driver %+v model %+v", fl, st, r.Model.Stats())
		}
	}
}

// TestReceiveErrorFlushNeverComes: when the card never returns the posted
// buffers after an RQ error, the driver neither resets the RQ nor reuses
// them: after RQFlushTimeout it fails the card (Bus Master Enable off,
// Err set), and Close then frees the memory without commands.
func TestReceiveErrorFlushNeverComes(t *testing.T) {
	var now atomic.Int64
	n, err, m, mem := open(t, func(o *connectxtest.Options) { o.MAC = [6]byte{2, 0xC7, 0, 0, 0, 2} },
		connectxtest.Faults{FailRx: 0x04, HoldFlush: true}, func(c *connectx.Config) {
			c.RxRing = 16
			c.Now = func() time.Time { return time.Unix(0, now.Load()) }
		})
	if err != nil {
		t.Fatal(err)
	}
	if m.Deliver(udp4(make([]byte, 200), true)) {
		t.Fatal("the failing frame was delivered")
	}
	if fr, err := n.Receive(); fr != nil || !errors.Is(err, connectx.ErrRxError) {
		t.Fatalf("after the error CQE: %v %v", fr, err)
	}
	for i := 0; i < 1000 && n.Err() == nil; i++ {
		now.Add(int64(10 * time.Millisecond)) // 10 s in all: a bound, not a measure
		n.Poll()
		if fr, err := n.Receive(); fr != nil || err != nil {
			t.Fatalf("while the flush is held: %v %v", fr, err)
		}
	}
	if err := n.Err(); !errors.Is(err, connectx.ErrFailed) {
		t.Fatalf("the flush never came and the NIC did not fail: %v; driver %+v", err, n.Stats())
	}
	if m.State().BusMaster {
		t.Fatal("failed with Bus Master Enable on")
	}
	if st := n.Stats(); st.RQRecoveries != 0 {
		t.Fatalf("RQ reset while the card held its buffers: %+v", st)
	}
	if err := n.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if l := mem.Live(); l != 0 {
		t.Errorf("%d DMA allocations left", l)
	}
	for _, v := range m.Violations() {
		t.Errorf("model: %s", v)
	}
}
