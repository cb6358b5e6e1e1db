package connectx_test

import (
	"flag"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/refs"

	"github.com/tamanic/tamanic/connectx/connectxtest"
	"github.com/tamanic/tamanic/dma/dmatest"
	"github.com/tamanic/tamanic/fec"
	"github.com/tamanic/tamanic/fec/fectest"
	"github.com/tamanic/tamanic/internal/stacktest"
	"github.com/tamanic/tamanic/netstack"
	"github.com/tamanic/tamanic/netstack/fecdev"
)

var bigFlag = flag.Bool("connectx.big", false, "move 64 MiB each way in the stack tests even under -race")

// TestMain turns on gVisor's reference leak checking: a PacketBuffer the
// driver never completed (or completed twice) fails the run.
func TestMain(m *testing.M) {
	flag.Parse()
	refs.SetLeakMode(refs.LeaksPanic)
	code := m.Run()
	refs.DoLeakCheck()
	os.Exit(code)
}

// bulk is the per-direction transfer: 64 MiB, or 4 MiB under the race
// detector (about 20 times slower) unless -connectx.big; -short cuts it to
// 1 MiB.
func bulk() int64 {
	switch {
	case *bigFlag:
		return 64 << 20
	case testing.Short():
		return 1 << 20
	case raceEnabled:
		return 4 << 20
	}
	return 64 << 20
}

// host is a gVisor stack on one NIC (ConnectX or ENET model).
type host struct {
	*stacktest.Host
	ep    *netstack.Endpoint
	port  connectxtest.Port
	close func()
}

func newStack(t testing.TB, dev netstack.Device, i byte, lso bool) *host {
	t.Helper()
	ep, err := netstack.New(netstack.Options{Device: dev, TSO: lso, GRO: true, PollInterval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return &host{Host: stacktest.New(t, ep, i, stacktest.Options{}), ep: ep}
}

// cxHost is a stack on a ConnectX driver on its model. The model's
// Activity channel stands for the interrupt line: a goroutine polls the
// driver when it fires.
func cxHost(t testing.TB, i byte, lso bool) (*host, *connectxtest.Rig) {
	mem := dmatest.New(t, dmatest.Options{CoherentSize: 4 << 20, CachedSize: 32 << 20})
	rig := connectxtest.NewRig(t, connectxtest.RigOptions{Mem: mem, MAC: [6]byte{2, 0xC7, 0, 0, 0, i}, NoDone: true})
	h := newStack(t, rig.NIC, i, lso)
	h.port = rig.Model
	stop := stacktest.Serve(rig.Model.Activity(), func() { rig.NIC.Poll() })
	h.Diag = func() string {
		return fmt.Sprintf("endpoint %+v\ndriver %+v\nmodel %+v\n", h.ep.Stats(), rig.NIC.Stats(), rig.Model.Stats())
	}
	h.close = func() { h.Close(); stop() }
	return h, rig
}

// enetHost is a stack on the ENET driver on its model (as netstack's tests
// build it), software TSO when lso.
func enetHost(t testing.TB, i byte, lso bool) *host {
	var dev *fecdev.Device
	mem := dmatest.New(t, dmatest.Options{CachedSize: 64 << 20})
	rig := fectest.NewRig(t, fectest.RigOptions{Mem: mem, MAC: [6]byte{2, 0, 0, 0, 0, i}, NoDone: true, Config: func(c *fec.Config) {
		c.Interrupts = true
		c.TxRing, c.RxRing = 512, 512
		c.OnTxDone = func(cookie any, err error) { dev.Done(cookie, err) }
	}})
	dev = fecdev.New(rig.NIC)
	h := newStack(t, dev, i, lso)
	h.port = connectxtest.ENET(rig.Model)
	stop := stacktest.Serve(rig.Model.IRQ(), func() { rig.NIC.Interrupt() })
	h.Diag = func() string {
		st := rig.NIC.Stats()
		return fmt.Sprintf("endpoint %+v\nenet tx %+v rx %+v\nmodel %+v\n", h.ep.Stats(), st.Tx, st.Rx, rig.Model.Stats())
	}
	h.close = func() { h.Close(); stop() }
	return h
}

// lossy drops about one frame in 97 and delays one in 53 (reordering).
func lossy() func(int, []byte) connectxtest.Action {
	var mu sync.Mutex
	k := 0
	return func(_ int, f []byte) connectxtest.Action {
		mu.Lock()
		defer mu.Unlock()
		k++
		switch {
		case len(f) < 200:
			return connectxtest.Pass // keep handshakes and ACK-only frames simple
		case k%97 == 0:
			return connectxtest.Drop
		case k%53 == 0:
			return connectxtest.Delay
		}
		return connectxtest.Pass
	}
}

// runPair joins a (on ConnectX rig ra) and b by a wire and moves bulk()
// bytes each way over IPv4 and IPv6; with lso, ra must have sent with LSO.
func runPair(t *testing.T, a, b *host, lso, lossyWire bool, ra *connectxtest.Rig) {
	t.Cleanup(func() { a.close(); b.close() })
	w := connectxtest.Connect(a.port, b.port)
	chk := &stacktest.Wire{}
	w.SetTap(func(_ int, f []byte) { chk.Tap(f) })
	if lossyWire {
		w.SetFilter(lossy())
	}
	n := bulk()
	t.Logf("%d bytes each way, IPv4 then IPv6", n)
	for i, v6 := range []bool{false, true} {
		if err := stacktest.Transfer(t, a.Host, b.Host, v6, uint16(5000+2*i), n, stacktest.Xfer{}); err != nil {
			t.Fatalf("a->b v6=%v: %v\n== a\n%s== b\n%s", v6, err, a.Diag(), b.Diag())
		}
		if err := stacktest.Transfer(t, b.Host, a.Host, v6, uint16(5001+2*i), n, stacktest.Xfer{}); err != nil {
			t.Fatalf("b->a v6=%v: %v\n== a\n%s== b\n%s", v6, err, a.Diag(), b.Diag())
		}
	}
	chk.Check(t, 1518, true)
	if lso && ra.NIC.Stats().TxLSO == 0 {
		t.Error("no LSO send")
	}
	if !lso && ra.NIC.Stats().TxLSO != 0 {
		t.Errorf("%d LSO sends with LSO off", ra.NIC.Stats().TxLSO)
	}
}

// stackCases are the configurations both stack tests run: LSO on and off,
// each over a clean wire and a lossy, reordering one.
var stackCases = []struct {
	name       string
	lso, lossy bool
}{{"lso", true, false}, {"nolso", false, false}, {"lso-lossy", true, true}, {"nolso-lossy", false, true}}

// TestStackConnectXToConnectX moves data both ways between two stacks on
// ConnectX models.
func TestStackConnectXToConnectX(t *testing.T) {
	for _, c := range stackCases {
		t.Run(c.name, func(t *testing.T) {
			a, ra := cxHost(t, 1, c.lso)
			b, rb := cxHost(t, 2, c.lso)
			runPair(t, a, b, c.lso, c.lossy, ra)
			if st := rb.Model.Stats(); st.RxFrames == 0 {
				t.Errorf("model b received nothing: %+v", st)
			}
		})
	}
}

// TestStackConnectXToENET moves data both ways between a stack on a
// ConnectX model and one on an ENET model.
func TestStackConnectXToENET(t *testing.T) {
	for _, c := range stackCases {
		t.Run(c.name, func(t *testing.T) {
			a, ra := cxHost(t, 1, c.lso)
			runPair(t, a, enetHost(t, 2, c.lso), c.lso, c.lossy, ra)
		})
	}
}
