package phylink

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tamanic/tamanic/fec"
	"github.com/tamanic/tamanic/fec/fectest"
)

// follow waits until the NIC's link is want (the watch runs every
// millisecond here; the bound only keeps a broken watch from hanging).
func follow(t *testing.T, n *fec.NIC, want fec.Link) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(time.Millisecond) {
		if n.Link() == want {
			return
		}
	}
	t.Fatalf("the MAC runs %+v, the PHY has %+v", n.Link(), want)
}

// TestStartWatchesTheLink: with and without the PHY reset, the MAC
// follows the link through a cable pulled, a partner that comes back at
// 10 Mb/s half duplex, and one back at 100 Mb/s full duplex.
func TestStartWatchesTheLink(t *testing.T) {
	for _, noReset := range []bool{false, true} {
		r := fectest.NewRig(t, fectest.RigOptions{})
		stop := make(chan struct{})
		log := &syncLog{}
		p, err := Start(r.NIC, Config{Name: "test", Link: fec.LinkConfig{Poll: time.Microsecond}, NoReset: noReset,
			Poll: time.Millisecond, Log: log}, stop)
		if err != nil || p == nil {
			t.Fatalf("noReset %v: %v %v", noReset, p, err)
		}
		full := fec.Link{Up: true, Speed: 100, FullDuplex: true}
		follow(t, r.NIC, full)
		r.Model.SetLink(false)
		follow(t, r.NIC, fec.Link{Speed: 100, FullDuplex: true})
		r.Model.SetPartner(fec.ADV_10HALF, false, nil)
		r.Model.SetLink(true)
		follow(t, r.NIC, fec.Link{Up: true, Speed: 10})
		r.Model.SetLink(false)
		r.Model.SetPartner(fec.ADV_100FULL|fec.ADV_100HALF|fec.ADV_10FULL|fec.ADV_10HALF, false, nil)
		r.Model.SetLink(true)
		follow(t, r.NIC, full)
		// The watch writes its line after it has reprogrammed the MAC,
		// so the last line may come a moment after follow saw the link.
		for _, want := range []string{"test: PHY 2, link", "test: link down", "test: link 10 Mb/s half duplex", "test: link 100 Mb/s full duplex"} {
			if !eventuallyContains(log, want) {
				t.Errorf("noReset %v: no %q in the log:\n%s", noReset, want, log)
			}
		}
		close(stop)
		st := r.NIC.Stats()
		if st.LinkDowns < 2 || st.LinkUps < 2 {
			t.Errorf("noReset %v: %d link downs, %d ups counted", noReset, st.LinkDowns, st.LinkUps)
		}
	}
}

// eventuallyContains waits (at most 10 s) for want to appear in l.
func eventuallyContains(l *syncLog, want string) bool {
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(time.Millisecond) {
		if strings.Contains(l.String(), want) {
			return true
		}
	}
	return false
}

// syncLog is a log written by the watch goroutine and read by the test.
type syncLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestStartWithoutPHY: no PHY answers: no error, no link watch, a line
// says so, and the MAC keeps the link Init assumed.
func TestStartWithoutPHY(t *testing.T) {
	for _, noReset := range []bool{false, true} {
		r := fectest.NewRig(t, fectest.RigOptions{})
		var log strings.Builder
		stop := make(chan struct{})
		t.Cleanup(func() { close(stop) })
		p, err := Start(r.NIC, Config{Name: "board: ENET9", Link: fec.LinkConfig{Addrs: []int{7}}, NoReset: noReset, Log: &log}, stop)
		if err != nil || p != nil {
			t.Fatalf("noReset %v: %v %v", noReset, p, err)
		}
		if !strings.Contains(log.String(), "board: ENET9") || !strings.Contains(log.String(), "link not managed") {
			t.Errorf("log %q", log.String())
		}
		if l := r.NIC.Link(); !l.Up || l.Speed != 100 || !l.FullDuplex {
			t.Errorf("link %+v", l)
		}
	}
}

// TestStartReappliesBoardSettings: the board's settings are written after
// the PHY's reset, and an error there is the board's error.
func TestStartReappliesBoardSettings(t *testing.T) {
	r := fectest.NewRig(t, fectest.RigOptions{})
	called := 0
	_, err := Start(r.NIC, Config{Name: "b", Link: fec.LinkConfig{Poll: time.Microsecond, AfterReset: func(p *fec.PHY) error {
		called++
		return fec.ErrTimeout
	}}}, make(chan struct{}))
	if called != 1 || err == nil || !strings.Contains(err.Error(), "b link") {
		t.Fatalf("AfterReset called %d times, error %v", called, err)
	}
}

// TestStrandedFrameLeavesOnTheNextTick: interrupt-driven, with the
// model's asynchronous uDMA. Frame A is sent and its interrupt raised; as
// the uDMA is closing (TDAR still set) frame B is queued, and its kick is
// skipped (ERR007885's rule); A's interrupt is then serviced while TDAR is
// still set, so nothing re-kicks, and the uDMA stops without B. No
// interrupt is pending: B would wait for the next Transmit. The link
// watch's tick reclaims the ring, which re-kicks (ERR006358's rule), with
// or without a PHY.
func TestStrandedFrameLeavesOnTheNextTick(t *testing.T) {
	for _, addrs := range [][]int{nil, {7}} { // the model's PHY, and none
		r := fectest.NewRig(t, fectest.RigOptions{SoC: fec.IMX6UL,
			Model:  func(o *fectest.Options) { o.AsyncTx = true },
			Config: func(c *fec.Config) { c.Interrupts = true }})
		f := make([]byte, 100)
		f[0] = 2
		copy(f[6:], []byte{2, 0, 0, 0, 0, 1})
		f[12], f[13] = 0x88, 0xB5
		if err := r.NIC.Transmit([][]byte{f}, fec.TxOptions{}, nil); err != nil {
			t.Fatal(err)
		}
		r.Model.StepTx() // A sent, its interrupt raised
		r.Model.StepTx() // the uDMA closing, TDAR still set
		if err := r.NIC.Transmit([][]byte{f}, fec.TxOptions{}, nil); err != nil {
			t.Fatal(err)
		}
		if r.NIC.Stats().Tx.KicksSkipped == 0 {
			t.Fatal("the kick was not skipped: the test shows nothing")
		}
		for len(r.Model.IRQ()) > 0 {
			<-r.Model.IRQ()
			r.NIC.Interrupt()
		}
		for i := 0; i < 10; i++ {
			r.Model.StepTx()
		}
		if got := r.Model.Stats().TxFrames; got != 1 || len(r.Model.IRQ()) != 0 {
			t.Fatalf("before the watch: %d frames sent, %d interrupts pending: not stranded", got, len(r.Model.IRQ()))
		}
		stop := make(chan struct{})
		if _, err := Start(r.NIC, Config{Name: "board: ENET1", Link: fec.LinkConfig{Addrs: addrs}, Poll: 5 * time.Millisecond}, stop); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for r.Model.Stats().TxFrames < 2 && time.Now().Before(deadline) {
			r.Model.StepTx()
			time.Sleep(time.Millisecond)
		}
		close(stop)
		if got := r.Model.Stats().TxFrames; got != 2 {
			t.Errorf("PHY addresses %v: %d frames sent: the stranded frame never left (%+v)", addrs, got, r.NIC.Stats().Tx)
		}
	}
}
