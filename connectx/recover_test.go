package connectx_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tamanic/tamanic/connectx"
	"github.com/tamanic/tamanic/connectx/connectxtest"
)

// TestSendErrorWaitsForFlush: after an error CQE the card still owns
// every WQE behind the failed one until it returns each with a flush
// error CQE, which may come late. The driver completes nothing it has no
// CQE for, refuses new sends with a retryable error meanwhile, and resets
// the SQ only once the last flush CQE is in (Linux
// mlx5e_tx_reporter_err_cqe_recover); then sends go through again.
func TestSendErrorWaitsForFlush(t *testing.T) {
	a, _, w := pairRigs(t, connectxtest.RigOptions{Model: func(o *connectxtest.Options) { o.PortMTU = 1000 }})
	n := 0
	w.SetTap(func(int, []byte) { n++ })
	a.Model.SetFaults(connectxtest.Faults{HoldTx: true, HoldFlush: true})
	if err := a.NIC.Transmit([][]byte{udp4(make([]byte, 1400), true)}, false, "big"); err != nil {
		t.Fatal(err)
	}
	const queued = 5
	for i := 0; i < queued; i++ {
		if err := a.NIC.Transmit([][]byte{udp4(make([]byte, 100), true)}, false, i); err != nil {
			t.Fatal(err)
		}
	}
	a.Model.ReleaseTx() // the card runs the WQEs: the first fails, the SQ is in ERR
	a.Model.SetFaults(connectxtest.Faults{HoldFlush: true})
	a.NIC.Poll()
	d := a.Completions()
	if len(d) != 1 || d[0].Cookie != "big" || !errors.Is(d[0].Err, connectx.ErrSendFailed) {
		t.Fatalf("after the error CQE alone: completions %+v (the card still owns the other %d)", d, queued)
	}
	err := a.NIC.Transmit([][]byte{udp4(make([]byte, 100), true)}, false, "during")
	if err == nil || !a.NIC.Full(err) {
		t.Fatalf("send while the SQ waits for its flush: %v, want a Full error", err)
	}
	if v := a.Model.Violations(); len(v) != 1 || !strings.Contains(v[0], "MTU") {
		t.Fatalf("model saw %v", v)
	}
	a.Model.ReleaseFlush()
	a.NIC.Poll()
	d = a.Completions()
	if len(d) != queued {
		t.Fatalf("%d completions after the flush CQEs, want %d", len(d), queued)
	}
	for i, c := range d {
		if c.Cookie != i || !errors.Is(c.Err, connectx.ErrFlushed) {
			t.Fatalf("completion %d: %+v, want cookie %d flushed", i, c, i)
		}
	}
	for i := 0; i < 40; i++ {
		if err := a.NIC.Transmit([][]byte{udp4(make([]byte, 100), true)}, false, 100+i); err != nil {
			t.Fatalf("send %d after recovery: %v", i, err)
		}
	}
	a.NIC.Poll()
	d = a.Completions()
	if len(d) != 40 || n != 40 {
		t.Fatalf("%d completions, %d frames after recovery", len(d), n)
	}
	for _, c := range d {
		if c.Err != nil {
			t.Fatalf("after recovery: %+v", c)
		}
	}
	if st := a.NIC.Stats(); st.SQRecoveries != 1 {
		t.Fatalf("recoveries %d", st.SQRecoveries)
	}
	if st := a.Model.Stats(); st.TxFlushed != queued {
		t.Fatalf("model flushed %d WQEs, want %d", st.TxFlushed, queued)
	}
}

// TestSendErrorFlushNeverComes: when the flush CQEs do not come, the
// driver does not reuse the ring nor unmap what the card owns: after
// SQFlushTimeout it fails the card (Bus Master Enable off) and only then
// completes the sends with an error.
func TestSendErrorFlushNeverComes(t *testing.T) {
	n, err, m, mem := open(t, func(o *connectxtest.Options) { o.PortMTU = 1000 }, connectxtest.Faults{HoldTx: true, HoldFlush: true},
		func(c *connectx.Config) { c.SQFlushTimeout = 50 * time.Millisecond })
	if err != nil {
		t.Fatal(err)
	}
	var got []connectxtest.TxDone
	n.SetTxDone(func(c any, err error) {
		if c == "held" && m.State().BusMaster {
			t.Error("a send the card owns completed with Bus Master Enable on")
		}
		got = append(got, connectxtest.TxDone{Cookie: c, Err: err})
	})
	if err := n.Transmit([][]byte{udp4(make([]byte, 1400), true)}, false, "big"); err != nil {
		t.Fatal(err)
	}
	if err := n.Transmit([][]byte{udp4(make([]byte, 100), true)}, false, "held"); err != nil {
		t.Fatal(err)
	}
	m.ReleaseTx()
	m.SetFaults(connectxtest.Faults{HoldFlush: true})
	n.Poll()
	if len(got) != 1 || got[0].Cookie != "big" {
		t.Fatalf("completions %+v", got)
	}
	for n.Err() == nil {
		n.Poll()
		time.Sleep(5 * time.Millisecond)
	}
	if len(got) != 2 || got[1].Cookie != "held" || !errors.Is(got[1].Err, connectx.ErrFailed) {
		t.Fatalf("completions %+v", got)
	}
	if err := n.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if l := mem.Live(); l != 0 {
		t.Errorf("%d DMA allocations left", l)
	}
	m.Violations() // the oversize frame
}
