// Package fwmain is the firmware main the boards share: take the address
// by DHCP or from the build (app.BuildNetConfig), bring up the board's
// ENET, the gVisor endpoint and stack, the services of package app, and
// print the READY line. A firmware's main only names its board and its
// hooks (firmware/mx6ullevk, firmware/sabrelite, firmware/usbarmory;
// firmware/mcimx7d adds its PCIe interfaces through Init, Attach and
// Stats).
package fwmain

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"sync"
	"time"

	"github.com/tamanic/tamanic/fec"
	"github.com/tamanic/tamanic/firmware/app"
	"github.com/tamanic/tamanic/netstack"
	"github.com/tamanic/tamanic/netstack/fecdev"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// Board is what differs between boards. The hooks run in this order:
// Init, ENET, Line, Attach; Stats whenever /stats is read.
type Board struct {
	// Init brings up what the board needs before the network (nil: none),
	// and may print what it found on the console.
	Init func() error
	// ENET returns the board's NIC, initialised and interrupt-driven,
	// from cfg (whose OnTxDone is set).
	ENET func(cfg fec.Config) (*fec.NIC, error)
	// Nanotime, Idle and Interrupts are the board's clock, idle time and
	// ENET interrupt counters.
	Nanotime   func() int64
	Idle       func() int64
	Interrupts func() (n, ns int64)
	// Line, when set, is printed on the console once the ENET is up.
	Line func() string
	// Attach, when set, runs once the stack serves the ENET (NIC 1) and
	// before the ENET's services start: a board with more interfaces adds
	// them to s (NIC 2 and up) with their own services; boot is the time
	// Run started. An error halts the board: a board that can serve
	// without an extra interface reports its error itself and returns nil.
	Attach func(s *stack.Stack, boot time.Time) error
	// AttachNet, when set, runs after Attach, with the ENET's network
	// (NIC 1's IPv4 configuration): an interface it adds takes its
	// address the same way, by DHCP or statically, with
	// Network.AddInterface, and /stats of NIC 1 reports it under
	// ipv4.interfaces. Its error halts the board, as Attach's does.
	AttachNet func(n *app.Network, boot time.Time) error
	// Stats, when set, returns members added to the ENET's /stats
	// document under nic (sabrelite: "board"; mcimx7d: "pcie", "e1000e",
	// "connectx").
	Stats func() map[string]any
}

// SelfTest is the build's self-test switch (make firmware SELFTEST=off,
// which links -X ...fwmain.SelfTest=off): anything but "off" runs the
// ENET's loopback self-test (fec.NIC.SelfTest) before the stack starts,
// and the i.MX7D firmware the 82574L's (e1000e.NIC.SelfTest) before its.
var SelfTest string

// GRO and AckFilter are the build's receive-merging switches (make
// firmware GRO=off ACKFILTER=off, which link -X ...fwmain.GRO=off and
// -X ...fwmain.AckFilter=off): "off" builds the ENET's endpoint without
// GRO or without the ACK filter (netstack.Options), for the
// request/response rows that measure what each costs or saves a small
// message; anything else keeps them on, the firmware's default. A
// non-default build says so on the console ("RXMERGE gro=off ...").
var GRO, AckFilter string

// Settings are the firmware's build-time settings (the address is
// app.BuildNetConfig's: make firmware IP=... GATEWAY=... DHCP=...).
type Settings struct {
	// Mode is the TX mode at boot.
	Mode string
	// SelfTest is SelfTest's value ("off" skips the self-test).
	SelfTest string
	// GRO and AckFilter are GRO's and AckFilter's values ("off" builds
	// the ENET's endpoint without it).
	GRO, AckFilter string
	// Interfaces is how many interfaces run the services (0 or 1: the
	// ENET's alone): the ENET's server takes app.DefaultLimits.Split of
	// it, and a board's AttachNet gives its own servers the same share,
	// so that together they fit app.MemoryBudget.
	Interfaces int
}

// Run starts the firmware on b and serves forever. A panic is printed on
// the console and the board halts.
func Run(b Board, s Settings) {
	boot := time.Now()
	defer func() {
		if r := recover(); r != nil {
			fmt.Printf("PANIC %v\n%s", r, debug.Stack())
			os.Exit(1)
		}
	}()
	if s.SelfTest == "" {
		s.SelfTest = SelfTest
	}
	if s.GRO == "" {
		s.GRO = GRO
	}
	if s.AckFilter == "" {
		s.AckFilter = AckFilter
	}
	if _, err := start(b, s, boot, app.BuildNetConfig, os.Stdout); err != nil {
		panic(err)
	}
	select {}
}

// running is what start brought up.
type running struct {
	ctl     app.Controls
	network *app.Network
}

// start brings the board up to its READY line, which it prints on
// console.
func start(b Board, s Settings, boot time.Time, netConfig func() (app.NetConfig, error), console io.Writer) (*running, error) {
	if b.Init != nil {
		if err := b.Init(); err != nil {
			return nil, fmt.Errorf("board init: %w", err)
		}
	}
	netcfg, err := netConfig()
	if err != nil {
		return nil, err
	}
	var dev *fecdev.Device
	n, err := b.ENET(fec.Config{OnTxDone: func(c any, err error) {
		if dev != nil { // the self-test's frames complete before dev exists
			dev.Done(c, err)
		}
	}})
	if err != nil {
		return nil, fmt.Errorf("ENET: %w", err)
	}
	if b.Line != nil {
		fmt.Fprintln(console, b.Line())
	}
	self := &selfTests{name: "enet", console: console}
	self.boot(n, s.SelfTest)
	dev = fecdev.New(n)
	gro, ackf := s.GRO != "off", s.AckFilter != "off"
	if !gro || !ackf {
		fmt.Fprintf(console, "RXMERGE gro=%s ackfilter=%s\n", onOff(gro), onOff(ackf))
	}
	ep, err := netstack.New(netstack.Options{Device: dev, TSO: true, AckFilter: ackf, GRO: gro, Clock: b.Nanotime})
	if err != nil {
		return nil, err
	}
	if netcfg.Nanotime == nil {
		netcfg.Nanotime = b.Nanotime
	}
	network, err := app.StartNetwork(ep, n.MAC(), netcfg, console)
	if err != nil {
		return nil, err
	}
	nc := &app.NICControls{NIC: n, EP: ep, Idle: b.Idle, Interrupts: b.Interrupts}
	if err := nc.SetMode(s.Mode, nil); err != nil {
		return nil, err
	}
	if b.Attach != nil {
		if err := b.Attach(network.Stack, boot); err != nil {
			return nil, err
		}
	}
	if b.AttachNet != nil {
		if err := b.AttachNet(network, boot); err != nil {
			return nil, err
		}
	}
	stats := func() map[string]any {
		m := map[string]any{"selftest": self.snapshot()}
		if b.Stats != nil {
			for k, v := range b.Stats() {
				m[k] = v
			}
		}
		return m
	}
	var ctl app.Controls = controls{nc, stats, self, dev}
	srv := &app.Server{Stack: network.Stack, NIC: 1, Net: network, Ctl: ctl, Boot: boot,
		Limits: app.DefaultLimits.Split(s.Interfaces)}
	if err := srv.Start(); err != nil {
		return nil, err
	}
	tx, cb := nc.Mode()
	m := n.MAC()
	fmt.Fprintf(console, "READY ip=%s mac=%02x:%02x:%02x:%02x:%02x:%02x mode=%s copybreak=%d boot_ns=%d\n",
		network.Addr(), m[0], m[1], m[2], m[3], m[4], m[5], tx, cb, time.Since(boot).Nanoseconds())
	return &running{ctl: ctl, network: network}, nil
}

// controls adds the board's members to the NIC's /stats document, and
// the run-time self-test (app.SelfTester).
type controls struct {
	*app.NICControls
	board func() map[string]any
	self  *selfTests
	dev   *fecdev.Device
}

// SelfTest implements app.SelfTester: the ENET's self-test now, the
// endpoint kept off the NIC meanwhile (fecdev.Device.SelfTest), with the
// same console lines as at boot.
func (c controls) SelfTest() (any, error) {
	res, counts, err := c.dev.SelfTest(fec.SelfTestOptions{})
	return c.self.record(res, counts, err, "run time"), nil
}

// Stats returns the NIC's members with the board's added.
func (c controls) Stats() any {
	m := map[string]any{}
	b, err := json.Marshal(c.NICControls.Stats())
	if err == nil {
		err = json.Unmarshal(b, &m)
	}
	if err != nil {
		// Reported in the document rather than dropped.
		m["stats_error"] = err.Error()
	}
	for k, v := range c.board() {
		m[k] = v
	}
	return m
}

// SelfTestReport is the /stats "nic.selftest" member: the ENET's loopback
// self-test, at boot and each run since (POST /selftest).
type SelfTestReport struct {
	// Skipped: built with SELFTEST=off (and none run since). Error: the
	// last test could not run.
	Skipped bool                 `json:"skipped,omitempty"`
	Error   string               `json:"error,omitempty"`
	Results []fec.SelfTestResult `json:"results,omitempty"`
	// Counts is what every test so far added to the driver's counters.
	Counts fec.SelfTestCounts `json:"counts"`
	// Failures counts the failed checks of every mode of the last test:
	// never hidden. Runs counts the tests run, FailedRuns those with a
	// failure or an error (a failure at boot stays counted after a
	// later pass).
	Failures   int `json:"failures"`
	Runs       int `json:"runs"`
	FailedRuns int `json:"failed_runs"`
}

// selfTests holds an interface's self-test report for /stats and
// prints each test's lines ("SELFTEST enet mode=sg frames=17 ok 0.7ms
// loop=phy", the failures and the first of them, or "loopback
// unsupported here").
type selfTests struct {
	name    string
	console io.Writer
	mu      sync.Mutex
	r       SelfTestReport
}

// boot runs n's self-test unless mode is "off".
func (s *selfTests) boot(n *fec.NIC, mode string) {
	if mode == "off" {
		s.mu.Lock()
		s.r.Skipped = true
		s.mu.Unlock()
		fmt.Fprintf(s.console, "SELFTEST %s skipped (SELFTEST=off)\n", s.name)
		return
	}
	res, counts, err := n.SelfTestCounted(fec.SelfTestOptions{})
	s.record(res, counts, err, "")
}

// record makes a test's results the report's and prints them, when
// ("run time", or "" at boot) after the interface's name.
func (s *selfTests) record(res []fec.SelfTestResult, counts fec.SelfTestCounts, err error, when string) SelfTestReport {
	name := s.name
	if when != "" {
		name += " (" + when + ")"
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := &s.r
	r.Skipped, r.Error, r.Results, r.Failures = false, "", res, 0
	r.Runs++
	c := &r.Counts
	c.TxFrames += counts.TxFrames
	c.TxGSOPackets += counts.TxGSOPackets
	c.TxGSOSegments += counts.TxGSOSegments
	c.RxFrames += counts.RxFrames
	c.RxSkipped += counts.RxSkipped
	for _, x := range res {
		r.Failures += x.Failures
		if !x.OK() && !x.Unsupported && x.Failures == 0 {
			r.Failures++ // frames missing without a check failing: counted all the same
		}
		fmt.Fprintf(s.console, "SELFTEST %s %s\n", name, x)
	}
	if err != nil {
		r.Error = err.Error()
		r.Failures++
		fmt.Fprintf(s.console, "SELFTEST %s error=%q\n", name, err.Error())
	}
	if r.Failures > 0 {
		r.FailedRuns++
	}
	return s.copyLocked()
}

// snapshot returns a copy of the report.
func (s *selfTests) snapshot() SelfTestReport {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.copyLocked()
}

func (s *selfTests) copyLocked() SelfTestReport {
	r := s.r
	r.Results = append([]fec.SelfTestResult(nil), r.Results...)
	return r
}

func onOff(on bool) string {
	if on {
		return "on"
	}
	return "off"
}
