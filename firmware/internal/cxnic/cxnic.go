//go:build tamago && arm

// Package cxnic brings a ConnectX function up as an extra interface of a
// firmware's gVisor stack, the same way on every board with a PCIe root
// complex (firmware/mcimx7d, firmware/sabrelite): its own address (by
// DHCP, or static) and route, its own instance of the services of package
// app, the card's health counter watched, and its /stats member. How the card is found
// and its BAR0 reached (the transport, the window) is the board's: Add
// is handed a function that opens the card.
package cxnic

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/tamanic/tamanic/connectx"
	"github.com/tamanic/tamanic/firmware/app"
	"github.com/tamanic/tamanic/netstack"
	"github.com/tamanic/tamanic/pcie"
)

// Health check: the card advances the init segment's health counter
// (offset 0x1010) while its firmware runs. Linux mlx5 (health.c
// poll_health) reads it every 2 s and reports the device compromised after
// three unchanged reads. Here the link is reported down after 1 s without
// a change (healthMisses), which the counter moving again undoes. After
// 6 s (healthFailMisses, Linux's three polls) the card is asked a command
// (connectx.NIC.Check): if that times out too, its firmware is gone and the
// card is declared failed (connectx.NIC.Fail: bus mastering off, the sends
// it held handed back to the stack, for good); if it answers, the check is
// repeated 5 s later. A PCIe link found down fails the card at once.
//
// CmdTimeout (iface.go) is the command timeout the firmwares give the
// driver.

const (
	healthOffset     = 0x1010
	healthEvery      = 250 * time.Millisecond
	healthMisses     = 4
	healthFailMisses = 24
)

// Card is a ConnectX function the board has opened.
type Card struct {
	NIC *connectx.NIC
	// Window maps the start of BAR0 (the init segment): the health
	// counter is read through it.
	Window    *pcie.Window
	Transport string // e.g. "pcie-15b3", "ivshmem"
	BDF       pcie.BDF
	BAR0      uint64 // bus address of BAR0
}

// Controls implements app.Controls for the ConnectX: "tso" is the card's
// LSO for connections established from now on, "sg" turns it off
// (checksum offload stays on).
type Controls struct {
	HWTSOMode
	card    Card
	ep      *netstack.Endpoint
	dev     *Device
	self    *selfTests
	health  atomic.Uint32 // last health counter read
	stalled atomic.Bool
	misses  atomic.Int32
}

// Stats is the ConnectX's /stats member (nic.connectx).
type Stats struct {
	Transport string         `json:"transport"`
	BAR0      uint64         `json:"bar0"`
	Link      bool           `json:"link"`
	Health    string         `json:"health"`          // "ok", "stalled" or "failed"
	Error     string         `json:"error,omitempty"` // why the card was declared failed
	Counter   uint32         `json:"health_counter"`
	Caps      connectx.Caps  `json:"caps"`
	Driver    connectx.Stats `json:"driver"`
	Endpoint  netstack.Stats `json:"endpoint"`
	Mode      string         `json:"mode"`
	// SelfTest is the loopback self-test at boot or the last run since
	// (POST /selftest); its Counts are in Driver's counters, not the
	// endpoint's.
	SelfTest *SelfTestReport `json:"selftest"`
}

// Stats returns the /stats member.
func (c *Controls) Stats() any {
	n := c.card.NIC
	s := Stats{Transport: c.card.Transport, BAR0: c.card.BAR0, Health: "ok", Counter: c.health.Load(),
		Caps: n.Caps(), Driver: n.Stats(), Endpoint: c.ep.Stats(), SelfTest: c.self.snapshot()}
	s.Mode, _ = c.Mode()
	if c.stalled.Load() {
		s.Health = "stalled"
	}
	if err := n.Err(); err != nil {
		s.Health, s.Error = "failed", err.Error()
	}
	s.Link = n.Link() && !c.stalled.Load()
	return s
}

// watch polls the health counter through w for as long as the board runs.
func (c *Controls) watch(w *pcie.Window) {
	last := w.Read32(healthOffset)
	c.health.Store(last)
	for {
		time.Sleep(healthEvery)
		if !w.LinkUp() {
			// Linux counts a PCI channel gone offline among the fatal
			// sensors (health.c check_fatal_sensors); the card can no
			// longer complete anything it holds.
			c.card.NIC.Fail(errors.New("PCIe link down"))
			fmt.Printf("CONNECTX health=failed: %v: held sends released; down until the board restarts\n", c.card.NIC.Err())
			return
		}
		v := w.Read32(healthOffset)
		c.health.Store(v)
		if v != last {
			last = v
			c.misses.Store(0)
			if c.stalled.Swap(false) {
				fmt.Printf("CONNECTX health=ok counter=%d\n", v)
			}
			continue
		}
		m := c.misses.Add(1)
		if m == healthMisses && !c.stalled.Swap(true) {
			fmt.Printf("CONNECTX health=stalled counter=%d (unchanged for %v): link reported down\n",
				v, healthEvery*healthMisses)
		}
		if m < healthFailMisses {
			continue
		}
		err := c.card.NIC.Check()
		switch {
		case err == nil:
			fmt.Printf("CONNECTX health counter=%d unchanged for %v, but the card answers commands\n", v, healthEvery*time.Duration(m))
			c.misses.Store(healthMisses)
		case errors.Is(err, connectx.ErrTimeout) || errors.Is(err, connectx.ErrDead):
			c.card.NIC.Fail(fmt.Errorf("health counter %d unchanged for %v, and %v", v, healthEvery*time.Duration(m), err))
			fmt.Printf("CONNECTX health=failed: %v: bus mastering off, held sends released; down until the board restarts\n",
				c.card.NIC.Err())
			return
		default:
			return // closed, or already failed: nothing left to watch
		}
	}
}

// Add opens the card (open is the board's bring-up of the function it
// found) and adds it to n's stack as NIC o.NIC, with an IPv6 link-local
// address, its IPv4 address taken as o.Net says (by default its own DHCP
// client, reported in /stats under ipv4 and in NIC 1's under
// ipv4.interfaces; or static, CXIP) and its own services, bound to the NIC
// so that they follow the address it takes, and prints its CONNECTX line
// with that address (see serve).
//
// A failure after the card is up closes it again (and removes its NIC from
// the stack, if it was added), so nothing is left half-initialised: the
// card's queues torn down and its pages taken back, bus mastering off.
func Add(n *app.Network, o Options, open func() (Card, error), boot time.Time) (_ *Controls, err error) {
	card, err := open()
	if err != nil {
		return nil, err
	}
	nic := card.NIC
	defer func() {
		if err == nil {
			return
		}
		if cerr := nic.Close(); cerr != nil {
			err = fmt.Errorf("%w (and closing the card: %v)", err, cerr)
		}
	}()
	// The loopback self-test, before the endpoint exists (it receives
	// from the NIC itself), unless the build says SELFTEST=off.
	self := &selfTests{console: os.Stdout}
	if o.SelfTest == "off" {
		self.skip()
	} else {
		res, counts, err := nic.SelfTestCounted(connectx.SelfTestOptions{})
		self.record(res, counts, err, "boot")
	}
	dev := &Device{NIC: nic}
	ep, err := netstack.New(netstack.Options{Device: dev, TSO: true, AckFilter: true, GRO: true,
		PollInterval: 500 * time.Microsecond, Clock: o.Clock})
	if err != nil {
		return nil, err
	}
	c := &Controls{HWTSOMode: HWTSOMode{Name: "connectx", EP: ep, Idle: o.Idle}, card: card, ep: ep, dev: dev, self: self}
	if err := c.SetMode(o.Mode, nil); err != nil {
		return nil, err
	}
	m := nic.MAC()
	in, err := serve(n, o, ep, m, c, boot, os.Stdout)
	if err != nil {
		return nil, err
	}
	go c.watch(card.Window)
	fmt.Printf("CONNECTX ip=%s mac=%02x:%02x:%02x:%02x:%02x:%02x link=%v transport=%s bdf=%v bar0=%#x lso=%v mode=%s\n",
		in.ip, m[0], m[1], m[2], m[3], m[4], m[5], nic.Link(), card.Transport, card.BDF, card.BAR0, nic.Caps().MaxLSO, o.Mode)
	return c, nil
}

// Registers implements app.RegisterDumper for GET /debug/regs on the
// ConnectX (registerGroups).
func (c *Controls) Registers() []app.RegisterGroup { return registerGroups(c.card.NIC) }

// SelfTest implements app.SelfTester for POST /selftest on the
// ConnectX: its loopback self-test now, the endpoint kept off the NIC
// meanwhile (Device.SelfTest), with the same console lines as at boot.
func (c *Controls) SelfTest() (any, error) {
	res, counts, err := c.dev.SelfTest(connectx.SelfTestOptions{})
	return c.self.record(res, counts, err, "run time"), nil
}

var (
	_ app.RegisterDumper = (*Controls)(nil)
	_ app.SelfTester     = (*Controls)(nil)
)
