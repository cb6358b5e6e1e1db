package cxnic

import (
	"fmt"
	"io"
	"time"

	"github.com/tamanic/tamanic/connectx"
	"github.com/tamanic/tamanic/firmware/app"
	"github.com/tamanic/tamanic/netstack"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv6"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// CmdTimeout is the command timeout the firmwares give the driver
// (connectx.Config.CmdTimeout) for the commands of a running card: Check
// holds the NIC while it waits, so a dead card stops the data path for
// that long before Fail; the driver's default is Linux's 60 s
// (lib/tout.c CMD), too long to hold a polled NIC. Bring-up's commands
// (ENABLE_HCA, INIT_HCA, ...) are not bounded by it: the driver gives
// them Linux's 60 s (connectx.Config.BringUpCmdTimeout).
const CmdTimeout = 5 * time.Second

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

// Options are a board's settings of the interface.
type Options struct {
	// NIC is the interface's NIC ID in the stack.
	NIC tcpip.NICID
	// Net is how the interface takes its IPv4 address: by DHCP (its own
	// client) or statically, as app.ParseNetConfig reads the board's
	// CXIP, CXGateway and CXDHCP.
	Net app.NetConfig
	// Mode is the initial TX mode: "tso" (the card segments: LSO) or "sg"
	// (no LSO; checksums still offloaded).
	Mode string
	// Clock and Idle are the board's clock and idle time.
	Clock func() int64
	Idle  func() int64
	// Limits are the interface's services' limits (zero: app's
	// defaults); a board with several interfaces gives each its share
	// (app.Limits.Split).
	Limits app.Limits
	// LeaseWait bounds how long Add waits for a first lease before it
	// prints the CONNECTX line (0: app.DefaultDHCPWait); the client keeps
	// trying after it.
	LeaseWait time.Duration
	// SelfTest is the build's self-test switch (fwmain.SelfTest): "off"
	// skips the loopback self-test at boot (connectx.NIC.SelfTest).
	SelfTest string
}

// iface is the interface's IPv4 configuration and services.
type iface struct {
	net *app.Network
	ip  string // the address it took within the wait, or "none"
}

// serve adds ep to n's stack as NIC o.NIC with an IPv6 link-local address
// from mac, has it take its IPv4 address as o.Net says
// (app.Network.AddInterface: its own DHCP client, or the static address
// and the subnet's route), and starts its own instance of the services on
// it. The services are bound to the NIC and to no address, so they follow
// whatever address the interface holds: a lease, a new lease after a
// renewal, or the static fallback. Under DHCP it waits for the first lease
// for at most o.LeaseWait, so that the CONNECTX line shows the address.
//
// On error the NIC is removed again. A DHCP client AddInterface started
// cannot be stopped through app's API; it is started after every other
// step that can fail but Start's listeners, which on a NIC just created
// have no port in use to collide with.
func serve(n *app.Network, o Options, ep stack.LinkEndpoint, mac [6]byte, ctl app.Controls, boot time.Time, console io.Writer) (_ iface, err error) {
	s := n.Stack
	if err := s.CreateNIC(o.NIC, ep); err != nil {
		return iface{}, fmt.Errorf("connectx: CreateNIC: %v", err)
	}
	defer func() {
		if err != nil {
			s.RemoveNIC(o.NIC)
		}
	}()
	if err := s.AddProtocolAddress(o.NIC, tcpip.ProtocolAddress{Protocol: ipv6.ProtocolNumber,
		AddressWithPrefix: header.LinkLocalAddr(tcpip.LinkAddress(mac[:])).WithPrefix()}, stack.AddressProperties{}); err != nil {
		return iface{}, fmt.Errorf("connectx: IPv6 link-local: %v", err)
	}
	// The address and its subnet's route: gVisor orders routes by prefix
	// length, so the subnet's comes before the default route, which stays
	// with the interface that first brought one (ENET1's, as a rule).
	e, err := n.AddInterface(o.NIC, o.Net, console)
	if err != nil {
		return iface{}, fmt.Errorf("connectx: %w", err)
	}
	srv := &app.Server{Stack: s, NIC: o.NIC, Ctl: ctl, Boot: boot, Net: e, Limits: o.Limits}
	if err := srv.Start(); err != nil {
		return iface{}, fmt.Errorf("connectx: %w", err)
	}
	if e.DHCP != nil {
		wait := o.LeaseWait
		if wait <= 0 {
			wait = app.DefaultDHCPWait
		}
		t := time.NewTimer(wait)
		select {
		case <-e.DHCP.Bound():
		case <-t.C:
		}
		t.Stop()
	}
	ip := "none"
	if a := e.Addr(); a.IsValid() {
		ip = a.String()
	}
	return iface{net: e, ip: ip}, nil
}

// registerGroups is GET /debug/regs on the ConnectX: its init segment,
// health buffer and health counter (connectx.NIC.Registers), named as in
// Linux's mlx5 device.h.
func registerGroups(n *connectx.NIC) []app.RegisterGroup {
	if n == nil {
		return []app.RegisterGroup{{Block: "connectx", Error: "no ConnectX"}}
	}
	g := app.RegisterGroup{Block: "connectx"}
	for _, r := range n.Registers() {
		g.Regs = append(g.Regs, app.Register(r))
	}
	return []app.RegisterGroup{g}
}
