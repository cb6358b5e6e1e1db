package fec_test

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tamanic/tamanic/bounce"
	"github.com/tamanic/tamanic/dma"
	"github.com/tamanic/tamanic/dma/dmatest"
	"github.com/tamanic/tamanic/fec"
	"github.com/tamanic/tamanic/fec/fectest"
	"github.com/tamanic/tamanic/internal/mmio"
	"github.com/tamanic/tamanic/tso"
)

func TestInitProgramsTheMACAsTheManualRequires(t *testing.T) {
	for _, soc := range fec.AllSoCs {
		caps, _ := fec.CapsFor(soc)
		r := fectest.NewRig(t, fectest.RigOptions{SoC: soc})
		m := r.Model
		ecr := m.Read32(fec.ENETx_ECR)
		if ecr&fec.ECR_ETHEREN == 0 || ecr&fec.ECR_DBSWP == 0 || ecr&fec.ECR_EN1588 == 0 {
			t.Errorf("%s: ECR %#x lacks ETHEREN|DBSWP|EN1588", caps.Name, ecr)
		}
		rcr := m.Read32(fec.ENETx_RCR)
		if rcr&fec.RCR_LOOP != 0 || rcr&fec.RCR_MII_MODE == 0 || rcr>>16&0x3FFF != 1522 || rcr&fec.RCR_RMII_MODE == 0 {
			t.Errorf("%s: RCR %#x", caps.Name, rcr)
		}
		if m.Read32(fec.ENETx_TFWR)&fec.TFWR_STRFWD == 0 {
			t.Errorf("%s: TFWR without STRFWD", caps.Name)
		}
		if m.Read32(fec.ENETx_TCR)&fec.TCR_FDEN == 0 {
			t.Errorf("%s: not full duplex", caps.Name)
		}
		if m.Read32(fec.ENETx_RACC)&fec.RACC_SHIFT16 == 0 {
			t.Errorf("%s: SHIFT16 off", caps.Name)
		}
		if mrbr := m.Read32(fec.ENETx_MRBR); mrbr < 1522+6 || mrbr%64 != 0 {
			t.Errorf("%s: MRBR %d", caps.Name, mrbr)
		}
		if got := m.MAC(); got != nicMAC {
			t.Errorf("%s: MAC %x", caps.Name, got)
		}
		for _, reg := range []uint32{fec.ENETx_RDSR, fec.ENETx_TDSR} {
			if v := m.Read32(reg); v%uint32(caps.RingAlign) != 0 {
				t.Errorf("%s: ring base %#x misaligned", caps.Name, v)
			}
		}
		// 66 MHz IPG: MII_SPEED 13 (2.36 MHz MDC), HOLDTIME 0.
		if v := m.Read32(fec.ENETx_MSCR); v != 13<<1 {
			t.Errorf("%s: MSCR %#x", caps.Name, v)
		}
	}
}

func TestEIRIsAcknowledgedBitByBit(t *testing.T) {
	rec := &mmio.Recorder{}
	r := fectest.NewRig(t, fectest.RigOptions{Config: func(c *fec.Config) {
		rec.Regs = c.Regs
		c.Regs = rec
		c.Interrupts = true
	}})
	r.Model.Deliver(randomFrame(rand.New(rand.NewPCG(1, 1)), 100, nicMAC), fectest.RxOK)
	rec.Log = nil
	ev, err := r.NIC.Interrupt()
	if err != nil || ev&fec.EIR_RXF == 0 {
		t.Fatalf("events %#x, %v", ev, err)
	}
	for _, a := range rec.Log {
		if a.Write && a.Off == fec.ENETx_EIR && a.Val != uint32(ev) {
			t.Fatalf("EIR written with %#x, want exactly the serviced events %#x", a.Val, ev)
		}
	}
	select {
	case <-r.NIC.RxReady():
	default:
		t.Fatal("RX interrupt did not signal RxReady")
	}
}

func TestInterruptDrivenOperation(t *testing.T) {
	a := fectest.NewRig(t, fectest.RigOptions{Config: func(c *fec.Config) { c.Interrupts = true }})
	b := fectest.NewRig(t, fectest.RigOptions{MAC: [6]byte{2, 0, 0, 0, 0, 2}, Config: func(c *fec.Config) { c.Interrupts = true }})
	fectest.Connect(a.Model, b.Model)
	// Interrupt service goroutines, as the GIC handler would run.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, r := range []*fectest.Rig{a, b} {
		wg.Add(1)
		go func(r *fectest.Rig) {
			defer wg.Done()
			for {
				select {
				case <-r.Model.IRQ():
					r.NIC.Interrupt()
				case <-stop:
					return
				}
			}
		}(r)
	}
	rng := rand.New(rand.NewPCG(2, 3))
	const n = 500
	want := make([][]byte, n)
	for i := range want {
		want[i] = randomFrame(rng, 60+rng.IntN(1400), [6]byte{2, 0, 0, 0, 0, 2})
		want[i][14], want[i][15] = byte(i>>8), byte(i)
	}
	var received atomic.Int64
	go func() {
		for i := range want {
			// Keep at most half an RX ring in flight so nothing is lost.
			for int64(i)-received.Load() >= 32 {
				time.Sleep(50 * time.Microsecond)
			}
			for {
				err := a.NIC.Transmit([][]byte{want[i]}, fec.TxOptions{}, nil)
				if err == nil {
					break
				}
				if !errors.Is(err, fec.ErrRingFull) {
					t.Error(err)
					return
				}
				time.Sleep(time.Millisecond)
			}
		}
	}()
	// Everything arrives intact and in order, with the TX side completed
	// and the RX side refilled by the interrupt handlers alone.
	deadline := time.After(20 * time.Second)
	got, last := 0, -1
	for got < n {
		select {
		case <-b.NIC.RxReady():
		case <-time.After(10 * time.Millisecond):
		case <-deadline:
			t.Fatalf("received %d, lost %d of %d frames", got, mib(b.NIC, "IEEE_R_MACERR"), n)
		}
		for {
			p, err := b.NIC.Receive()
			if err != nil {
				t.Fatal(err)
			}
			if p == nil {
				break
			}
			seq := int(p.Data[14])<<8 | int(p.Data[15])
			if seq <= last || !bytes.Equal(p.Data, want[seq]) {
				t.Fatalf("frame %d after %d: out of order or corrupted", seq, last)
			}
			last = seq
			p.Release()
			got++
			received.Add(1)
		}
	}
	if lost := mib(b.NIC, "IEEE_R_MACERR"); lost != 0 {
		t.Fatalf("%d frames lost", lost)
	}
	close(stop)
	wg.Wait()
}

func TestMDIOAndAutonegotiation(t *testing.T) {
	cases := []struct {
		partner uint16
		gbit    bool
		soc     fec.SoC
		iface   fec.Interface
		want    fec.Link
	}{
		{fec.ADV_100FULL | fec.ADV_10HALF, false, fec.IMX6UL, fec.RMII, fec.Link{Up: true, Speed: 100, FullDuplex: true}},
		{fec.ADV_100HALF | fec.ADV_10FULL, false, fec.IMX6UL, fec.RMII, fec.Link{Up: true, Speed: 100}},
		{fec.ADV_10HALF, false, fec.IMX6UL, fec.RMII, fec.Link{Up: true, Speed: 10}},
		{fec.ADV_100FULL, true, fec.IMX6Q, fec.RGMII, fec.Link{Up: true, Speed: 1000, FullDuplex: true}},
		{fec.ADV_10HALF, false, fec.IMX6Q, fec.RGMII, fec.Link{Up: true, Speed: 10}}, // RMII_10T on RGMII too
		{fec.ADV_10FULL, false, fec.IMX7D, fec.MII, fec.Link{Up: true, Speed: 10, FullDuplex: true}},
		{fec.ADV_100FULL, true, fec.IMX6UL, fec.RMII, fec.Link{Up: true, Speed: 100, FullDuplex: true}},
	}
	for _, c := range cases {
		r := fectest.NewRig(t, fectest.RigOptions{SoC: c.soc,
			Model: func(o *fectest.Options) {
				o.PartnerAdv = c.partner | 1
				o.PartnerGbit = c.gbit
				o.PHYGbit = c.gbit
				o.ANReads = 3
			},
			Config: func(cf *fec.Config) { cf.Interface = c.iface }})
		phy, err := r.NIC.FindPHY(0, 1, 2, 3)
		if err != nil || phy.Addr != 2 {
			t.Fatalf("FindPHY: %v %v", phy, err)
		}
		if id, _ := phy.ID(); id>>16 != 0x0022 {
			t.Fatalf("PHY ID %#x", id)
		}
		phy.Poll = time.Microsecond
		if err := phy.Reset(time.Second); err != nil {
			t.Fatal(err)
		}
		l, err := phy.Autonegotiate(time.Second)
		if err != nil || l != c.want {
			t.Fatalf("partner %#x: link %v %v, want %v", c.partner, l, err, c.want)
		}
		if err := r.NIC.SetLink(l); err != nil {
			t.Fatal(err)
		}
		rcr, ecr, tcr := r.Model.Read32(fec.ENETx_RCR), r.Model.Read32(fec.ENETx_ECR), r.Model.Read32(fec.ENETx_TCR)
		if (rcr&fec.RCR_RMII_10T != 0) != (l.Speed == 10) || (ecr&fec.ECR_SPEED != 0) != (l.Speed == 1000) ||
			(tcr&fec.TCR_FDEN != 0) != l.FullDuplex || (rcr&fec.RCR_DRT != 0) == l.FullDuplex ||
			(rcr&fec.RCR_RGMII_EN != 0) != (c.iface == fec.RGMII) {
			t.Fatalf("%v programmed as RCR %#x ECR %#x TCR %#x", l, rcr, ecr, tcr)
		}
	}
	r := fectest.NewRig(t, fectest.RigOptions{})
	if err := r.NIC.SetLink(fec.Link{Up: true, Speed: 1000, FullDuplex: true}); err == nil {
		t.Fatal("1000 Mb/s accepted on a 10/100 MAC")
	}
	if _, err := r.NIC.FindPHY(5, 6); err == nil {
		t.Fatal("found a PHY where none answers")
	}
}

func TestMDIOTimesOut(t *testing.T) {
	r := fectest.NewRig(t, fectest.RigOptions{Config: func(c *fec.Config) { c.MDIOTimeout = 5 * time.Millisecond }})
	r.Model.SetFaults(fectest.Faults{MDIOStuck: true})
	if _, err := r.NIC.MDIORead(2, fec.MII_BMSR); !errors.Is(err, fec.ErrTimeout) {
		t.Fatalf("got %v", err)
	}
	if r.NIC.Stats().MDIOTimeouts != 1 {
		t.Fatal("timeout not counted")
	}
	phy := &fec.PHY{NIC: r.NIC, Addr: 2}
	r.Model.SetFaults(fectest.Faults{})
	r2 := fectest.NewRig(t, fectest.RigOptions{Model: func(o *fectest.Options) { o.ANReads = 1 << 30 }})
	phy = &fec.PHY{NIC: r2.NIC, Addr: 2, Poll: time.Millisecond}
	if _, err := phy.Autonegotiate(20 * time.Millisecond); !errors.Is(err, fec.ErrTimeout) {
		t.Fatalf("autonegotiation: %v", err)
	}
}

func TestResolveLinkPriority(t *testing.T) {
	all := uint16(fec.ADV_100FULL | fec.ADV_100HALF | fec.ADV_10FULL | fec.ADV_10HALF)
	if l := fec.ResolveLink(fec.BMSR_LSTATUS, all, 0, 0, 0, false); l.Up {
		t.Fatalf("no common mode gave %v", l)
	}
	if l := fec.ResolveLink(0, all, all, 0, 0, false); l.Up || l.Speed != 100 {
		t.Fatalf("link down gave %v", l)
	}
	if s := (fec.Link{}).String(); s != "down" {
		t.Fatal(s)
	}
	if s := (fec.Link{Up: true, Speed: 10}).String(); s != "10 Mb/s half duplex" {
		t.Fatal(s)
	}
}

// ERR006358: the uDMA clears TDAR with descriptors still ready. The reclaim
// pass must re-kick, on every SoC as Linux does (the old driver did it only
// on i.MX6Q/DL, so this fails for the others).
func TestERR006358RekickOnEverySoC(t *testing.T) {
	for _, soc := range fec.AllSoCs {
		r, tp := newTapRig(t, fectest.RigOptions{SoC: soc})
		r.Model.SetFaults(fectest.Faults{TxStalled: true})
		f := randomFrame(rand.New(rand.NewPCG(1, 2)), 100, [6]byte{2})
		for i := 0; i < 3; i++ {
			if err := r.NIC.Transmit([][]byte{f}, fec.TxOptions{}, i); err != nil {
				t.Fatal(err)
			}
		}
		// The uDMA wakes, sends one frame and drops TDAR with two pending.
		r.Model.SetFaults(fectest.Faults{ClearTDAREarly: 1})
		r.Model.Write32(fec.ENETx_TDAR, fec.DAR_ACTIVE)
		if sent := len(tp.take()); sent != 1 {
			t.Fatalf("%v: the fault sent %d frames, want 1 with 2 stranded", soc, sent)
		}
		for i := 0; i < 3; i++ {
			r.NIC.Reclaim()
		}
		if sent := len(tp.take()); sent != 2 {
			t.Fatalf("%v: %d of the 2 stranded frames sent after reclaim", soc, sent)
		}
		if r.NIC.Stats().Tx.Rekicks == 0 {
			t.Fatalf("%v: re-kick not counted", soc)
		}
	}
}

// ERR007885: TDAR is written only when a read returns 0.
func TestERR007885KickRule(t *testing.T) {
	rec := &mmio.Recorder{}
	r, _ := newTapRig(t, fectest.RigOptions{SoC: fec.IMX6UL, Config: func(c *fec.Config) { rec.Regs = c.Regs; c.Regs = rec }})
	r.Model.SetFaults(fectest.Faults{TxStalled: true}) // TDAR stays set
	f := randomFrame(rand.New(rand.NewPCG(1, 2)), 100, [6]byte{2})
	r.NIC.Transmit([][]byte{f}, fec.TxOptions{}, nil)
	rec.Log = nil
	r.NIC.Transmit([][]byte{f}, fec.TxOptions{}, nil)
	reads, writes := 0, 0
	for _, a := range rec.Log {
		if a.Off == fec.ENETx_TDAR {
			if a.Write {
				writes++
			} else {
				reads++
			}
		}
	}
	if reads != 4 || writes != 0 {
		t.Fatalf("TDAR busy: %d reads, %d writes; want 4 reads, no write", reads, writes)
	}
	if r.NIC.Stats().Tx.KicksSkipped != 1 {
		t.Fatal("skipped kick not counted")
	}
}

func TestBusErrorRestartsTheMACAndAbortsInFlightFrames(t *testing.T) {
	r, tp := newTapRig(t, fectest.RigOptions{Config: func(c *fec.Config) { c.Interrupts = true }})
	rng := rand.New(rand.NewPCG(5, 5))
	r.Model.SetFaults(fectest.Faults{TxStalled: true})
	for i := 0; i < 3; i++ {
		r.NIC.Transmit([][]byte{randomFrame(rng, 300, [6]byte{2})}, fec.TxOptions{}, i)
	}
	r.Model.SetFaults(fectest.Faults{BusError: true})
	r.Model.Deliver(randomFrame(rng, 100, nicMAC), fectest.RxOK) // hits the bus error
	_, err := r.NIC.Interrupt()
	if !errors.Is(err, fec.ErrBusError) {
		t.Fatalf("got %v", err)
	}
	done := r.Completions()
	if len(done) != 3 {
		t.Fatalf("%d completions", len(done))
	}
	for _, d := range done {
		if !errors.Is(d.Err, fec.ErrAborted) {
			t.Fatalf("in-flight frame completed with %v", d.Err)
		}
	}
	st := r.NIC.Stats()
	if st.BusErrors != 1 || st.Restarts != 2 {
		t.Fatalf("stats %+v", st)
	}
	// Traffic flows after recovery.
	f := randomFrame(rng, 300, [6]byte{2})
	tp.take()
	if err := r.NIC.Transmit([][]byte{f}, fec.TxOptions{}, nil); err != nil {
		t.Fatal(err)
	}
	if got := tp.take(); len(got) != 1 || !bytes.Equal(got[0], f) {
		t.Fatal("no traffic after recovery")
	}
	g := randomFrame(rng, 300, nicMAC)
	r.Model.Deliver(g, fectest.RxOK)
	if p, err := r.NIC.Receive(); err != nil || !bytes.Equal(p.Data, g) {
		t.Fatalf("RX after recovery: %v", err)
	}
}

func TestTxErrorStatusReachesTheCaller(t *testing.T) {
	r, _ := newTapRig(t, fectest.RigOptions{})
	r.Model.SetFaults(fectest.Faults{TxError: fec.TXE_TXE | fec.TXE_UE, TxErrorCount: 1})
	f := randomFrame(rand.New(rand.NewPCG(1, 1)), 100, [6]byte{2})
	r.NIC.Transmit([][]byte{f}, fec.TxOptions{}, "x")
	r.NIC.Reclaim()
	d := r.Completions()
	if len(d) != 1 || !errors.Is(d[0].Err, fec.ErrTxFailed) {
		t.Fatalf("completion %+v", d)
	}
	if st := r.NIC.Stats().Tx; st.Errors != 1 || st.Underflow != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestMulticastHashFilter(t *testing.T) {
	r := fectest.NewRig(t, fectest.RigOptions{})
	joined := [6]byte{0x01, 0x00, 0x5E, 0x00, 0x00, 0xFB}
	other := [6]byte{0x01, 0x00, 0x5E, 0x7F, 0x12, 0x34}
	if fec.HashIndex(joined) == fec.HashIndex(other) {
		t.Fatal("test addresses collide")
	}
	rng := rand.New(rand.NewPCG(1, 1))
	deliver := func(dst [6]byte) bool { return r.Model.Deliver(randomFrame(rng, 80, dst), fectest.RxOK) }
	if deliver(joined) {
		t.Fatal("multicast accepted before joining")
	}
	r.NIC.SetMulticast([][6]byte{joined})
	if !deliver(joined) || deliver(other) {
		t.Fatal("hash filter wrong")
	}
	if !deliver([6]byte{0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF}) || !deliver(nicMAC) || deliver([6]byte{2, 9, 9, 9, 9, 9}) {
		t.Fatal("broadcast/unicast filter wrong")
	}
	r.NIC.SetAllMulticast()
	if !deliver(other) {
		t.Fatal("all-multicast rejected a group")
	}
	// The filter survives a restart.
	r.NIC.SetMulticast([][6]byte{joined})
	r.NIC.SetLink(fec.Link{Up: true, Speed: 100, FullDuplex: true})
	if !deliver(joined) || deliver(other) {
		t.Fatal("filter lost on restart")
	}
}

func TestMIBCountersFollowTraffic(t *testing.T) {
	a := fectest.NewRig(t, fectest.RigOptions{})
	b := fectest.NewRig(t, fectest.RigOptions{MAC: [6]byte{2, 0, 0, 0, 0, 2}})
	fectest.Connect(a.Model, b.Model)
	rng := rand.New(rand.NewPCG(1, 1))
	sizes := []int{60, 100, 300, 1514}
	octets := 0
	for _, n := range sizes {
		a.NIC.Transmit([][]byte{randomFrame(rng, n, [6]byte{2, 0, 0, 0, 0, 2})}, fec.TxOptions{}, nil)
		octets += n + 4
	}
	if v := mib(a.NIC, "RMON_T_PACKETS"); v != 4 {
		t.Fatalf("RMON_T_PACKETS %d", v)
	}
	if v := mib(a.NIC, "RMON_T_OCTETS"); v != uint32(octets) {
		t.Fatalf("RMON_T_OCTETS %d want %d", v, octets)
	}
	if mib(b.NIC, "RMON_R_PACKETS") != 4 || mib(b.NIC, "RMON_R_P64") != 1 || mib(b.NIC, "RMON_R_P1024TO2047") != 1 {
		t.Fatalf("RX MIB %v", b.NIC.MIB())
	}
	if _, ok := fec.MIBRegisterOffset("nonsense"); ok {
		t.Fatal("unknown counter found")
	}
}

// skipClean is a dma.Memory that "forgets" to clean the cache before the
// device reads, the bug QEMU can never show.
type skipClean struct{ *dmatest.Memory }

func (s skipClean) SyncForDevice(b *dma.Buffer, off, n int, d dma.Dir) {
	if d == dma.ToDevice {
		return
	}
	s.Memory.SyncForDevice(b, off, n, d)
}

func TestAMissingCacheCleanIsCaughtByTheDMAModel(t *testing.T) {
	mem := dmatest.New(nil, dmatest.Options{})
	caps, _ := fec.CapsFor(fec.IMX6UL)
	model := fectest.New(fectest.Options{Caps: caps, Mem: mem})
	n, err := fec.New(fec.Config{Regs: model, Mem: skipClean{mem}, Caps: caps, MAC: nicMAC, Strategy: bounce.Bounce})
	if err != nil {
		t.Fatal(err)
	}
	n.Init()
	f := randomFrame(rand.New(rand.NewPCG(1, 1)), 200, [6]byte{2})
	n.Transmit([][]byte{f}, fec.TxOptions{}, nil)
	vs := mem.Take()
	if len(vs) == 0 {
		t.Fatal("a TX without cache clean went unnoticed")
	}
	if vs[0].Kind != dmatest.CPUOwned && vs[0].Kind != dmatest.StaleDeviceRead {
		t.Fatalf("violation %v", vs[0])
	}
	model.Violations()
}

// skipInvalidate forgets to invalidate before the CPU reads RX data.
type skipInvalidate struct{ *dmatest.Memory }

func (s skipInvalidate) SyncForCPU(b *dma.Buffer, off, n int, d dma.Dir) {}

func TestAMissingInvalidateIsCaughtByTheDMAModel(t *testing.T) {
	mem := dmatest.New(nil, dmatest.Options{})
	caps, _ := fec.CapsFor(fec.IMX6UL)
	model := fectest.New(fectest.Options{Caps: caps, Mem: mem})
	n, _ := fec.New(fec.Config{Regs: model, Mem: skipInvalidate{mem}, Caps: caps, MAC: nicMAC})
	n.Init()
	f := randomFrame(rand.New(rand.NewPCG(1, 1)), 100, nicMAC)
	model.Deliver(f, fectest.RxOK)
	p, err := n.Receive()
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(p.Data, f) {
		t.Fatal("CPU read fresh data without an invalidate: the cache is not modelled")
	}
	vs := mem.Take()
	if len(vs) == 0 || vs[0].Kind != dmatest.StaleCPURead {
		t.Fatalf("violations %v", vs)
	}
}

func TestWireRecordsPcap(t *testing.T) {
	a := fectest.NewRig(t, fectest.RigOptions{})
	b := fectest.NewRig(t, fectest.RigOptions{MAC: [6]byte{2, 0, 0, 0, 0, 2}})
	w := fectest.Connect(a.Model, b.Model)
	path := filepath.Join(t.TempDir(), "wire.pcap")
	fh, _ := os.Create(path)
	pw, err := fectest.NewPcapWriter(fh)
	if err != nil {
		t.Fatal(err)
	}
	w.Record(pw)
	f := randomFrame(rand.New(rand.NewPCG(1, 1)), 100, [6]byte{2, 0, 0, 0, 0, 2})
	a.NIC.Transmit([][]byte{f}, fec.TxOptions{}, nil)
	fh.Close()
	data, _ := os.ReadFile(path)
	if len(data) != 24+16+100 || !bytes.Equal(data[40:], f) {
		t.Fatalf("pcap of %d bytes", len(data))
	}
	if frames, _, _ := w.Counts(); frames[0] != 1 {
		t.Fatalf("wire counted %v", frames)
	}
}

func TestWireFilterDropsDuplicatesAndReorders(t *testing.T) {
	a := fectest.NewRig(t, fectest.RigOptions{})
	b := fectest.NewRig(t, fectest.RigOptions{MAC: [6]byte{2, 0, 0, 0, 0, 2}})
	w := fectest.Connect(a.Model, b.Model)
	acts := []fectest.Action{fectest.Drop, fectest.Duplicate, fectest.Delay, fectest.Pass}
	k := 0
	w.SetFilter(func(int, []byte) fectest.Action { k++; return acts[k-1] })
	rng := rand.New(rand.NewPCG(1, 1))
	var fs [][]byte
	for i := 0; i < 4; i++ {
		fs = append(fs, randomFrame(rng, 100, [6]byte{2, 0, 0, 0, 0, 2}))
		a.NIC.Transmit([][]byte{fs[i]}, fec.TxOptions{}, nil)
	}
	want := [][]byte{fs[1], fs[1], fs[3], fs[2]}
	for i, wf := range want {
		p, err := b.NIC.Receive()
		if err != nil || p == nil || !bytes.Equal(p.Data, wf) {
			t.Fatalf("frame %d: %v %v", i, p, err)
		}
		p.Release()
	}
}

func TestCloseAbortsAndFreesEverything(t *testing.T) {
	r, _ := newTapRig(t, fectest.RigOptions{})
	r.Model.SetFaults(fectest.Faults{TxStalled: true})
	rng := rand.New(rand.NewPCG(1, 1))
	r.NIC.Transmit(scatter(rng, randomFrame(rng, 900, [6]byte{2}), 3), fec.TxOptions{}, 1)
	r.Model.Deliver(randomFrame(rng, 900, nicMAC), fectest.RxOK)
	p, _ := r.NIC.Receive()
	if err := r.NIC.Close(); err != nil {
		t.Fatal(err)
	}
	if d := r.Completions(); len(d) != 1 || !errors.Is(d[0].Err, fec.ErrAborted) {
		t.Fatalf("completions %+v", d)
	}
	if err := p.Release(); err != nil {
		t.Fatal(err)
	}
	if err := r.NIC.Close(); !errors.Is(err, fec.ErrClosed) {
		t.Fatalf("second close: %v", err)
	}
	if err := r.NIC.Transmit([][]byte{make([]byte, 64)}, fec.TxOptions{}, nil); !errors.Is(err, fec.ErrClosed) {
		t.Fatalf("transmit after close: %v", err)
	}
	if _, err := r.NIC.Receive(); !errors.Is(err, fec.ErrClosed) {
		t.Fatalf("receive after close: %v", err)
	}
	if l := r.Mem.LiveMappings(); len(l) != 0 {
		t.Fatalf("leaked mappings %v", l)
	}
}

// barrierWatch snapshots the TX descriptor ring at every Barrier; doorbell
// checks at every write of TDAR that the ring is what it was at the last
// Barrier: every descriptor store the uDMA may act on was ordered before
// the doorbell (on silicon, a store still in the write buffer is not).
type barrierWatch struct {
	*dmatest.Memory
	snap []byte
	ring func() []byte
}

func (w *barrierWatch) Barrier() {
	w.Memory.Barrier()
	if w.ring != nil {
		w.snap = append(w.snap[:0], w.ring()...)
	}
}

type doorbell struct {
	*fectest.Model
	w     *barrierWatch
	reg   uint32 // the doorbell register watched (TDAR or RDAR)
	kicks int
	late  int // doorbells with descriptor stores after the last barrier
}

func (d *doorbell) Write32(off, v uint32) {
	if off == d.reg && d.w.ring != nil {
		d.kicks++
		if !bytes.Equal(d.w.snap, d.w.ring()) {
			d.late++
		}
	}
	d.Model.Write32(off, v)
}

// doorbellRig is a NIC on an i.MX6UL model whose doorbell register reg is
// watched: each write is checked against the barriers and the stores to
// the ring of ring descriptors whose base is in baseReg. cfg gives the
// ring sizes and strategy; the rest is filled in.
func doorbellRig(t *testing.T, legacy bool, reg, baseReg uint32, ring int, cfg fec.Config) (*fec.NIC, *fectest.Model, *doorbell) {
	t.Helper()
	mem := dmatest.New(t, dmatest.Options{})
	caps, _ := fec.CapsFor(fec.IMX6UL)
	model := fectest.New(fectest.Options{Caps: caps, Mem: mem})
	w := &barrierWatch{Memory: mem}
	db := &doorbell{Model: model, w: w, reg: reg}
	cfg.Regs, cfg.Mem, cfg.Caps, cfg.MAC, cfg.LegacyBD = db, w, caps, nicMAC, legacy
	n, err := fec.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	n.Init()
	size := fec.EnhancedDescSize
	if legacy {
		size = fec.LegacyDescSize
	}
	w.ring = func() []byte {
		b, err := mem.Coherent(dma.Addr(model.Read32(baseReg)), ring*size)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	return n, model, db
}

func TestEveryTxDoorbellFollowsABarrier(t *testing.T) {
	for _, legacy := range []bool{false, true} {
		n, _, db := doorbellRig(t, legacy, fec.ENETx_TDAR, fec.ENETx_TDSR, 64,
			fec.Config{Strategy: bounce.SG, TxRing: 64})
		rng := rand.New(rand.NewPCG(3, 3))
		for i := 0; i < 10; i++ {
			if err := n.Transmit([][]byte{randomFrame(rng, 100+50*i, [6]byte{2})}, fec.TxOptions{}, nil); err != nil {
				t.Fatal(err)
			}
			hdr, pay := bigPacket(t, frameSpec{payload: 5000}, rng)
			if err := n.TransmitGSO(hdr, [][]byte{pay}, tso.Options{Type: tso.TCP, MSS: 1448, NeedsCsum: true}, nil); err != nil {
				t.Fatal(err)
			}
			n.Reclaim()
		}
		if db.kicks < 20 || db.late != 0 {
			t.Fatalf("legacy %v: %d of %d TX doorbells came with descriptor stores after the last barrier", legacy, db.late, db.kicks)
		}
	}
}

// TestEveryRxDoorbellFollowsABarrier: every write of RDAR (after a
// Receive, a DropNext or a DropRun) comes after a barrier that follows the
// last RX descriptor store. A uDMA that reads a descriptor whose E is still
// in the write buffer clears RDAR and stops receiving until the next write
// (Linux's writel of RDAR carries that barrier). Fails if rxRing.kick's
// barrier is removed.
func TestEveryRxDoorbellFollowsABarrier(t *testing.T) {
	for _, legacy := range []bool{false, true} {
		n, model, db := doorbellRig(t, legacy, fec.ENETx_RDAR, fec.ENETx_RDSR, 16, fec.Config{RxRing: 16})
		rng := rand.New(rand.NewPCG(4, 4))
		for i := 0; i < 10; i++ {
			for k := 0; k < 6; k++ {
				if !model.Deliver(randomFrame(rng, 80+20*k, nicMAC), fectest.RxOK) {
					t.Fatalf("round %d: frame %d not delivered", i, k)
				}
			}
			if m, _ := n.PeekRun(6, 2000, func(int, []byte, fec.CsumInfo) {}); m != 6 {
				t.Fatalf("round %d: PeekRun showed %d of 6", i, m)
			}
			p, err := n.Receive()
			if err != nil || p == nil {
				t.Fatalf("round %d: Receive: %v %v", i, p, err)
			}
			p.Release()
			if err := n.DropNext(); err != nil {
				t.Fatal(err)
			}
			if err := n.DropRun(4); err != nil {
				t.Fatal(err)
			}
		}
		if db.kicks < 30 || db.late != 0 {
			t.Fatalf("legacy %v: %d of %d RX doorbells came with descriptor stores after the last barrier", legacy, db.late, db.kicks)
		}
	}
}

// TestResetThatNeverCompletesIsReported: a MAC whose ECR.RESET never clears
// (an unclocked ENET) makes Init fail with ErrResetTimeout and counts it,
// instead of running on as if reset; a reset that completes again clears
// the error.
func TestResetThatNeverCompletesIsReported(t *testing.T) {
	r := fectest.NewRig(t, fectest.RigOptions{})
	r.Model.SetFaults(fectest.Faults{ResetStuck: true})
	if err := r.NIC.Init(); !errors.Is(err, fec.ErrResetTimeout) {
		t.Fatalf("Init with the reset stuck: %v, want ErrResetTimeout", err)
	}
	if n := r.NIC.Stats().ResetTimeouts; n != 1 {
		t.Fatalf("ResetTimeouts = %d, want 1", n)
	}
	r.Model.SetFaults(fectest.Faults{})
	if err := r.NIC.Init(); err != nil {
		t.Fatalf("Init once the reset completes: %v", err)
	}
	if n := r.NIC.Stats().ResetTimeouts; n != 1 {
		t.Fatalf("ResetTimeouts = %d after a good reset, want still 1", n)
	}
}
