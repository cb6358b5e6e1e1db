package netcall_test

import (
	"bytes"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tamanic/tamanic/bounce"
	"github.com/tamanic/tamanic/dma/dmatest"
	"github.com/tamanic/tamanic/fec"
	"github.com/tamanic/tamanic/fec/fectest"
	"github.com/tamanic/tamanic/internal/stacktest"
	"github.com/tamanic/tamanic/netstack"
	"github.com/tamanic/tamanic/netstack/fecdev"
	"github.com/tamanic/tamanic/tee/netcall"
	"github.com/tamanic/tamanic/tso"
)

// guard is the size of the poisoned memory on each side of a test's
// transfer region: a Secure World access outside the region shows up as a
// changed guard byte (write) or as guard bytes on the wire (read).
const guard = 4096

const poison = 0xA5

// secure is the Secure World of a test: the ENET driver on its model,
// interrupt-driven as in the Trusted OS (whose handler also polls it on
// every receive call), and the server on a transfer region inside poisoned
// guards.
type secure struct {
	rig    *fectest.Rig
	srv    *netcall.Server
	mem    []byte // guard, region, guard
	region []byte
}

func newSecure(t testing.TB, mac byte) *secure { return newSecureWith(t, mac, netcall.ServerConfig{}) }

// newSecureWith is newSecure with the server's configuration (its NIC and
// region are filled in).
func newSecureWith(t testing.TB, mac byte, cfg netcall.ServerConfig) *secure {
	t.Helper()
	s := &secure{mem: bytes.Repeat([]byte{poison}, guard+netcall.RegionSize+guard)}
	s.region = s.mem[guard : guard+netcall.RegionSize : guard+netcall.RegionSize]
	clear(s.region)
	mem := dmatest.New(t, dmatest.Options{CachedSize: 64 << 20})
	s.rig = fectest.NewRig(t, fectest.RigOptions{Mem: mem, MAC: [6]byte{2, 0, 0, 0, 0, mac}, NoDone: true, Config: func(c *fec.Config) {
		c.TxRing, c.RxRing = 512, 512
		c.Strategy = bounce.SG // as the Trusted OS runs it
		c.Interrupts = true
		c.OnTxDone = func(cookie any, err error) { s.srv.TxDone(cookie, err) }
	}})
	t.Cleanup(stacktest.Serve(s.rig.Model.IRQ(), func() { s.rig.NIC.Interrupt() }))
	var err error
	cfg.NIC, cfg.Region = s.rig.NIC, s.region
	if s.srv, err = netcall.NewServer(cfg); err != nil {
		t.Fatal(err)
	}
	return s
}

// checkGuards fails t if a guard byte changed.
func (s *secure) checkGuards(t testing.TB) {
	t.Helper()
	for i, b := range s.mem[:guard] {
		if b != poison {
			t.Fatalf("guard byte %d before the region written (%#x)", guard-i, b)
		}
	}
	for i, b := range s.mem[guard+netcall.RegionSize:] {
		if b != poison {
			t.Fatalf("guard byte %d after the region written (%#x)", i, b)
		}
	}
}

// counting is a Caller that counts world calls.
type counting struct {
	c     netcall.Caller
	calls atomic.Int64
}

func (c *counting) Call(op netcall.Op, r1, r2, r3 uint32) (netcall.Status, uint32) {
	c.calls.Add(1)
	return c.c.Call(op, r1, r2, r3)
}

// partitioned is a gVisor stack in the Normal World on a netcall.Device,
// the driver in the Secure World.
type partitioned struct {
	*stacktest.Host
	sec    *secure
	dev    *netcall.Device
	caller *counting
	ep     *netstack.Endpoint
}

func newPartitioned(t testing.TB, i byte) *partitioned {
	t.Helper()
	sec := newSecure(t, i)
	c := &counting{c: netcall.Direct{S: sec.srv}}
	dev, err := netcall.NewDevice(c, sec.region)
	if err != nil {
		t.Fatal(err)
	}
	ep, err := netstack.New(netstack.Options{Device: dev, TSO: true, GRO: true, AckFilter: true, PollInterval: 200 * time.Microsecond})
	if err != nil {
		t.Fatal(err)
	}
	p := &partitioned{Host: stacktest.New(t, ep, i, stacktest.Options{}), sec: sec, dev: dev, caller: c, ep: ep}
	p.Diag = func() string {
		st := sec.rig.NIC.Stats()
		return fmt.Sprintf("device %+v\nserver %+v\nenet tx %+v rx %+v\n", dev.Stats(), sec.srv.Stats(), st.Tx, st.Rx)
	}
	return p
}

// plain is a gVisor stack on the ENET driver directly (the peer).
type plain struct {
	*stacktest.Host
	rig  *fectest.Rig
	stop func()
}

func newPlain(t testing.TB, i byte) *plain {
	t.Helper()
	var dev *fecdev.Device
	mem := dmatest.New(t, dmatest.Options{CachedSize: 64 << 20})
	rig := fectest.NewRig(t, fectest.RigOptions{Mem: mem, MAC: [6]byte{2, 0, 0, 0, 0, i}, NoDone: true, Config: func(c *fec.Config) {
		c.Interrupts = true
		c.TxRing, c.RxRing = 512, 512
		c.OnTxDone = func(cookie any, err error) { dev.Done(cookie, err) }
	}})
	dev = fecdev.New(rig.NIC)
	ep, err := netstack.New(netstack.Options{Device: dev, TSO: true, GRO: true, AckFilter: true})
	if err != nil {
		t.Fatal(err)
	}
	p := &plain{Host: stacktest.New(t, ep, i, stacktest.Options{}), rig: rig}
	p.stop = stacktest.Serve(rig.Model.IRQ(), func() { rig.NIC.Interrupt() })
	return p
}

// pair joins a partitioned host (10.0.0.1) and a plain one (10.0.0.2).
func pair(t *testing.T) (*partitioned, *plain, *stacktest.Wire) {
	a := newPartitioned(t, 1)
	b := newPlain(t, 2)
	w := fectest.Connect(a.sec.rig.Model, b.rig.Model)
	chk := &stacktest.Wire{}
	w.SetFilter(func(from int, f []byte) fectest.Action {
		chk.Tap(f)
		if from == 0 && bytes.Contains(f, bytes.Repeat([]byte{poison}, 64)) {
			t.Errorf("a frame from the Secure World carries guard bytes: %x", f[:min(len(f), 64)])
		}
		return fectest.Pass
	})
	t.Cleanup(func() {
		a.Close()
		b.Close()
		b.stop()
	})
	return a, b, chk
}

const mib = 1 << 20

// TestPartitionedTransfer moves data both ways, IPv4 and IPv6, between
// gVisor in the Normal World (its device a world call per GSO packet or
// receive batch) and a plain stack, checks every byte by SHA-256 and every
// frame on the wire with gopacket, and counts the world calls.
func TestPartitionedTransfer(t *testing.T) {
	a, b, chk := pair(t)
	const n = 4 * mib
	for i, v6 := range []bool{false, true} {
		c0, s0 := a.caller.calls.Load(), a.sec.srv.Stats()
		if err := stacktest.Transfer(t, a.Host, b.Host, v6, uint16(6000+2*i), n, stacktest.Xfer{}); err != nil {
			t.Fatalf("partitioned->plain v6=%v: %v\n%s", v6, err, a.Diag())
		}
		c1, s1 := a.caller.calls.Load(), a.sec.srv.Stats()
		if err := stacktest.Transfer(t, b.Host, a.Host, v6, uint16(6001+2*i), n, stacktest.Xfer{}); err != nil {
			t.Fatalf("plain->partitioned v6=%v: %v\n%s", v6, err, a.Diag())
		}
		c2, s2 := a.caller.calls.Load(), a.sec.srv.Stats()
		txGSO := s1.TxGSOPackets - s0.TxGSOPackets
		t.Logf("v6=%v guest->peer: %.1f world calls/MiB (%d GSO packets, %d frames, %d receive calls); peer->guest: %.1f world calls/MiB (%d frames received in %d receive calls)",
			v6, float64(c1-c0)/(n/mib), txGSO, s1.TxFrames-s0.TxFrames, s1.RxCalls-s0.RxCalls,
			float64(c2-c1)/(n/mib), s2.RxFrames-s1.RxFrames, s2.RxCalls-s1.RxCalls)
		if txGSO == 0 {
			t.Errorf("v6=%v: no GSO packet crossed the world boundary", v6)
		}
		// One call per GSO packet: the data calls are far fewer than the
		// 724 MSS-sized frames a MiB takes on the wire.
		if perMiB := float64((s1.TxCalls - s0.TxCalls)) / (n / mib); perMiB > 724/4 {
			t.Errorf("v6=%v: %.0f transmit calls per MiB sent: not one per GSO packet", v6, perMiB)
		}
		// Batched: fewer calls that returned frames than frames. Empty
		// calls (the 200 us poll ticks) are left out: how many there are
		// depends on how long the transfer takes on a loaded machine.
		if got, full := s2.RxFrames-s1.RxFrames, (s2.RxCalls-s2.RxEmpty)-(s1.RxCalls-s1.RxEmpty); got == 0 || full >= got {
			t.Errorf("v6=%v: %d frames in %d receive calls that returned frames: not batched", v6, got, full)
		}
	}
	chk.Check(t, 1518, true)
	st := a.sec.srv.Stats()
	if len(st.Refused) != 0 || st.TxErrors != 0 {
		t.Errorf("a well-behaved Normal World was refused or failed: %+v", st)
	}
	if ds := a.dev.Stats(); ds.BadRecords != 0 || ds.Refused != 0 {
		t.Errorf("device: %+v", ds)
	}
	a.sec.checkGuards(t)
	// Nothing held: after a reclaim every staging buffer is back.
	a.sec.rig.NIC.Reclaim()
	if st := a.sec.srv.Stats(); st.Staging != 0 {
		t.Errorf("%d staging buffers still held after the transfers", st.Staging)
	}
}

// runHostile makes every call of the hostile table through dev and fails t
// on a status other than the one the table wants; it returns the calls
// made by status.
func runHostile(t *testing.T, dev *netcall.Device) map[netcall.Status]int {
	t.Helper()
	by := map[netcall.Status]int{}
	for _, c := range netcall.HostileCalls() {
		if c.Prepare != nil {
			c.Prepare(dev.Region())
		}
		st, v := dev.Call(c.Op, c.R1, c.R2, c.R3)
		if st != c.Want {
			t.Errorf("%s: status %v (value %d), want %v", c.Name, st, v, c.Want)
		}
		by[c.Want]++
	}
	return by
}

// TestHostileCalls makes every malformed call of the table (offsets and
// lengths past the region, wrapping 32 bits, counts past the limits,
// fields with no meaning, a header the driver cannot parse): each is
// refused with its own status and counted, nothing outside the region is
// touched, no staging buffer is kept, and the partition then still moves
// data both ways, also while the hostile calls go on beside the traffic.
func TestHostileCalls(t *testing.T) {
	a, b, chk := pair(t)
	by := runHostile(t, a.dev)
	a.sec.checkGuards(t)
	st := a.sec.srv.Stats()
	for s, n := range by {
		if got := st.Refused[s.String()]; got != uint64(n) {
			t.Errorf("Refused[%v] = %d, want %d", s, got, n)
		}
	}
	if st.Staging != 0 || st.TxFrames != 0 || st.TxGSOPackets != 0 {
		t.Errorf("hostile calls left staging buffers or sent something: %+v", st)
	}
	t.Logf("%d hostile calls refused: %v; last: %s", len(netcall.HostileCalls()), st.Refused, st.LastRefusal)

	// Still serving, with hostile calls going on beside the traffic.
	stop := make(chan struct{})
	done := make(chan int)
	go func() {
		rounds := 0
		for {
			select {
			case <-stop:
				done <- rounds
				return
			default:
			}
			runHostile(t, a.dev)
			rounds++
		}
	}()
	for i, v6 := range []bool{false, true} {
		if err := stacktest.Transfer(t, a.Host, b.Host, v6, uint16(7000+2*i), mib, stacktest.Xfer{}); err != nil {
			t.Fatalf("partitioned->plain after hostile calls: %v\n%s", err, a.Diag())
		}
		if err := stacktest.Transfer(t, b.Host, a.Host, v6, uint16(7001+2*i), mib, stacktest.Xfer{}); err != nil {
			t.Fatalf("plain->partitioned after hostile calls: %v\n%s", err, a.Diag())
		}
	}
	close(stop)
	rounds := <-done
	chk.Check(t, 1518, true)
	a.sec.checkGuards(t)
	a.sec.rig.NIC.Reclaim()
	st = a.sec.srv.Stats()
	total := uint64(0)
	for _, n := range st.Refused {
		total += n
	}
	if want := uint64(len(netcall.HostileCalls()) * (rounds + 1)); total != want {
		t.Errorf("%d refusals counted, %d hostile calls made", total, want)
	}
	if st.Staging != 0 {
		t.Errorf("%d staging buffers held after the traffic", st.Staging)
	}
	t.Logf("%d rounds of hostile calls beside the traffic", rounds)
}

// TestWait: OpWait (the Normal World's idle) returns 0 when nothing
// arrives, and 1 once a frame arrives (the NIC's interrupt), after which a
// receive call returns that frame; an empty receive leaves no stale signal
// that would end the next wait at once.
func TestWait(t *testing.T) {
	sec := newSecure(t, 1)
	d := netcall.Direct{S: sec.srv}
	if st, k := d.Call(netcall.OpReceive, 0, 64<<10, 8); st != netcall.StatusOK || k != 0 {
		t.Fatalf("receive on an idle NIC: %v, %d frames", st, k)
	}
	for _, us := range []uint32{0, 2000} {
		if st, v := d.Call(netcall.OpWait, us, 0, 0); st != netcall.StatusOK || v != 0 {
			t.Fatalf("wait %d us with nothing arriving: %v %d", us, st, v)
		}
	}
	f := append([]byte{2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 9, 0x88, 0xb5}, bytes.Repeat([]byte{0x5a}, 100)...)
	go func() {
		time.Sleep(time.Millisecond)
		sec.rig.Model.Deliver(f, 0)
	}()
	if st, v := d.Call(netcall.OpWait, netcall.MaxWaitMicros, 0, 0); st != netcall.StatusOK || v != 1 {
		t.Fatalf("wait with a frame arriving: %v %d", st, v)
	}
	if st, k := d.Call(netcall.OpReceive, 0, 64<<10, 8); st != netcall.StatusOK || k != 1 {
		t.Fatalf("receive after the wait: %v, %d frames", st, k)
	}
	if n := int(sec.region[0]) | int(sec.region[1])<<8; !bytes.Equal(sec.region[4:4+n], f) {
		t.Fatalf("received % x, sent % x", sec.region[4:4+n], f)
	}
	if st := sec.srv.Stats(); st.WaitCalls != 3 || st.WaitWoken != 1 {
		t.Errorf("wait counters %+v", st)
	}
}

// TestFullAndRecovery: when the Secure World's staging buffers are all
// held by a stalled TX path, a transmit is answered StatusFull; the device
// holds that one (queued: its completion comes later) and reports the
// next as "not now" (Full) while the Secure World stays full, nothing is
// lost or leaked, and once the hardware moves again the held one goes
// first and the refused call succeeds.
func TestFullAndRecovery(t *testing.T) {
	sec := newSecureWith(t, 1, netcall.ServerConfig{LargeSlots: 2})
	sec.rig.Model.SetPeer(func([]byte) {})
	dev, err := netcall.NewDevice(netcall.Direct{S: sec.srv}, sec.region)
	if err != nil {
		t.Fatal(err)
	}
	var done []any
	dev.SetTxDone(func(c any, err error) {
		if err != nil {
			t.Errorf("completion %v: %v", c, err)
		}
		done = append(done, c)
	})
	hdr, payload := tcpHeader(3000), bytes.Repeat([]byte{7}, 3000)
	o := tso.Options{Type: tso.TCP, MSS: 1000, CsumOffset: 16}
	sec.rig.Model.SetFaults(fectest.Faults{TxStalled: true})
	for i := range 3 {
		if err := dev.TransmitGSO(hdr, [][]byte{payload}, o, i); err != nil {
			t.Fatalf("GSO packet %d: %v", i, err)
		}
	}
	if len(done) != 2 || dev.Stats().Held != 1 {
		t.Fatalf("%d completions for the 2 packets handed over, device %+v: the third is held", len(done), dev.Stats())
	}
	err = dev.TransmitGSO(hdr, [][]byte{payload}, o, 3)
	if err == nil || !dev.Full(err) {
		t.Fatalf("fourth GSO packet with both staging buffers held and one packet held: %v, want a Full error", err)
	}
	if st := sec.srv.Stats(); st.TxFull != 2 || st.Staging != 2 || len(st.Refused) != 0 {
		t.Fatalf("server after Full: %+v", st)
	}
	// Let the hardware run again (the uDMA resumes the ring); the queued
	// packets complete and free their buffers at the next reclaim.
	sec.rig.Model.SetFaults(fectest.Faults{})
	sec.rig.Model.Write32(fec.ENETx_TDAR, fec.DAR_ACTIVE)
	if err := dev.TransmitGSO(hdr, [][]byte{payload}, o, 3); err != nil {
		t.Fatalf("the refused packet again, TX moving: %v", err)
	}
	if err := dev.Transmit([][]byte{tcpHeader(0)}, false, 4); err != nil {
		t.Fatal(err)
	}
	if want := []any{0, 1, 2, 3, 4}; fmt.Sprint(done) != fmt.Sprint(want) {
		t.Errorf("completions %v, want %v (in order)", done, want)
	}
	sec.rig.NIC.Reclaim()
	if st := sec.srv.Stats(); st.Staging != 0 || st.TxGSOPackets != 4 || st.TxFrames != 1 || st.TxComplete != 5 {
		t.Errorf("server after recovery: %+v", st)
	}
	if f := sec.rig.NIC.Stats().Tx.GSOSegments; f != 12 {
		t.Errorf("%d GSO segments sent, want 12", f)
	}
}

// TestCloseCompletesHeld: Close completes a held transmission (with
// StatusClosed), so the endpoint's reference on it is released.
func TestCloseCompletesHeld(t *testing.T) {
	sec := newSecureWith(t, 1, netcall.ServerConfig{SmallSlots: 1})
	sec.rig.Model.SetPeer(func([]byte) {})
	sec.rig.Model.SetFaults(fectest.Faults{TxStalled: true})
	dev, err := netcall.NewDevice(netcall.Direct{S: sec.srv}, sec.region)
	if err != nil {
		t.Fatal(err)
	}
	var errs []error
	dev.SetTxDone(func(c any, err error) { errs = append(errs, err) })
	for i := range 2 {
		if err := dev.Transmit([][]byte{tcpHeader(0)}, false, i); err != nil {
			t.Fatal(err)
		}
	}
	if err := dev.Transmit([][]byte{tcpHeader(0)}, false, 2); !dev.Full(err) {
		t.Fatalf("a frame while one is held and the Secure World full: %v", err)
	}
	if err := dev.Close(); err != nil {
		t.Fatal(err)
	}
	if len(errs) != 2 || errs[0] != nil || !errors.Is(errs[1], netcall.StatusClosed) {
		t.Fatalf("completions %v: want the sent frame ok and the held one closed", errs)
	}
	dev.Poll()
	if len(errs) != 2 {
		t.Fatalf("a completion after Close: %v", errs)
	}
}

// FuzzDeviceReceive hands the Normal World's device arbitrary receive
// answers (a faulty Secure World): Receive returns frames or an error,
// never panics, and never returns a frame longer than the device's
// maximum.
func FuzzDeviceReceive(f *testing.F) {
	rec := func(n int) []byte {
		b := make([]byte, 4+(n+3)&^3)
		b[0], b[1] = byte(n), byte(n>>8)
		return b
	}
	f.Add(uint32(1), rec(60))
	f.Add(uint32(2), append(rec(1514), rec(60)...))
	f.Add(uint32(3), rec(60))
	f.Add(uint32(64), []byte{0xff, 0xff})
	f.Fuzz(func(t *testing.T, count uint32, area []byte) {
		region := make([]byte, netcall.RegionSize)
		c := fakeSecure(func(op netcall.Op, r1, r2, r3 uint32) (netcall.Status, uint32) {
			switch op {
			case netcall.OpInfo:
				copy(region[r1:], []byte{2, 0, 0, 0, 0, 1, 3, 0, 0xea, 0x05, 2, 0, 16, 0, 100, 0})
			case netcall.OpReceive:
				copy(region[r1:r1+r2], area)
				return netcall.StatusOK, count
			}
			return netcall.StatusOK, 0
		})
		dev, err := netcall.NewDevice(c, region)
		if err != nil {
			t.Fatal(err)
		}
		for range 70 {
			fr, err := dev.Receive()
			if err != nil || fr == nil {
				return
			}
			if len(fr.Bytes()) > 1514 {
				t.Fatalf("a %d-byte frame", len(fr.Bytes()))
			}
			if err := fr.Release(); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// fakeSecure is a Caller standing in for the Secure World.
type fakeSecure func(op netcall.Op, r1, r2, r3 uint32) (netcall.Status, uint32)

func (f fakeSecure) Call(op netcall.Op, r1, r2, r3 uint32) (netcall.Status, uint32) {
	return f(op, r1, r2, r3)
}

// TestMode: OpMode switches the driver's TX placement.
func TestMode(t *testing.T) {
	sec := newSecure(t, 1)
	dev, err := netcall.NewDevice(netcall.Direct{S: sec.srv}, sec.region)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		m    uint32
		want bounce.Strategy
	}{{netcall.ModeBounce, bounce.Bounce}, {netcall.ModeSG, bounce.SG}} {
		if err := dev.SetStrategy(c.m); err != nil {
			t.Fatal(err)
		}
		if got := sec.rig.NIC.Strategy(); got != c.want {
			t.Errorf("mode %d: driver strategy %v", c.m, got)
		}
	}
	if err := dev.SetStrategy(7); err == nil {
		t.Error("strategy 7 accepted")
	}
}

// failingReader is a random source that has failed.
type failingReader struct{}

func (failingReader) Read([]byte) (int, error) { return 0, errors.New("RNG self-test failed") }

// TestRandom: OpRandom hands the Normal World the Secure World's random
// bytes, 4 per call, in order, with nothing of one call's answer left for
// the next; a failed source is an error, never bytes; arguments are
// refused.
func TestRandom(t *testing.T) {
	src := make([]byte, 64)
	for i := range src {
		src[i] = byte(i*7 + 3)
	}
	sec := newSecureWith(t, 1, netcall.ServerConfig{Random: bytes.NewReader(src)})
	c := &counting{c: netcall.Direct{S: sec.srv}}
	got := make([]byte, 7)
	if err := netcall.ReadRandom(c, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, src[:7]) {
		t.Fatalf("first read %x, want %x", got, src[:7])
	}
	// The 8th source byte went with the second call; the next read starts
	// at the 9th.
	got = make([]byte, 5)
	if err := netcall.ReadRandom(c, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, src[8:13]) {
		t.Fatalf("second read %x, want %x", got, src[8:13])
	}
	if st := sec.srv.Stats(); st.RandomCalls != 4 || st.RandomErrors != 0 {
		t.Errorf("RandomCalls %d RandomErrors %d, want 4 and 0", st.RandomCalls, st.RandomErrors)
	}
	if err := netcall.ReadRandom(c, nil); err != nil {
		t.Errorf("empty read: %v", err)
	}
	if st, _ := sec.srv.Handle(uint32(netcall.OpRandom), 0, 1, 0); st != netcall.StatusBadField {
		t.Errorf("r2 set: %v, want bad-field", st)
	}

	bad := newSecureWith(t, 2, netcall.ServerConfig{Random: failingReader{}})
	if err := netcall.ReadRandom(netcall.Direct{S: bad.srv}, make([]byte, 4)); !errors.Is(err, netcall.StatusClosed) {
		t.Errorf("failed source: %v, want closed", err)
	}
	if st := bad.srv.Stats(); st.RandomErrors != 1 || st.Refused["closed"] != 1 {
		t.Errorf("failed source counted RandomErrors %d refused %v", st.RandomErrors, st.Refused)
	}

	// The default source is crypto/rand: 32 bytes twice never repeat.
	def := newSecure(t, 3)
	a, b := make([]byte, 32), make([]byte, 32)
	for _, p := range [][]byte{a, b} {
		if err := netcall.ReadRandom(netcall.Direct{S: def.srv}, p); err != nil {
			t.Fatal(err)
		}
	}
	if bytes.Equal(a, b) || bytes.Equal(a, make([]byte, 32)) {
		t.Errorf("default source gave %x then %x", a, b)
	}
}
