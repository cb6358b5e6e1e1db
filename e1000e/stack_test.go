package e1000e_test

import (
	"bytes"
	"fmt"
	"sync"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv6"

	"github.com/tamanic/tamanic/e1000e"
	"github.com/tamanic/tamanic/internal/stacktest"
	"github.com/tamanic/tamanic/netstack"
)

// host is a gVisor stack on the netstack endpoint on an 82574L model.
type host struct {
	*stacktest.Host
	r  *rig
	ep *netstack.Endpoint
}

func newHost(t testing.TB, i byte, tso bool, mode e1000e.IRQMode) *host {
	t.Helper()
	return newHostWrapped(t, i, tso, mode, nil)
}

// newHostWrapped is newHost with the device the endpoint drives wrapped
// by wrap (nil: not wrapped).
func newHostWrapped(t testing.TB, i byte, tso bool, mode e1000e.IRQMode, wrap func(netstack.Device) netstack.Device) *host {
	t.Helper()
	r := newRig(t, rigOptions{mac: i, mode: mode, noTrace: true, cfg: func(c *e1000e.Config) { c.TxRing = 512 }})
	var dev netstack.Device = e1000e.Device{NIC: r.nic}
	if wrap != nil {
		dev = wrap(dev)
	}
	ep, err := netstack.New(netstack.Options{Device: dev, TSO: tso, GRO: true, AckFilter: true,
		PollInterval: pollFor(mode)})
	if err != nil {
		t.Fatal(err)
	}
	r.nic.SetAllMulticast(true) // gVisor never says which groups it joins
	h := &host{Host: stacktest.New(t, ep, i, stacktest.Options{Net4: [3]byte{10, 0, 2}}), r: r, ep: ep}
	if mode != e1000e.Polled {
		r.serveIRQs(mode == e1000e.MSI)
	}
	h.Diag = func() string {
		return fmt.Sprintf("endpoint %+v\nnic %+v\nmodel %+v\n", ep.Stats(), r.nic.Stats(), r.model.Stats())
	}
	return h
}

func pollFor(m e1000e.IRQMode) time.Duration {
	if m == e1000e.Polled {
		return 200 * time.Microsecond
	}
	return 0
}

// connect joins two models: every frame one transmits is checked with
// gopacket (IPv4 header and TCP/UDP checksums) and injected into the other.
//
// The models move frames at no line rate: a sender's whole TX ring, with
// TSO thousands of frames, arrives at once, more than a receiver polled
// every 200 µs (or briefly descheduled on a loaded machine) has
// descriptors for, and the frames it has none for are dropped (the
// model's RxNoDesc, MPC and RNBC). TCP then recovers by retransmission
// timeouts, which took transfers from 0.1 s to 6-20 s and now and then
// past the test's 2-minute limit. So each direction is a queue, as a
// switch's buffer or a link partner honouring 802.3x PAUSE would be: a
// frame waits while the receiver has no free descriptor (up to
// pauseLimit, then it is injected and dropped as before). Loss at the
// receiver has its own tests, which inject directly.
func connect(t testing.TB, a, b *host) *stacktest.Wire {
	w := &stacktest.Wire{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	link := func(to *host) func([]byte) {
		q := make(chan []byte, 1<<16)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				case f := <-q:
					for wait := time.Duration(0); to.r.model.RxFree() == 0 && wait < pauseLimit; wait += 20 * time.Microsecond {
						select {
						case <-stop:
							return
						case <-time.After(20 * time.Microsecond):
						}
					}
					to.r.model.Inject(f)
				}
			}
		}()
		return func(f []byte) {
			w.Tap(f)
			select {
			case q <- append([]byte(nil), f...):
			default:
				t.Errorf("wire queue full: %d frames waiting", len(q))
			}
		}
	}
	a.r.model.OnTransmit(link(b))
	b.r.model.OnTransmit(link(a))
	t.Cleanup(func() {
		close(stop)
		wg.Wait()
	})
	return w
}

// pauseLimit bounds how long the wire holds a frame for a receiver with no
// free descriptor.
const pauseLimit = 2 * time.Second

func pair(t *testing.T, tso bool, mode e1000e.IRQMode) (a, b *host, w *stacktest.Wire) {
	a, b = newHost(t, 1, tso, mode), newHost(t, 2, tso, mode)
	w = connect(t, a, b)
	t.Cleanup(func() {
		a.Close()
		b.Close()
		w.Check(t, 1514, false)
		for _, h := range []*host{a, b} {
			if held := h.ep.Stats().TxHeld; held != 0 {
				t.Errorf("%d packets still held after close (NIC in flight %d, stats %+v, endpoint %+v)", held, h.r.nic.TxInFlight(), h.r.nic.Stats(), h.ep.Stats())
			}
		}
	})
	return a, b, w
}

// TestTCPOverModel moves data both ways over IPv4 and IPv6 between two
// gVisor stacks on 82574L models, with hardware TSO on and off, under
// INTx, MSI and polling.
func TestTCPOverModel(t *testing.T) {
	const n = 2 << 20
	for _, c := range []struct {
		name string
		tso  bool
		mode e1000e.IRQMode
	}{
		{"tso-intx", true, e1000e.INTx},
		{"notso-msi", false, e1000e.MSI},
		{"tso-polled", true, e1000e.Polled},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, b, w := pair(t, c.tso, c.mode)
			for i, v6 := range []bool{false, true} {
				if err := stacktest.Transfer(t, a.Host, b.Host, v6, uint16(5000+i), n, stacktest.Xfer{}); err != nil {
					t.Fatalf("a->b v6=%v: %v", v6, err)
				}
				if err := stacktest.Transfer(t, b.Host, a.Host, v6, uint16(6000+i), n, stacktest.Xfer{}); err != nil {
					t.Fatalf("b->a v6=%v: %v", v6, err)
				}
			}
			st := a.r.nic.Stats()
			t.Logf("a: %d frames queued, %d GSO packets -> %d segments, %d descriptors, %d contexts; wire %d frames, longest %d",
				st.Tx.Frames, st.Tx.GSOPackets, st.Tx.GSOSegs, st.Tx.Descs, st.Tx.Contexts, w.Frames(), w.MaxLen())
			ms := a.r.model.Stats()
			if c.tso {
				if st.Tx.GSOSegs <= st.Tx.GSOPackets || ms.TxTSO == 0 {
					t.Errorf("TSO on but no multi-segment packet went to the hardware: %+v, model %+v", st.Tx, ms)
				}
				hw := a.r.nic.HWStats()
				if hw.TSOContexts != uint64(ms.TxTSO) {
					t.Errorf("TSCTC %d, model segmented %d packets", hw.TSOContexts, ms.TxTSO)
				}
			} else if st.Tx.GSOPackets != 0 || ms.TxTSO != 0 {
				t.Errorf("TSO off but %d GSO packets", st.Tx.GSOPackets)
			}
			if st.Rx.CsumL4 == 0 {
				t.Errorf("no received frame had a hardware L4 verdict: %+v", st.Rx)
			}
			if c.mode == e1000e.MSI && ms.MSIs == 0 {
				t.Errorf("MSI mode but no MSI sent")
			}
		})
	}
}

// TestUDPFragmentsOverModel: UDP datagrams up to 60 KB, fragmented by
// gVisor, through the model both ways over IPv4 and IPv6.
func TestUDPFragmentsOverModel(t *testing.T) {
	a, b, _ := pair(t, true, e1000e.INTx)
	for _, v6 := range []bool{false, true} {
		proto, src, dst := ipv4.ProtocolNumber, a.V4, b.V4
		if v6 {
			proto, src, dst = ipv6.ProtocolNumber, a.V6, b.V6
		}
		srv, err := gonet.DialUDP(b.S, &tcpip.FullAddress{NIC: 1, Addr: dst, Port: 7}, nil, proto)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			buf := make([]byte, 1<<16)
			for {
				k, from, err := srv.ReadFrom(buf)
				if err != nil {
					return
				}
				srv.WriteTo(buf[:k], from)
			}
		}()
		cl, err := gonet.DialUDP(a.S, &tcpip.FullAddress{NIC: 1, Addr: src}, &tcpip.FullAddress{NIC: 1, Addr: dst, Port: 7}, proto)
		if err != nil {
			t.Fatal(err)
		}
		for _, size := range []int{1, 1472, 1473, 8000, 60000} {
			d := make([]byte, size)
			for i := range d {
				d[i] = byte(i*7 + size)
			}
			var got []byte
			for try := 0; try < 5 && got == nil; try++ {
				cl.SetDeadline(time.Now().Add(2 * time.Second))
				if _, err := cl.Write(d); err != nil {
					t.Fatal(err)
				}
				buf := make([]byte, 1<<16)
				if k, err := cl.Read(buf); err == nil {
					got = buf[:k]
				}
			}
			if !bytes.Equal(got, d) {
				t.Fatalf("v6=%v: echo of %d bytes: got %d bytes", v6, size, len(got))
			}
		}
		cl.Close()
		srv.Close()
	}
}

// TestLinkChecksPerMiB: the root complex looks at the PCIe link (PL
// DEBUG1) once per LinkCheckInterval, not before every BAR access, which
// used to cost one DBI read per register access the driver makes. A
// 1 MiB TCP transfer with hardware TSO (the simulated clock stands
// still, so it stays within one interval) reads no PL DEBUG1; the BAR
// accesses it makes are what the check before every access read.
func TestLinkChecksPerMiB(t *testing.T) {
	const n = 1 << 20
	a, b, _ := pair(t, true, e1000e.INTx)
	tlp0, dbi0 := a.r.h.TLPs(), a.r.h.DBIReads()
	checks0 := a.r.rc.Stats().LinkChecks
	if err := stacktest.Transfer(t, a.Host, b.Host, false, 5000, n, stacktest.Xfer{}); err != nil {
		t.Fatal(err)
	}
	bar, dbi, checks := a.r.h.TLPs()-tlp0, a.r.h.DBIReads()-dbi0, a.r.rc.Stats().LinkChecks-checks0
	t.Logf("sender, per MiB: %d BAR accesses (each read PL DEBUG1 before), %d DBI reads, %d link checks", bar, dbi, checks)
	if bar == 0 || checks != 0 || dbi != 0 {
		t.Errorf("per MiB: %d BAR accesses, %d DBI reads, %d link checks; want no DBI read on the data path", bar, dbi, checks)
	}
}
