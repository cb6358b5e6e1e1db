package pcie_test

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tamanic/tamanic/dma"
	"github.com/tamanic/tamanic/dma/dmatest"
	"github.com/tamanic/tamanic/pcie"
	"github.com/tamanic/tamanic/pcie/pcietest"
)

// regFile is a BAR handler: a sparse register file that logs accesses.
type regFile struct {
	regs  map[uint32]uint32
	reads []uint32
}

func newRegFile() *regFile { return &regFile{regs: map[uint32]uint32{}} }

func (r *regFile) Read32(off uint32) uint32 { r.reads = append(r.reads, off); return r.regs[off] }
func (r *regFile) Write32(off, v uint32)    { r.regs[off] = v }

type rig struct {
	t   *testing.T
	h   *pcietest.Host
	rc  *pcie.RC
	mem *dmatest.Memory
}

func newRig(t *testing.T, opts pcietest.Options, mod func(*pcie.Config)) *rig {
	t.Helper()
	if opts.Mem == nil {
		opts.Mem = dmatest.New(t, dmatest.Options{CachedSize: 1 << 20, CoherentSize: 64 << 10})
	}
	h := pcietest.New(opts)
	cfg := h.Config()
	if mod != nil {
		mod(&cfg)
	}
	rc, err := pcie.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{t: t, h: h, rc: rc, mem: opts.Mem}
	t.Cleanup(func() {
		for _, v := range h.Take() {
			t.Errorf("model violation: %s", v)
		}
	})
	return r
}

// e1000e is the endpoint QEMU puts behind the i.MX7D root port: Intel
// 82574L, 8086:10d3, BAR0 128 KiB memory, BAR1 128 KiB flash, BAR2 32 bytes
// I/O, BAR3 16 KiB MSI-X, PCIe, MSI, MSI-X capabilities.
func e1000e() (*pcietest.Function, *regFile) {
	f := pcietest.NewEndpoint(0x8086, 0x10D3, 0x020000)
	r := newRegFile()
	r.regs[0x8] = 0x0008_0283 // STATUS as QEMU reports it
	f.SetBAR(0, 128<<10, pcietest.Mem32, r)
	f.SetBAR(1, 128<<10, pcietest.Mem32, newRegFile())
	f.SetBAR(2, 32, pcietest.IO, nil)
	f.SetBAR(3, 16<<10, pcietest.Mem32, newRegFile())
	f.SetPin(1)
	f.AddPCIe(pcie.TypeEndpoint, 1, 1)
	f.AddMSI(true)
	f.AddMSIX(5, 3, 0, 3, 0x2000)
	return f, r
}

func socs() []pcie.SoC { return []pcie.SoC{pcie.IMX6Q, pcie.IMX6SX, pcie.IMX7D} }

func start(t *testing.T, r *rig) []*pcie.Device {
	t.Helper()
	if err := r.rc.Start(); err != nil {
		t.Fatal(err)
	}
	devs, err := r.rc.Enumerate()
	if err != nil {
		t.Fatal(err)
	}
	return devs
}

// switchPorts are the device numbers of switchRig's populated
// downstream ports.
var switchPorts = []int{1, 4}

// mappedE1000E is a root complex on soc with an 82574L model enumerated
// and the first 4 KiB of its BAR0 mapped.
func mappedE1000E(t *testing.T, soc pcie.SoC) (*rig, *pcietest.Function, *pcie.Device, *pcie.Window) {
	t.Helper()
	r := newRig(t, pcietest.Options{SoC: soc}, nil)
	f, _ := e1000e()
	r.h.Attach(0, f)
	d := start(t, r)[0]
	w, err := r.rc.Map(d, 0, 0, 4096)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Release)
	return r, f, d, w
}

func TestVanishingDevice(t *testing.T) {
	r, f, d, w := mappedE1000E(t, pcie.IMX7D)
	f.Vanish()
	if d.Present() {
		t.Fatal("vanished device present")
	}
	if _, err := d.ReadConfig32(0); !errors.Is(err, pcie.ErrDeviceGone) {
		t.Errorf("ReadConfig32: %v", err)
	}
	if err := d.WriteConfig32(4, 0); !errors.Is(err, pcie.ErrDeviceGone) {
		t.Errorf("WriteConfig32: %v", err)
	}
	if err := d.SetBusMaster(true); !errors.Is(err, pcie.ErrDeviceGone) {
		t.Errorf("SetBusMaster: %v", err)
	}
	if _, err := d.Command(); !errors.Is(err, pcie.ErrDeviceGone) {
		t.Errorf("Command: %v", err)
	}
	// Its BAR no longer decodes: QEMU and the silicon abort; the model
	// reports it. The driver cannot prevent that read, only detect the
	// device's absence afterwards.
	_ = w.Read32(8)
	if v := r.h.Take(); len(v) != 1 || !strings.Contains(v[0], "no function decodes") {
		t.Fatalf("violations %v", v)
	}
	if _, err := d.ReadConfig32(0x1000); !errors.Is(err, pcie.ErrRange) {
		t.Errorf("offset check: %v", err)
	}
	if err := f.DMAWrite(0x1000, []byte{1}); !errors.Is(err, pcietest.ErrGone) {
		t.Errorf("DMA from a vanished function: %v", err)
	}
}

// The link goes down under a mapped BAR (the card loses power). BAR
// accesses look at the link only when the last look is older than the
// check interval, or after a read returns all-ones (the data path reads
// no PL DEBUG1 of its own; see TestLinkCheckOffTheDataPath): the first
// access after the interval finds it down before sending anything, so no
// TLP goes out on a dead link (an external abort on the i.MX6, a
// violation in the model); reads give all-ones, writes are dropped,
// configuration reads too, and the loss is counted once. Within the
// interval one read reaches the dead link, and its all-ones answer
// records the loss, so nothing after it does.
func TestLinkLossIsCaughtBeforeTheBus(t *testing.T) {
	for _, soc := range []pcie.SoC{pcie.IMX6Q, pcie.IMX7D} {
		for _, late := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/after-interval=%v", soc.Name, late), func(t *testing.T) {
				r, _, d, w := mappedE1000E(t, soc)
				if v := w.Read32(0); v == 0xFFFF_FFFF || !w.LinkUp() || !r.rc.LinkUp() {
					t.Fatalf("before: read %#x, link %v/%v", v, w.LinkUp(), r.rc.LinkUp())
				}
				r.h.DropLink()
				refused := 3
				if late {
					r.h.Delay(10 * time.Millisecond)
				} else {
					refused = 2
				}
				if v := w.Read32(0); v != 0xFFFF_FFFF {
					t.Errorf("BAR read with the link down: %#x", v)
				}
				if v := r.h.Take(); late && len(v) != 0 || !late && len(v) != 1 {
					t.Errorf("accesses that reached the dead link: %v", v)
				}
				w.Write32(0x8, 0)
				if v := r.rc.ReadConfig32(d.BDF, 0); v != 0xFFFF_FFFF {
					t.Errorf("config read with the link down: %#x", v)
				}
				if w.LinkUp() || r.rc.LinkUp() {
					t.Error("link still reported up")
				}
				if v := r.h.Take(); len(v) != 0 {
					t.Errorf("accesses reached the dead link once it was known down: %v", v)
				}
				if st := r.rc.Stats(); st.LinkLost != 1 || st.LinkDownAccess != refused {
					t.Errorf("stats %+v, want 1 loss and %d refused accesses", st, refused)
				}
			})
		}
	}
}

func TestDMANeedsBusMasterAndReachesMemory(t *testing.T) {
	r := newRig(t, pcietest.Options{SoC: pcie.IMX7D}, nil)
	f, _ := e1000e()
	r.h.Attach(0, f)
	d := start(t, r)[0]
	buf, err := r.mem.Alloc(256, dma.CacheLine, dma.Cached)
	if err != nil {
		t.Fatal(err)
	}
	r.mem.SyncForDevice(&buf, 0, buf.Len(), dma.FromDevice)
	msg := []byte("written by the device over PCIe")
	if err := f.DMAWrite(buf.Addr(), msg); !errors.Is(err, pcietest.ErrNoMaster) {
		t.Fatalf("DMA without bus mastering: %v", err)
	}
	if v := r.h.Take(); len(v) != 1 {
		t.Fatalf("violations %v", v)
	}
	if err := d.SetBusMaster(true); err != nil {
		t.Fatal(err)
	}
	if err := f.DMAWrite(buf.Addr(), msg); err != nil {
		t.Fatal(err)
	}
	r.mem.SyncForCPU(&buf, 0, buf.Len(), dma.FromDevice)
	if !bytes.Equal(buf.Bytes()[:len(msg)], msg) {
		t.Fatalf("memory holds %q", buf.Bytes()[:len(msg)])
	}
	got := make([]byte, len(msg))
	r.mem.SyncForDevice(&buf, 0, buf.Len(), dma.ToDevice)
	if err := f.DMARead(buf.Addr(), got); err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("DMA read %q %v", got, err)
	}
	// A bus address inside the root port window is peer-to-peer.
	if err := f.DMAWrite(dma.Addr(d.BARs[0].Addr), msg); !errors.Is(err, pcietest.ErrPeer) {
		t.Fatalf("DMA into the window: %v", err)
	}
	r.h.Take()
	if err := d.SetBusMaster(false); err != nil {
		t.Fatal(err)
	}
	if f.Command()&4 != 0 {
		t.Fatal("bus mastering still on")
	}
}

func TestLinkDropsWhenGlueResets(t *testing.T) {
	r := newRig(t, pcietest.Options{SoC: pcie.IMX6SX}, nil)
	f, _ := e1000e()
	r.h.Attach(0, f)
	start(t, r)
	// Another driver asserting the PHY reset takes the link down; the
	// model then refuses TLPs and reports them.
	r.h.GPR().Write32(0x14, 1<<19)
	if r.h.LinkUp() {
		t.Fatal("link up with the PHY in reset")
	}
	_ = r.h.ConfigWindow().Read32(0)
	if v := r.h.Take(); len(v) != 1 || !strings.Contains(v[0], "link down") {
		t.Fatalf("violations %v", v)
	}
}
