package connectx_test

import (
	"errors"
	"sync"
	"testing"

	"github.com/tamanic/tamanic/connectx"
	"github.com/tamanic/tamanic/connectx/connectxtest"
)

// A card that stops answering (it holds every send and completes no
// command) is declared failed, as the firmware's health watch does when the
// health counter stalls. The sends it held come back with ErrFailed and
// unmapped, after its bus mastering is off; from then on no command is
// issued, Close included, sends fail at once, and Close frees every
// allocation. The card, if it comes back, can no longer reach memory.
func TestFailReturnsHeldSendsAndStopsTheCard(t *testing.T) {
	n, err, m, mem := open(t, nil, connectxtest.Faults{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	got := map[int]error{}
	n.SetTxDone(func(c any, err error) {
		mu.Lock()
		defer mu.Unlock()
		if _, dup := got[c.(int)]; dup {
			t.Errorf("send %d completed twice", c)
		}
		got[c.(int)] = err
	})
	m.SetFaults(connectxtest.Faults{HoldTx: true, StallAfter: m.Stats().Commands})
	frame := udp4(make([]byte, 600), false)
	const sends = 10
	for i := range sends {
		// Headers inline, the rest mapped in place in two pieces.
		if err := n.Transmit([][]byte{frame[:100], frame[100:400], frame[400:]}, true, i); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	n.Poll()
	if len(got) != 0 || len(mem.LiveMappings()) == 0 {
		t.Fatalf("before Fail: %d completions, %d mappings", len(got), len(mem.LiveMappings()))
	}
	cmds := n.Stats().Commands
	cause := errors.New("health counter unchanged for 6s")
	n.Fail(cause)

	mu.Lock()
	if len(got) != sends {
		t.Errorf("%d of %d held sends completed", len(got), sends)
	}
	for i, err := range got {
		if !errors.Is(err, connectx.ErrFailed) {
			t.Errorf("send %d completed with %v, want ErrFailed", i, err)
		}
	}
	mu.Unlock()
	if l := mem.LiveMappings(); len(l) != 0 {
		t.Errorf("%d mappings left after Fail, first %s", len(l), l[0])
	}
	if st := m.State(); st.BusMaster {
		t.Error("bus master still on after Fail")
	}
	if n.Link() || !errors.Is(n.Err(), connectx.ErrFailed) {
		t.Errorf("after Fail: link %v, Err %v", n.Link(), n.Err())
	}
	if err := n.Transmit([][]byte{frame}, true, sends); !errors.Is(err, connectx.ErrFailed) || n.Full(err) {
		t.Errorf("Transmit after Fail: %v", err)
	}
	n.Poll()
	n.Fail(errors.New("again"))
	if err := n.Err(); err == nil || !errors.Is(err, connectx.ErrFailed) || !containsCause(err, cause) {
		t.Errorf("Err after a second Fail: %v", err)
	}

	// The card comes back: it cannot fetch the WQEs it was rung for.
	m.ReleaseTx()
	if st := m.Stats(); st.DMABlocked == 0 || st.TxFrames != 0 {
		t.Errorf("card after Fail: %d doorbells blocked, %d frames sent", st.DMABlocked, st.TxFrames)
	}

	if err := n.Close(); err != nil {
		t.Errorf("Close after Fail: %v", err)
	}
	if c := n.Stats().Commands; c != cmds {
		t.Errorf("%d commands issued after Fail", c-cmds)
	}
	if l := mem.Live(); l != 0 {
		t.Errorf("%d DMA allocations left after Close", l)
	}
	if len(got) != sends {
		t.Errorf("%d completions after Close, want %d", len(got), sends)
	}
	for _, v := range m.Violations() {
		t.Errorf("model: %s", v)
	}
}

func containsCause(err, cause error) bool {
	return err != nil && len(err.Error()) >= len(cause.Error()) &&
		err.Error()[len(err.Error())-len(cause.Error()):] == cause.Error()
}
