package connectxtest

import (
	"sync"

	"github.com/tamanic/tamanic/fec/fectest"
)

// Port is one end of a Wire: a device model that sends frames to a peer
// function and accepts frames delivered to it.
type Port interface {
	SetPeer(func([]byte))
	Deliver(frame []byte) bool
}

// ENET adapts an ENET model (package fec/fectest) to a Port, so a ConnectX
// model and an ENET model can share a wire.
func ENET(m *fectest.Model) Port { return enet{m} }

type enet struct{ m *fectest.Model }

func (e enet) SetPeer(f func([]byte))    { e.m.SetPeer(f) }
func (e enet) Deliver(frame []byte) bool { return e.m.Deliver(frame, fectest.RxOK) }

// Action is what a wire filter does with a frame.
type Action int

// Wire filter actions.
const (
	Pass Action = iota
	Drop
	Delay // hold the frame and send it after the next one (reordering)
)

// Wire joins two ports like a cable. Frames travel synchronously from the
// sender's doorbell into the receiver's queue.
type Wire struct {
	mu     sync.Mutex
	ends   [2]Port
	filter func(from int, frame []byte) Action
	tap    func(from int, frame []byte)
	held   [2][]byte
	frames [2]int
	lost   [2]int // frames the receiver had no buffer for
}

// Connect joins a and b.
func Connect(a, b Port) *Wire {
	w := &Wire{ends: [2]Port{a, b}}
	a.SetPeer(func(f []byte) { w.send(0, f) })
	b.SetPeer(func(f []byte) { w.send(1, f) })
	return w
}

// SetFilter installs f, called for each frame sent by end from (0 = a).
func (w *Wire) SetFilter(f func(from int, frame []byte) Action) {
	w.mu.Lock()
	w.filter = f
	w.mu.Unlock()
}

// SetTap installs f, shown every frame put on the wire (before the filter).
func (w *Wire) SetTap(f func(from int, frame []byte)) {
	w.mu.Lock()
	w.tap = f
	w.mu.Unlock()
}

// Counts returns the frames each end sent and how many of them the other
// end had no buffer for.
func (w *Wire) Counts() (frames, lost [2]int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.frames, w.lost
}

func (w *Wire) send(from int, f []byte) {
	w.mu.Lock()
	w.frames[from]++
	if w.tap != nil {
		w.tap(from, f)
	}
	act := Pass
	if w.filter != nil {
		act = w.filter(from, f)
	}
	var out [][]byte
	switch act {
	case Drop:
	case Delay:
		if h := w.held[from]; h != nil {
			out = append(out, h)
		}
		w.held[from] = f
	default:
		out = append(out, f)
		if h := w.held[from]; h != nil {
			out = append(out, h)
			w.held[from] = nil
		}
	}
	to := w.ends[1-from]
	w.mu.Unlock()
	for _, g := range out {
		if !to.Deliver(g) {
			w.mu.Lock()
			w.lost[from]++
			w.mu.Unlock()
		}
	}
}
