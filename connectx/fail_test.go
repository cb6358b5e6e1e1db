package connectx_test

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/tamanic/tamanic/connectx"
	"github.com/tamanic/tamanic/connectx/connectxtest"
	"github.com/tamanic/tamanic/internal/mmio"
)

// A card that stops answering (it holds every send and completes no
// command) is declared failed, as the firmware's health watch does when the
// health counter stalls. The sends it held come back with ErrFailed and
// unmapped, after its bus mastering is off; from then on no command is
// issued, Close included, sends fail at once, and Close frees every
// allocation. The card, if it comes back, can no longer reach memory.
func TestFailReturnsHeldSendsAndStopsTheCard(t *testing.T) {
	var bar *doorbells
	n, err, m, mem := open(t, nil, connectxtest.Faults{}, func(c *connectx.Config) {
		bar = &doorbells{Regs: c.BAR0}
		c.BAR0 = bar
	})
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
		// The L2 header inline, the rest mapped in place in three pieces.
		if err := n.Transmit([][]byte{frame[:100], frame[100:400], frame[400:]}, true, i); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	n.Poll()
	if len(got) != 0 || len(mem.LiveMappings()) == 0 {
		t.Fatalf("before Fail: %d completions, %d mappings", len(got), len(mem.LiveMappings()))
	}
	cmds := bar.commands.Load()
	cause := errors.New("health counter unchanged for 6s")
	// Each send is unmapped only once the card can no longer read it.
	unmaps := 0
	mem.onUnmap = func() {
		unmaps++
		if m.State().BusMaster {
			t.Errorf("unmap %d with Bus Master Enable still on", unmaps)
		}
	}
	n.Fail(cause)
	mem.onUnmap = nil
	if unmaps != 3*sends { // each send: the rest of the first fragment after the inline bytes, and the other two
		t.Errorf("%d unmaps during Fail, want %d", unmaps, 3*sends)
	}

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
	if err := n.Check(); !errors.Is(err, connectx.ErrFailed) {
		t.Errorf("Check after Fail: %v", err)
	}
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
	if c := bar.commands.Load(); c != cmds {
		t.Errorf("%d commands rung after Fail", c-cmds)
	}
	if err := n.Check(); !errors.Is(err, connectx.ErrClosed) {
		t.Errorf("Check after Close: %v", err)
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

// doorbells counts the command doorbells rung through BAR0.
type doorbells struct {
	mmio.Regs
	commands atomic.Int64
}

func (d *doorbells) Write32(off, v uint32) {
	if off == connectx.InitCmdDbell {
		d.commands.Add(1)
	}
	d.Regs.Write32(off, v)
}

// Check answers while the card's firmware does, and reports a timeout, the
// firmware owner's cue to Fail, once it stops answering commands.
func TestCheckTellsALiveCardFromADeadOne(t *testing.T) {
	n, err, m, _ := open(t, nil, connectxtest.Faults{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Check(); err != nil || !n.Link() {
		t.Fatalf("Check on a live card: %v, link %v", err, n.Link())
	}
	m.SetFaults(connectxtest.Faults{StallAfter: m.Stats().Commands})
	if err := n.Check(); !errors.Is(err, connectx.ErrTimeout) {
		t.Fatalf("Check on a card that stopped answering: %v", err)
	}
	if err := n.Check(); !errors.Is(err, connectx.ErrDead) {
		t.Fatalf("Check after a timeout: %v", err)
	}
	n.Fail(errors.New("no answer"))
	if err := n.Close(); err != nil {
		t.Errorf("Close after Fail: %v", err)
	}
}

func containsCause(err, cause error) bool {
	return err != nil && len(err.Error()) >= len(cause.Error()) &&
		err.Error()[len(err.Error())-len(cause.Error()):] == cause.Error()
}
