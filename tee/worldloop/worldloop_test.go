package worldloop

import (
	"errors"
	"strings"
	"testing"
)

type trace struct {
	log      []string
	switches int
	fail     error
}

func (t *trace) Schedule() error { t.log = append(t.log, "schedule"); t.switches++; return nil }
func (t *trace) Handle() error {
	t.log = append(t.log, "handle")
	if t.switches == 3 {
		return t.fail
	}
	return nil
}
func (t *trace) Resume() { t.log = append(t.log, "resume") }

// TestMaskedRightBeforeEverySwitch: every Schedule comes straight after the
// mask, including the first and every one after a yield (where another
// goroutine may have unmasked IRQs).
func TestMaskedRightBeforeEverySwitch(t *testing.T) {
	tr := &trace{fail: errors.New("stop")}
	err := Run(tr, func() { tr.log = append(tr.log, "mask") }, func() { tr.log = append(tr.log, "yield(unmask)") }, func() bool { return false })
	if !errors.Is(err, tr.fail) {
		t.Fatalf("Run = %v, want the handler's error", err)
	}
	for i, e := range tr.log {
		if e == "schedule" && (i == 0 || tr.log[i-1] != "mask") {
			t.Fatalf("switch %d not right after the mask: %s", i, strings.Join(tr.log, ", "))
		}
	}
	if tr.switches != 3 {
		t.Fatalf("%d switches, want 3", tr.switches)
	}
}

func TestStopsWhenAsked(t *testing.T) {
	tr := &trace{}
	n := 0
	if err := Run(tr, func() {}, func() {}, func() bool { n++; return n > 2 }); err != nil || tr.switches != 2 {
		t.Fatalf("Run = %v after %d switches, want nil after 2", err, tr.switches)
	}
}
