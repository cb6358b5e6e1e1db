//go:build tamago && arm

// Package cxnic brings a ConnectX function up as an extra interface of a
// firmware's gVisor stack, the same way on every board with a PCIe root
// complex (firmware/mcimx7d, firmware/sabrelite): its own address and
// route, its own instance of the services of package app, the card's
// health counter watched, and its /stats member. How the card is found
// and its BAR0 reached (the transport, the window) is the board's: Add
// is handed a function that opens the card.
package cxnic

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/tamanic/tamanic/connectx"
	"github.com/tamanic/tamanic/firmware/app"
	"github.com/tamanic/tamanic/netstack"
	"github.com/tamanic/tamanic/pcie"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv6"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
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
// CmdTimeout is the command timeout the firmwares give the driver: Check
// holds the NIC while it waits, so a dead card stops the data path for
// that long before Fail; the driver's default is Linux's 60 s
// (lib/tout.c CMD), too long to hold a polled NIC.
const CmdTimeout = 5 * time.Second

const (
	healthOffset     = 0x1010
	healthEvery      = 250 * time.Millisecond
	healthMisses     = 4
	healthFailMisses = 24
)

// HWTSOMode is the app.Controls mode switch of a NIC that segments in
// hardware: "tso" turns host GSO (hardware TSO/LSO) on for connections
// established from now on, "sg" turns it off; there is no bounce mode and
// no copybreak.
type HWTSOMode struct {
	Name string
	EP   *netstack.Endpoint
	// Idle is the board's idle time (app.Controls.IdleNanoseconds).
	Idle func() int64
}

// SetMode implements app.Controls.
func (c HWTSOMode) SetMode(tx string, _ *int) error {
	switch tx {
	case "tso":
		c.EP.SetTSO(true)
	case "sg":
		c.EP.SetTSO(false)
	default:
		return fmt.Errorf("%s: unknown tx mode %q (want sg or tso)", c.Name, tx)
	}
	return nil
}

// Mode implements app.Controls.
func (c HWTSOMode) Mode() (string, int) {
	if c.EP.TSO() {
		return "tso", 0
	}
	return "sg", 0
}

// IdleNanoseconds implements app.Controls.
func (c HWTSOMode) IdleNanoseconds() int64 { return c.Idle() }

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

// Options are a board's settings of the interface.
type Options struct {
	// NIC is the interface's NIC ID in the stack.
	NIC tcpip.NICID
	// IP is its address and prefix ("10.0.3.1/24"); Mode its initial TX
	// mode: "tso" (the card segments: LSO) or "sg" (no LSO; checksums
	// still offloaded).
	IP, Mode string
	// Clock and Idle are the board's clock and idle time.
	Clock func() int64
	Idle  func() int64
}

// Controls implements app.Controls for the ConnectX: "tso" is the card's
// LSO for connections established from now on, "sg" turns it off
// (checksum offload stays on).
type Controls struct {
	HWTSOMode
	card    Card
	ep      *netstack.Endpoint
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
}

// Stats returns the /stats member.
func (c *Controls) Stats() any {
	n := c.card.NIC
	s := Stats{Transport: c.card.Transport, BAR0: c.card.BAR0, Health: "ok", Counter: c.health.Load(),
		Caps: n.Caps(), Driver: n.Stats(), Endpoint: c.ep.Stats()}
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
// found) and adds it to s as NIC o.NIC, with its address, a route to its
// subnet ahead of the others, an IPv6 link-local address and its own
// services, and prints its CONNECTX line.
//
// A failure after the card is up closes it again (and removes its NIC from
// the stack, if it was added), so nothing is left half-initialised: the
// card's queues torn down and its pages taken back, bus mastering off.
func Add(s *stack.Stack, o Options, open func() (Card, error), boot time.Time) (_ *Controls, err error) {
	addr, err := netip.ParsePrefix(o.IP)
	if err != nil || !addr.Addr().Is4() {
		return nil, fmt.Errorf("connectx: address %q: want an IPv4 prefix (%v)", o.IP, err)
	}
	card, err := open()
	if err != nil {
		return nil, err
	}
	nic := card.NIC
	added := false
	defer func() {
		if err == nil {
			return
		}
		if added {
			s.RemoveNIC(o.NIC)
		}
		if cerr := nic.Close(); cerr != nil {
			err = fmt.Errorf("%w (and closing the card: %v)", err, cerr)
		}
	}()
	ep, err := netstack.New(netstack.Options{Device: nic, TSO: true, AckFilter: true, GRO: true,
		PollInterval: 500 * time.Microsecond, Clock: o.Clock})
	if err != nil {
		return nil, err
	}
	if err := s.CreateNIC(o.NIC, ep); err != nil {
		return nil, fmt.Errorf("connectx: CreateNIC: %v", err)
	}
	added = true
	a4 := tcpip.AddrFrom4(addr.Addr().As4())
	if err := s.AddProtocolAddress(o.NIC, tcpip.ProtocolAddress{Protocol: ipv4.ProtocolNumber,
		AddressWithPrefix: tcpip.AddressWithPrefix{Address: a4, PrefixLen: addr.Bits()}}, stack.AddressProperties{}); err != nil {
		return nil, fmt.Errorf("connectx: address: %v", err)
	}
	m := nic.MAC()
	if err := s.AddProtocolAddress(o.NIC, tcpip.ProtocolAddress{Protocol: ipv6.ProtocolNumber,
		AddressWithPrefix: header.LinkLocalAddr(tcpip.LinkAddress(m[:])).WithPrefix()}, stack.AddressProperties{}); err != nil {
		return nil, fmt.Errorf("connectx: IPv6 link-local: %v", err)
	}
	sub, err := tcpip.NewSubnet(tcpip.AddrFrom4(addr.Masked().Addr().As4()),
		tcpip.MaskFromBytes(net.CIDRMask(addr.Bits(), 32)))
	if err != nil {
		return nil, fmt.Errorf("connectx: subnet: %v", err)
	}
	s.SetRouteTable(append([]tcpip.Route{{Destination: sub, NIC: o.NIC}}, s.GetRouteTable()...))
	c := &Controls{HWTSOMode: HWTSOMode{Name: "connectx", EP: ep, Idle: o.Idle}, card: card, ep: ep}
	if err := c.SetMode(o.Mode, nil); err != nil {
		return nil, err
	}
	go c.watch(card.Window)
	srv := &app.Server{Stack: s, NIC: o.NIC, Addr: a4, Ctl: c, Boot: boot}
	if err := srv.Start(); err != nil {
		return nil, err
	}
	fmt.Printf("CONNECTX ip=%s mac=%02x:%02x:%02x:%02x:%02x:%02x link=%v transport=%s bdf=%v bar0=%#x lso=%v mode=%s\n",
		addr, m[0], m[1], m[2], m[3], m[4], m[5], nic.Link(), card.Transport, card.BDF, card.BAR0, nic.Caps().MaxLSO, o.Mode)
	return c, nil
}
