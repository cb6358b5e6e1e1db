package e1000e_test

import (
	"sync"
	"testing"

	"github.com/tamanic/tamanic/dma"
	"github.com/tamanic/tamanic/dma/dmatest"
	"github.com/tamanic/tamanic/e1000e"
	"github.com/tamanic/tamanic/e1000e/e1000etest"
	"github.com/tamanic/tamanic/internal/stacktest"
	"github.com/tamanic/tamanic/pcie"
	"github.com/tamanic/tamanic/pcie/pcietest"
)

// rig is one 82574L model behind an i.MX7D root complex model, found by
// enumeration and driven through BAR0 in the memory window, with its DMA
// through the dmatest model.
type rig struct {
	t     testing.TB
	h     *pcietest.Host
	rc    *pcie.RC
	dev   *pcie.Device
	model *e1000etest.Model
	mem   *dmatest.Memory
	nic   *e1000e.NIC
	stop  func()

	mu   sync.Mutex
	done []any
	errs []error
}

type rigOptions struct {
	mac     byte
	model   e1000etest.Options
	mode    e1000e.IRQMode
	cfg     func(*e1000e.Config)
	noInit  bool
	noTrace bool
}

func newRig(t testing.TB, o rigOptions) *rig {
	t.Helper()
	if o.mac == 0 {
		o.mac = 1
	}
	if o.model.MAC == ([6]byte{}) {
		o.model.MAC = [6]byte{0x52, 0x54, 0, 0x12, 0x34, o.mac}
	}
	mem := dmatest.New(t, dmatest.Options{CachedSize: 8 << 20, CoherentSize: 256 << 10, NoTrace: o.noTrace})
	h := pcietest.New(pcietest.Options{SoC: pcie.IMX7D, Mem: mem})
	o.model.Mem = mem
	o.model.Nanotime = h.Nanotime
	m := e1000etest.New(o.model)
	h.Attach(0, m.Function())
	rc, devs, err := h.Up()
	if err != nil {
		t.Fatal(err)
	}
	d := e1000e.Find(devs)
	if d == nil {
		t.Fatalf("no 82574L among %v", devs)
	}
	r := &rig{t: t, h: h, rc: rc, dev: d, model: m, mem: mem, stop: func() {}}
	if o.mode == e1000e.MSI {
		b, err := mem.Alloc(64, 64, dma.Coherent)
		if err != nil {
			t.Fatal(err)
		}
		if err := rc.EnableMSI(b.Addr()); err != nil {
			t.Fatal(err)
		}
	}
	cfg := e1000e.Config{Mem: mem, Nanotime: h.Nanotime, Delay: h.Delay, RxRing: 256, TxRing: 256,
		OnTxDone: func(c any, err error) {
			r.mu.Lock()
			r.done = append(r.done, c)
			r.errs = append(r.errs, err)
			r.mu.Unlock()
		}}
	if o.cfg != nil {
		o.cfg(&cfg)
	}
	n, err := e1000e.Attach(rc, d, o.mode, 3, cfg)
	if err != nil {
		t.Fatal(err)
	}
	r.nic = n
	t.Cleanup(func() {
		r.stop()
		for _, v := range m.Take() {
			t.Errorf("82574L model violation: %s", v)
		}
		for _, v := range h.Take() {
			t.Errorf("PCIe model violation: %s", v)
		}
	})
	if !o.noInit {
		if err := n.Init(); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

// serveIRQs runs the interrupt handler as the GIC would: on every INTx
// assertion or MSI, acknowledge the MSI receiver's vectors, then service
// the NIC.
func (r *rig) serveIRQs(msi bool) {
	r.stop = stacktest.Serve(r.model.IRQ(), func() {
		if msi {
			r.rc.ServeMSI(nil)
		}
		r.nic.Interrupt()
	})
}

func (r *rig) completions() ([]any, []error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]any(nil), r.done...), append([]error(nil), r.errs...)
}
