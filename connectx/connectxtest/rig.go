package connectxtest

import (
	"sync"
	"testing"

	"github.com/tamanic/tamanic/connectx"
	"github.com/tamanic/tamanic/dma/dmatest"
)

// Rig is a driver on a model over a dmatest.Memory, with completions
// recorded. At cleanup it closes the NIC and fails the test on any model
// or DMA violation, and on anything the function still holds.
type Rig struct {
	Mem   *dmatest.Memory
	Model *Model
	NIC   *connectx.NIC

	mu   sync.Mutex
	Done []TxDone
}

// TxDone is one completion.
type TxDone struct {
	Cookie any
	Err    error
}

// RigOptions tune NewRig.
type RigOptions struct {
	Mem    *dmatest.Memory
	Model  func(*Options)
	Config func(*connectx.Config)
	MAC    [6]byte
	// NoDone leaves the completion callback to the caller.
	NoDone bool
}

// NewRig builds a model and brings a driver up on it.
func NewRig(t testing.TB, o RigOptions) *Rig {
	t.Helper()
	mem := o.Mem
	if mem == nil {
		mem = dmatest.New(t, dmatest.Options{CoherentSize: 4 << 20})
	}
	mo := Options{Mem: mem, MAC: o.MAC}
	if o.Model != nil {
		o.Model(&mo)
	}
	r := &Rig{Mem: mem, Model: New(mo)}
	cfg := connectx.Config{ConfigSpace: r.Model.ConfigSpace(), BAR0: r.Model, Mem: mem}
	if o.Config != nil {
		o.Config(&cfg)
	}
	nic, err := connectx.Open(cfg)
	if err != nil {
		t.Fatalf("connectx.Open: %v", err)
	}
	r.NIC = nic
	if !o.NoDone {
		nic.SetTxDone(func(c any, err error) {
			r.mu.Lock()
			r.Done = append(r.Done, TxDone{c, err})
			r.mu.Unlock()
		})
	}
	t.Cleanup(func() {
		if err := r.NIC.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if st := r.Model.State(); st.Enabled || st.Pages != 0 || st.Objects != 0 || st.BusMaster {
			t.Errorf("function left %+v after Close", st)
		}
		for _, v := range r.Model.Violations() {
			t.Errorf("model: %s", v)
		}
		if l := mem.LiveMappings(); len(l) > 0 {
			t.Errorf("%d mappings left, first %s", len(l), l[0])
		}
	})
	return r
}

// Completions returns and forgets the completions so far.
func (r *Rig) Completions() []TxDone {
	r.mu.Lock()
	defer r.mu.Unlock()
	d := r.Done
	r.Done = nil
	return d
}
