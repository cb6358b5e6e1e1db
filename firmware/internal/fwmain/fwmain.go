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

// Settings are the firmware's build-time settings (the address is
// app.BuildNetConfig's: make firmware IP=... GATEWAY=... DHCP=...).
type Settings struct {
	// Mode is the TX mode at boot.
	Mode string
	// SelfTest is SelfTest's value ("off" skips the self-test).
	SelfTest string
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
	self := selfTest(n, "enet", s.SelfTest, console)
	dev = fecdev.New(n)
	ep, err := netstack.New(netstack.Options{Device: dev, TSO: true, AckFilter: true, GRO: true, Clock: b.Nanotime})
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
	var ctl app.Controls = nc
	stats := b.Stats
	if self != nil {
		stats = func() map[string]any {
			m := map[string]any{"selftest": self}
			if b.Stats != nil {
				for k, v := range b.Stats() {
					m[k] = v
				}
			}
			return m
		}
	}
	if stats != nil {
		ctl = controls{nc, stats}
	}
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

// controls adds the board's members to the NIC's /stats document.
type controls struct {
	*app.NICControls
	board func() map[string]any
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
// self-test at boot.
type SelfTestReport struct {
	// Skipped: built with SELFTEST=off. Error: the test could not run.
	Skipped bool                 `json:"skipped,omitempty"`
	Error   string               `json:"error,omitempty"`
	Results []fec.SelfTestResult `json:"results,omitempty"`
	// Counts is what the test added to the driver's counters.
	Counts fec.SelfTestCounts `json:"counts"`
	// Failures counts the failed checks of every mode: never hidden.
	Failures int `json:"failures"`
}

// selfTest runs n's loopback self-test unless mode is "off", prints one
// line per TX mode ("SELFTEST enet mode=sg frames=17 ok 0.7ms", the
// failures and the first of them, or "loopback unsupported here") and
// returns the report.
func selfTest(n *fec.NIC, name, mode string, console io.Writer) *SelfTestReport {
	r := &SelfTestReport{}
	if mode == "off" {
		r.Skipped = true
		fmt.Fprintf(console, "SELFTEST %s skipped (SELFTEST=off)\n", name)
		return r
	}
	res, counts, err := n.SelfTestCounted(fec.SelfTestOptions{})
	r.Results, r.Counts = res, counts
	for _, x := range res {
		r.Failures += x.Failures
		if !x.OK() && !x.Unsupported && x.Failures == 0 {
			r.Failures++ // frames missing without a check failing: counted all the same
		}
		fmt.Fprintf(console, "SELFTEST %s %s\n", name, x)
	}
	if err != nil {
		r.Error = err.Error()
		r.Failures++
		fmt.Fprintf(console, "SELFTEST %s error=%q\n", name, err.Error())
	}
	return r
}
