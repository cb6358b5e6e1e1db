package pcie_test

import (
	"errors"
	"testing"
	"time"

	"github.com/tamanic/tamanic/dma"
	"github.com/tamanic/tamanic/pcie"
	"github.com/tamanic/tamanic/pcie/pcietest"
)

// A link that passes through Recovery (replay timeout, receiver errors,
// an L0s/L1 exit) while it stays up is not a lost link: PL DEBUG1 then
// reads LINK_UP with LINK_IN_TRAINING, and Linux (pci-imx6.c
// imx6_pcie_link_up, v3.x-v4.x) waits for the training to end while
// dw_pcie_valid_device refuses one access on a down link and latches
// nothing. Accesses during and after the retrain reach the device, and
// nothing is counted as lost.
func TestRetrainIsNotALostLink(t *testing.T) {
	for _, soc := range []pcie.SoC{pcie.IMX6Q, pcie.IMX7D} {
		t.Run(soc.Name, func(t *testing.T) {
			r, _, d, w := mappedE1000E(t, soc)
			const status = 0x0008_0283
			r.h.Retrain(2 * time.Millisecond)
			if !w.LinkUp() || !r.rc.LinkUp() {
				t.Fatal("a link in Recovery reported down")
			}
			if v := w.Read32(8); v != status {
				t.Errorf("BAR read after a retrain: %#x", v)
			}
			r.h.Retrain(2 * time.Millisecond)
			if v := r.rc.ReadConfig32(d.BDF, 0); v != 0x10D3_8086 {
				t.Errorf("config read during a retrain: %#x", v)
			}
			// Recovery longer than the driver waits: the access is refused,
			// the link is not latched lost, and once Recovery ends
			// accesses go through again.
			r.h.Retrain(time.Second)
			if w.LinkUp() {
				t.Error("a link stuck in Recovery for a second reported usable")
			}
			r.h.Delay(time.Second)
			if v := w.Read32(8); v != status || !w.LinkUp() || !r.rc.LinkUp() {
				t.Errorf("after Recovery ended: read %#x, link %v/%v", v, w.LinkUp(), r.rc.LinkUp())
			}
			if st := r.rc.Stats(); st.LinkLost != 0 {
				t.Errorf("stats %+v: a retrain counted as a lost link", st)
			}
		})
	}
}

// An iATU region takes effect only once its enable reads back (Linux
// __dw_pcie_prog_outbound_atu); the model holds the old translation until
// then, so a configuration or BAR access right after programming would go
// nowhere (a data abort) or to the old target. With the enable reading
// back late the driver polls; when it never does, the access is refused
// with ErrATU instead of going out untranslated.
func TestIATUEnableReadBack(t *testing.T) {
	for _, lag := range []int{0, 3} {
		r := newRig(t, pcietest.Options{SoC: pcie.IMX7D, ATUEnableLag: lag}, nil)
		f, regs := e1000e()
		r.h.Attach(0, f)
		d := start(t, r)[0]
		regs.regs[8] = 0x0008_0283
		w, err := r.rc.Map(d, 0, 0, 4096)
		if err != nil {
			t.Fatalf("lag %d: %v", lag, err)
		}
		if v := w.Read32(8); v != 0x0008_0283 {
			t.Errorf("lag %d: BAR read %#x", lag, v)
		}
		w.Release()
	}
	r := newRig(t, pcietest.Options{SoC: pcie.IMX7D}, nil)
	f, _ := e1000e()
	r.h.Attach(0, f)
	start(t, r)
	// From now on every enable reads back late, past the driver's polls:
	// retargeting the configuration viewport fails and nothing goes out.
	r.h.SetATUEnableLag(100)
	other := pcie.BDF{Bus: 2}
	if v := r.rc.ReadConfig32(other, 0); v != 0xFFFF_FFFF {
		t.Errorf("config read through a region not enabled: %#x", v)
	}
	if err := r.rc.WriteConfig32(other, 4, 0); !errors.Is(err, pcie.ErrATU) {
		t.Errorf("config write through a region not enabled: %v", err)
	}
	if st := r.rc.Stats(); st.ATUTimeouts != 2 {
		t.Errorf("stats %+v, want 2 iATU timeouts", st)
	}
}

// The root port's own MSI Enable gates the MSIs of the devices below it
// (Linux imx6_pcie_probe sets it); RC.EnableMSI opens the gate, and an
// MSI sent with it closed is dropped (a violation in the model).
func TestRootPortMSIEnable(t *testing.T) {
	for _, soc := range socs() {
		r := newRig(t, pcietest.Options{SoC: soc}, nil)
		f, _ := e1000e()
		r.h.Attach(0, f)
		d := start(t, r)[0]
		root := pcie.BDF{}
		if v := r.rc.ReadConfig32(root, 0x50); v&(1<<16) != 0 {
			t.Fatalf("%s: root port MSI Enable set before EnableMSI: %#x", soc.Name, v)
		}
		target, err := r.mem.Alloc(64, 64, dma.Coherent)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.rc.EnableMSI(target.Addr()); err != nil {
			t.Fatal(err)
		}
		if v := r.rc.ReadConfig32(root, 0x50); v&0xFF != pcie.CapMSI || v&(1<<16) == 0 {
			t.Errorf("%s: root port MSI capability %#x: MSI Enable clear", soc.Name, v)
		}
		if err := d.EnableMSI(5); err != nil {
			t.Fatal(err)
		}
		if err := d.SetBusMaster(true); err != nil {
			t.Fatal(err)
		}
		if err := f.SignalMSI(); err != nil || r.rc.ServeMSI(nil) != 1 {
			t.Errorf("%s: MSI through the open gate: %v", soc.Name, err)
		}
		// Closed again behind the driver's back: the MSI is dropped.
		_ = r.rc.WriteConfig32(root, 0x50, r.rc.ReadConfig32(root, 0x50)&^(1<<16))
		if err := f.SignalMSI(); !errors.Is(err, pcietest.ErrMSIGated) || r.rc.MSIPending() != 0 {
			t.Errorf("%s: MSI with the gate closed: %v, pending %#x", soc.Name, err, r.rc.MSIPending())
		}
		r.h.Take()
	}
}

// A NIC driver's register accesses through a Window read no PL DEBUG1 of
// their own: the link state is read once per check interval (10 ms), not
// before every access, which cost one DBI read per BAR access.
func TestLinkCheckOffTheDataPath(t *testing.T) {
	r, _, _, w := mappedE1000E(t, pcie.IMX7D)
	const n = 1000
	dbi0, checks0 := r.h.DBIReads(), r.rc.Stats().LinkChecks
	for i := 0; i < n; i++ {
		_ = w.Read32(8)
		w.Write32(0x10, 0)
	}
	if got := r.h.DBIReads() - dbi0; got > 1 {
		t.Errorf("%d BAR accesses within one interval read the DBI %d times", 2*n, got)
	}
	// With time passing, one check per interval: 1000 accesses 100 µs
	// apart span 100 ms, 10 intervals.
	dbi0 = r.h.DBIReads()
	for i := 0; i < n; i++ {
		r.h.Delay(100 * time.Microsecond)
		_ = w.Read32(8)
	}
	if got := r.h.DBIReads() - dbi0; got < 9 || got > 11 {
		t.Errorf("%d accesses over 100 ms read the DBI %d times, want one per 10 ms", n, got)
	}
	if c := r.rc.Stats().LinkChecks - checks0; c < 9 || c > 12 {
		t.Errorf("%d link checks", c)
	}
}

// BenchmarkWindowRead reports the DBI reads (PL DEBUG1) each BAR read
// costs: 1 when every access looked at the link, 0 now.
func BenchmarkWindowRead(b *testing.B) {
	h := pcietest.New(pcietest.Options{SoC: pcie.IMX7D})
	f, _ := e1000e()
	h.Attach(0, f)
	rc, devs, err := h.Up()
	if err != nil {
		b.Fatal(err)
	}
	w, err := rc.Map(devs[0], 0, 0, 4096)
	if err != nil {
		b.Fatal(err)
	}
	dbi0 := h.DBIReads()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		_ = w.Read32(8)
	}
	b.ReportMetric(float64(h.DBIReads()-dbi0)/float64(b.N), "dbi-reads/op")
}

// A Recovery that ends in L0 may last 24 ms in Recovery.RcvrLock and then
// 48 ms in Recovery.RcvrCfg (PCI Express Base 3.0 4.2.6.4.1, 4.2.6.4.3),
// the link up (LINK_UP with LINK_IN_TRAINING) throughout; the core holds
// the CPU's TLPs meanwhile and Linux gates no BAR access. A BAR write made
// as such a Recovery starts, after the driver has been idle longer than
// the check interval, reaches the device; so does one made while the link
// stays up in Recovery longer than the driver waits. Neither is counted
// as an access to a down link. A read made as a 72 ms Recovery starts is
// issued once it ends. With a 50 ms wait the first write and the read
// were refused.
func TestRecoveryWithinSpecLosesNoWrite(t *testing.T) {
	for _, rec := range []time.Duration{72 * time.Millisecond, time.Second} {
		r := newRig(t, pcietest.Options{SoC: pcie.IMX7D}, nil)
		f, regs := e1000e()
		r.h.Attach(0, f)
		d := start(t, r)[0]
		w, err := r.rc.Map(d, 0, 0, 4096)
		if err != nil {
			t.Fatal(err)
		}
		r.h.Delay(20 * time.Millisecond)
		r.h.Retrain(rec)
		w.Write32(0x18, 5)
		r.h.Delay(rec + 10*time.Millisecond)
		st := r.rc.Stats()
		if got := regs.regs[0x18]; got != 5 || st.LinkDownAccess != 0 || st.LinkLost != 0 {
			t.Errorf("BAR write during a %v Recovery: register reads %#x, want 5; stats %+v", rec, got, st)
		}
		w.Release()
	}
	// A read waits for the Recovery to end (it is issued in L0): within
	// the spec's 72 ms it is not refused.
	r, _, _, w := mappedE1000E(t, pcie.IMX7D)
	r.h.Delay(20 * time.Millisecond)
	r.h.Retrain(72 * time.Millisecond)
	if v := w.Read32(8); v != 0x0008_0283 {
		t.Errorf("BAR read during a 72 ms Recovery: %#x; stats %+v", v, r.rc.Stats())
	}
}
