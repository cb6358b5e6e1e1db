package fectest

import (
	"encoding/binary"
	"fmt"
	"io"
	"sync"
	"time"
)

// Action is what a wire filter does with a frame.
type Action int

// Wire filter actions.
const (
	Pass Action = iota
	Drop
	Duplicate
	Delay // hold the frame and send it after the next one (reordering)
)

// Wire joins two models like a crossover cable. Frames travel synchronously
// from the sender's TDAR kick into the receiver's RX ring.
type Wire struct {
	mu      sync.Mutex
	ends    [2]*Model
	pcap    *PcapWriter
	filter  func(from int, frame []byte) Action
	held    [2][]byte
	frames  [2]int
	bytes   [2]int
	dropped [2]int // frames the receiver had no descriptor for
}

// Connect joins a and b.
func Connect(a, b *Model) *Wire {
	w := &Wire{ends: [2]*Model{a, b}}
	a.SetPeer(func(f []byte) { w.send(0, f) })
	b.SetPeer(func(f []byte) { w.send(1, f) })
	return w
}

// Record writes every frame on the wire to p.
func (w *Wire) Record(p *PcapWriter) {
	w.mu.Lock()
	w.pcap = p
	w.mu.Unlock()
}

// SetFilter installs f, called for each frame sent by end from (0 = a).
func (w *Wire) SetFilter(f func(from int, frame []byte) Action) {
	w.mu.Lock()
	w.filter = f
	w.mu.Unlock()
}

// Counts returns frames and bytes sent by each end, and how many of them the
// receiving end had no descriptor for.
func (w *Wire) Counts() (frames, bytes, noDesc [2]int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.frames, w.bytes, w.dropped
}

func (w *Wire) send(from int, f []byte) {
	w.mu.Lock()
	act := Pass
	if w.filter != nil {
		act = w.filter(from, f)
	}
	w.frames[from]++
	w.bytes[from] += len(f)
	if w.pcap != nil {
		_ = w.pcap.WritePacket(time.Now(), f)
	}
	var out [][]byte
	switch act {
	case Drop:
	case Duplicate:
		out = [][]byte{f, f}
	case Delay:
		if w.held[from] != nil {
			out = [][]byte{w.held[from]}
		}
		w.held[from] = f
	default:
		out = [][]byte{f}
		if h := w.held[from]; h != nil {
			out = append(out, h)
			w.held[from] = nil
		}
	}
	to := w.ends[1-from]
	w.mu.Unlock()
	for _, g := range out {
		if !to.Deliver(g, RxOK) {
			w.mu.Lock()
			w.dropped[from]++
			w.mu.Unlock()
		}
	}
}

// PcapWriter writes frames in libpcap format (LINKTYPE_ETHERNET).
type PcapWriter struct {
	mu sync.Mutex
	w  io.Writer
}

// NewPcapWriter writes the pcap file header to w.
func NewPcapWriter(w io.Writer) (*PcapWriter, error) {
	var h [24]byte
	binary.LittleEndian.PutUint32(h[0:], 0xA1B2C3D4)
	binary.LittleEndian.PutUint16(h[4:], 2)
	binary.LittleEndian.PutUint16(h[6:], 4)
	binary.LittleEndian.PutUint32(h[16:], 65535)
	binary.LittleEndian.PutUint32(h[20:], 1)
	if _, err := w.Write(h[:]); err != nil {
		return nil, fmt.Errorf("fectest: pcap header: %w", err)
	}
	return &PcapWriter{w: w}, nil
}

// WritePacket appends one frame.
func (p *PcapWriter) WritePacket(t time.Time, f []byte) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var h [16]byte
	binary.LittleEndian.PutUint32(h[0:], uint32(t.Unix()))
	binary.LittleEndian.PutUint32(h[4:], uint32(t.Nanosecond()/1000))
	binary.LittleEndian.PutUint32(h[8:], uint32(len(f)))
	binary.LittleEndian.PutUint32(h[12:], uint32(len(f)))
	if _, err := p.w.Write(h[:]); err != nil {
		return fmt.Errorf("fectest: pcap record: %w", err)
	}
	if _, err := p.w.Write(f); err != nil {
		return fmt.Errorf("fectest: pcap record: %w", err)
	}
	return nil
}
