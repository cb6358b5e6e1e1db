package fectest

import (
	"sync"
	"testing"

	"github.com/tamanic/tamanic/dma/dmatest"
	"github.com/tamanic/tamanic/fec"
)

// Rig is a NIC driving a Model over a dmatest.Memory, with its completions
// recorded. Tests build one per end of a wire.
type Rig struct {
	Mem   *dmatest.Memory
	Model *Model
	NIC   *fec.NIC

	mu   sync.Mutex
	Done []TxDone // completions, in order
}

// TxDone is one OnTxDone call.
type TxDone struct {
	Cookie any
	Err    error
}

// RigOptions tune NewRig.
type RigOptions struct {
	SoC    fec.SoC
	Config func(*fec.Config) // adjusts the driver configuration
	Model  func(*Options)    // adjusts the model
	// Prepare runs on the model before the driver's Init (state left by a
	// boot loader, say).
	Prepare func(*Model)
	Mem     *dmatest.Memory // shared memory (default: a new one)
	MAC     [6]byte
	NoTrace bool
	// NoDone skips recording completions (for benchmarks).
	NoDone bool
}

// NewRig builds and initialises a NIC on a model. At cleanup it fails t on
// any model or DMA violation.
func NewRig(t testing.TB, o RigOptions) *Rig {
	t.Helper()
	if o.SoC == 0 {
		o.SoC = fec.IMX6UL
	}
	caps, err := fec.CapsFor(o.SoC)
	if err != nil {
		t.Fatal(err)
	}
	if o.MAC == [6]byte{} {
		o.MAC = [6]byte{0x02, 0, 0, 0, 0, 1}
	}
	mem := o.Mem
	if mem == nil {
		mem = dmatest.New(t, dmatest.Options{NoTrace: o.NoTrace})
	}
	mo := Options{Caps: caps, Mem: mem}
	if o.Model != nil {
		o.Model(&mo)
	}
	r := &Rig{Mem: mem, Model: New(mo)}
	cfg := fec.Config{Regs: r.Model, Mem: mem, Caps: caps, MAC: o.MAC, TxRing: 64, RxRing: 64}
	if !o.NoDone {
		cfg.OnTxDone = func(c any, err error) {
			r.mu.Lock()
			r.Done = append(r.Done, TxDone{c, err})
			r.mu.Unlock()
		}
	}
	if o.Config != nil {
		o.Config(&cfg)
	}
	if r.NIC, err = fec.New(cfg); err != nil {
		t.Fatal(err)
	}
	if o.Prepare != nil {
		o.Prepare(r.Model)
	}
	if err := r.NIC.Init(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, v := range r.Model.Violations() {
			t.Errorf("model: %s", v)
		}
	})
	return r
}

// Completions returns and clears the recorded completions.
func (r *Rig) Completions() []TxDone {
	r.mu.Lock()
	defer r.mu.Unlock()
	d := r.Done
	r.Done = nil
	return d
}
