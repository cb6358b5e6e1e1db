package fwmain

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/tamanic/tamanic/fec"
	"github.com/tamanic/tamanic/fec/fectest"
	"github.com/tamanic/tamanic/firmware/app"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

func static() (app.NetConfig, error) { return app.ParseNetConfig("10.0.0.1/24", "10.0.0.2", "") }

// TestHooks runs the shared sequence on a NIC over the ENET model: the
// hooks run in order (Init, ENET, Line, Attach, AttachNet, then READY),
// Attach gets the stack already serving the ENET as NIC 1, AttachNet its
// network, and /stats has the NIC's members and the board's.
func TestHooks(t *testing.T) {
	var order []string
	var console bytes.Buffer
	b := Board{
		Init: func() error { order = append(order, "init"); return nil },
		ENET: func(cfg fec.Config) (*fec.NIC, error) {
			order = append(order, "enet")
			r := fectest.NewRig(t, fectest.RigOptions{Config: func(c *fec.Config) { c.OnTxDone = cfg.OnTxDone }})
			return r.NIC, nil
		},
		Nanotime:   func() int64 { return time.Now().UnixNano() },
		Idle:       func() int64 { return 7 },
		Interrupts: func() (int64, int64) { return 3, 4 },
		Line:       func() string { order = append(order, "line"); return "BOARD test=1" },
		Attach: func(s *stack.Stack, boot time.Time) error {
			order = append(order, "attach")
			if !s.HasNIC(1) {
				t.Error("Attach: the stack has no NIC 1")
			}
			if strings.Contains(console.String(), "READY") {
				t.Error("Attach ran after READY")
			}
			return nil
		},
		AttachNet: func(n *app.Network, boot time.Time) error {
			order = append(order, "attachnet")
			if n == nil || n.NIC != 1 || !n.Stack.HasNIC(1) || n.Addr() != netip.MustParsePrefix("10.0.0.1/24") {
				t.Errorf("AttachNet: network %+v, want NIC 1's, configured", n)
			}
			if strings.Contains(console.String(), "READY") {
				t.Error("AttachNet ran after READY")
			}
			return nil
		},
		Stats: func() map[string]any { return map[string]any{"pcie": map[string]int{"devices": 2}} },
	}
	r, err := start(b, Settings{Mode: "sg"}, time.Now(), static, &console)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(order, ","); got != "init,enet,line,attach,attachnet" {
		t.Errorf("hooks ran %s, want init,enet,line,attach,attachnet", got)
	}
	out := console.String()
	if !strings.Contains(out, "BOARD test=1\n") || !strings.Contains(out, "READY ip=10.0.0.1/24 mac=02:00:00:00:00:01 mode=sg") {
		t.Errorf("console:\n%s", out)
	}
	if got := r.network.Addr(); got != netip.MustParsePrefix("10.0.0.1/24") {
		t.Errorf("address %v", got)
	}
	var doc map[string]any
	j, err := json.Marshal(r.ctl.Stats())
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(j, &doc); err != nil {
		t.Fatal(err)
	}
	if p, _ := doc["pcie"].(map[string]any); p["devices"] != 2.0 {
		t.Errorf("/stats pcie = %v, want the board's member", doc["pcie"])
	}
	// The NIC's own members are still there (app.NICStats), with the
	// board's interrupt counters.
	if doc["irqs"] != 3.0 || doc["irq_ns"] != 4.0 || doc["driver"] == nil || doc["link"] == nil {
		t.Errorf("/stats lost the NIC's members: %v", doc)
	}
	// The loopback self-test ran before the stack, on the model: a line
	// per mode on the console, before READY, and /stats selftest.
	for _, m := range []string{"bounce", "sg", "tso"} {
		i, j := strings.Index(out, "SELFTEST enet mode="+m+" "), strings.Index(out, "READY")
		if i < 0 || i > j || !strings.Contains(out[i:], " ok ") {
			t.Errorf("no passing SELFTEST line for %s before READY:\n%s", m, out)
		}
	}
	if st, _ := doc["selftest"].(map[string]any); st == nil || st["failures"] != 0.0 || len(st["results"].([]any)) != 3 {
		t.Errorf("/stats selftest = %v", doc["selftest"])
	}
}

// TestSelfTestSkippedAndUnsupported: SELFTEST=off prints that it was
// skipped; a MAC that neither loops back nor counts (QEMU's) prints
// "loopback unsupported here", with no failure counted.
func TestSelfTestSkippedAndUnsupported(t *testing.T) {
	for _, c := range []struct {
		mode, want string
		model      func(*fectest.Options)
	}{
		{"off", "SELFTEST enet skipped", nil},
		{"", "SELFTEST enet mode=sg loopback unsupported here", func(o *fectest.Options) { o.NoLoopback, o.NoMIB = true, true }},
	} {
		var console bytes.Buffer
		b := Board{
			ENET: func(cfg fec.Config) (*fec.NIC, error) {
				r := fectest.NewRig(t, fectest.RigOptions{Model: c.model, Config: func(x *fec.Config) { x.OnTxDone = cfg.OnTxDone }})
				return r.NIC, nil
			},
			Nanotime: func() int64 { return time.Now().UnixNano() },
			Idle:     func() int64 { return 0 }, Interrupts: func() (int64, int64) { return 0, 0 },
		}
		r, err := start(b, Settings{Mode: "sg", SelfTest: c.mode}, time.Now(), static, &console)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(console.String(), c.want) {
			t.Errorf("SelfTest %q: console:\n%s", c.mode, console.String())
		}
		j, _ := json.Marshal(r.ctl.Stats())
		if !strings.Contains(string(j), `"failures":0`) {
			t.Errorf("SelfTest %q: /stats %s", c.mode, j)
		}
	}
}

// TestRxMergeSwitches: GRO=off and ACKFILTER=off build the endpoint
// without them and say so on the console; the default keeps both and
// prints nothing.
func TestRxMergeSwitches(t *testing.T) {
	for _, c := range []struct {
		gro, ackf string
		line      string
	}{
		{"", "", ""},
		{"off", "", "RXMERGE gro=off ackfilter=on"},
		{"", "off", "RXMERGE gro=on ackfilter=off"},
		{"off", "off", "RXMERGE gro=off ackfilter=off"},
	} {
		var console bytes.Buffer
		b := Board{
			ENET: func(cfg fec.Config) (*fec.NIC, error) {
				r := fectest.NewRig(t, fectest.RigOptions{Config: func(x *fec.Config) { x.OnTxDone = cfg.OnTxDone }})
				return r.NIC, nil
			},
			Nanotime: func() int64 { return time.Now().UnixNano() },
			Idle:     func() int64 { return 0 }, Interrupts: func() (int64, int64) { return 0, 0 },
		}
		r, err := start(b, Settings{Mode: "sg", SelfTest: "off", GRO: c.gro, AckFilter: c.ackf}, time.Now(), static, &console)
		if err != nil {
			t.Fatal(err)
		}
		ep := r.ctl.(controls).EP
		if ep.GRO() != (c.gro != "off") || ep.AckFilter() != (c.ackf != "off") {
			t.Errorf("GRO=%q ACKFILTER=%q: endpoint gro %v ackfilter %v", c.gro, c.ackf, ep.GRO(), ep.AckFilter())
		}
		got := strings.Contains(console.String(), "RXMERGE")
		if (c.line == "") == got || (c.line != "" && !strings.Contains(console.String(), c.line)) {
			t.Errorf("GRO=%q ACKFILTER=%q: want line %q, console:\n%s", c.gro, c.ackf, c.line, console.String())
		}
	}
}

// TestHookErrors: an error from Init, ENET or Attach stops the start with
// that error, before READY.
func TestHookErrors(t *testing.T) {
	boom := errors.New("boom")
	enet := func(cfg fec.Config) (*fec.NIC, error) {
		return fectest.NewRig(t, fectest.RigOptions{Config: func(c *fec.Config) { c.OnTxDone = cfg.OnTxDone }}).NIC, nil
	}
	for name, b := range map[string]Board{
		"init":      {Init: func() error { return boom }, ENET: enet},
		"enet":      {ENET: func(fec.Config) (*fec.NIC, error) { return nil, boom }},
		"attach":    {ENET: enet, Attach: func(*stack.Stack, time.Time) error { return boom }},
		"attachnet": {ENET: enet, AttachNet: func(*app.Network, time.Time) error { return boom }},
	} {
		b.Nanotime = func() int64 { return time.Now().UnixNano() }
		b.Idle = func() int64 { return 0 }
		b.Interrupts = func() (int64, int64) { return 0, 0 }
		var console bytes.Buffer
		if _, err := start(b, Settings{Mode: "tso"}, time.Now(), static, &console); !errors.Is(err, boom) {
			t.Errorf("%s: err = %v, want boom", name, err)
		}
		if strings.Contains(console.String(), "READY") {
			t.Errorf("%s: READY printed after an error", name)
		}
	}
}

// TestRunTimeSelfTest: the firmware's controls run the ENET's self-test
// again (POST /selftest): the same console lines marked "(run time)", the
// report's runs counted, and /stats shows the new results with the counts
// of both tests.
func TestRunTimeSelfTest(t *testing.T) {
	var console bytes.Buffer
	b := Board{
		ENET: func(cfg fec.Config) (*fec.NIC, error) {
			r := fectest.NewRig(t, fectest.RigOptions{Config: func(c *fec.Config) { c.OnTxDone = cfg.OnTxDone }})
			return r.NIC, nil
		},
		Nanotime: func() int64 { return time.Now().UnixNano() },
		Idle:     func() int64 { return 0 },
	}
	r, err := start(b, Settings{Mode: "tso"}, time.Now(), static, &console)
	if err != nil {
		t.Fatal(err)
	}
	st, ok := r.ctl.(app.SelfTester)
	if !ok {
		t.Fatalf("controls %T: no run-time self-test", r.ctl)
	}
	boot := r.ctl.Stats().(map[string]any)["selftest"].(SelfTestReport)
	got, err := st.SelfTest()
	if err != nil {
		t.Fatal(err)
	}
	rep := got.(SelfTestReport)
	if rep.Runs != 2 || rep.FailedRuns != 0 || rep.Failures != 0 || len(rep.Results) != 3 || rep.Counts.TxFrames <= boot.Counts.TxFrames {
		t.Errorf("report after the run-time test %+v (at boot %+v)", rep, boot)
	}
	for _, m := range []string{"bounce", "sg", "tso"} {
		if !strings.Contains(console.String(), "SELFTEST enet (run time) mode="+m+" ") {
			t.Errorf("no run-time SELFTEST line for %s:\n%s", m, console.String())
		}
	}
	if s := r.ctl.Stats().(map[string]any)["selftest"].(SelfTestReport); s.Runs != 2 {
		t.Errorf("/stats selftest %+v", s)
	}
}
