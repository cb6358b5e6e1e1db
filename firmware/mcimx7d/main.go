//go:build tamago && arm

// Command mcimx7d is the tamanic firmware for the i.MX 7Dual SABRE and
// QEMU's mcimx7d-sabre: the PCIe root complex (its devices listed on the
// console and in /stats under nic.pcie), the ENET driver on ENET1, the
// gVisor endpoint and the services of package app, brought up by
// firmware/internal/fwmain like the other boards' (the PCIe interfaces
// through its Init, Attach and Stats hooks). It prints
// "READY ip=... mac=... mode=..." on the console when serving.
//
// When an Intel 82574L (QEMU's e1000e) is on the PCIe bus, it becomes a
// second interface of the same gVisor stack (NIC 2) with its own address,
// taken by DHCP like ENET1's (its own client, app.Network.AddInterface),
// after its loopback self-test (e1000e.NIC.SelfTest: one
// "SELFTEST e1000e mode=..." line per mode on the console, the results
// in /stats under nic.selftest of NIC 2 and nic.e1000e.selftest of
// ENET1; skipped with SELFTEST=off, as ENET1's),
// and its own instance of the services; /stats of both interfaces reports
// it under nic.e1000e and its lease under ipv4 (ENET1's: under
// ipv4.interfaces), and the console says "E1000E ip=... mac=..." once it
// has its address (at most app.DefaultDHCPWait after it is found).
//
// When a ConnectX function (Mellanox 15b3, the mlx5 device IDs) is on the
// bus, or QEMU's ivshmem-plain (1af4:1110) whose BAR2 is a ConnectX BAR0
// served by tamanic-cxsim, it becomes NIC 3, polled, after its loopback
// self-test through the vport's local loopback (connectx.NIC.SelfTest:
// "SELFTEST cx0 mode=sg|lso ..." lines, nic.connectx.selftest in /stats,
// POST /selftest on its services; skipped with SELFTEST=off), with its own address,
// taken by DHCP in the same way, and services; /stats reports it under
// nic.connectx, with its transport, and its lease under ipv4.interfaces
// ("CONNECTX ip=... transport=..." on the console once it has its address,
// or "CONNECTX none").
//
// ENET1's address comes by DHCP, or is static when built so (see
// app.BuildNetConfig): make firmware IP=10.0.0.1/24 GATEWAY=10.0.0.2. The
// 82574L's likewise, with its own variables (E1000EIP, E1000EGateway,
// E1000EDHCP, read as app.ParseNetConfig reads ENET1's), and the
// ConnectX's (CXIP, CXGateway, CXDHCP); static, for example:
//
//	-ldflags "-X main.E1000EIP=10.0.2.1/24 -X main.CXIP=10.0.3.1/24"
package main

import (
	"fmt"
	"os"
	"time"

	"github.com/tamanic/tamanic/board/mcimx7d"
	"github.com/tamanic/tamanic/board/pcireport"
	"github.com/tamanic/tamanic/e1000e"
	"github.com/tamanic/tamanic/firmware/app"
	"github.com/tamanic/tamanic/firmware/internal/cxnic"
	"github.com/tamanic/tamanic/firmware/internal/fwmain"
	"github.com/tamanic/tamanic/netstack"
	"github.com/tamanic/tamanic/pcie"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv6"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// Build-time settings.
var (
	// Mode is the TX mode at boot (-ldflags "-X main.Mode=sg").
	Mode = "tso"
	// E1000EIP is the 82574L's static address and prefix (QEMU's default
	// user network is 10.0.2.0/24 with the host at 10.0.2.2); empty, the
	// default: DHCP. E1000EGateway is its static gateway (the default
	// route stays with the interface that first has one: ENET1's, as a
	// rule). E1000EDHCP is "on", "off" or empty, as app.BuildDHCP: "on"
	// with E1000EIP falls back to E1000EIP without a lease.
	E1000EIP      = ""
	E1000EGateway = ""
	E1000EDHCP    = ""
	// E1000EIRQ selects the 82574L's interrupt: "intx" (INTA) or "msi"
	// (through the DesignWare MSI receiver).
	E1000EIRQ = "intx"
)

// e1000eControls implements app.Controls for the 82574L: "tso" is
// hardware TCP segmentation for connections established from now on,
// "sg" turns it off (TX always gathers fragments in place: there is no
// bounce mode). Copybreak does not apply (every frame is copied once by
// the endpoint, its buffer refilled at once).
type e1000eControls struct {
	cxnic.HWTSOMode
	nic  *e1000e.NIC
	ep   *netstack.Endpoint
	irqs func() (n, ns int64)
	rc   *pcie.RC
	self *e1000eSelfTestReport
}

// e1000ePHYRegs are the PHY registers of the dump (IEEE 802.3 clause 22,
// the 82574's internal PHY): none that a read changes (not BMSR's latched
// link status, ANER's latched fault, nor GBSR's idle error count, which
// the PHY-hang watchdog reads).
var e1000ePHYRegs = []struct {
	name string
	reg  int
}{{"BMCR", 0}, {"PHYIDR1", 2}, {"PHYIDR2", 3}, {"ANAR", 4}, {"ANLPAR", 5}, {"GBCR", 9}, {"GBESR", 15}}

// Registers implements app.RegisterDumper for GET /debug/regs on NIC 2:
// the 82574L's registers, its PHY's, and the PCIe root port's.
func (c *e1000eControls) Registers() []app.RegisterGroup {
	var out []app.RegisterGroup
	g := app.RegisterGroup{Block: "e1000e"}
	for _, r := range c.nic.Registers() {
		g.Regs = append(g.Regs, app.Register(r))
	}
	out = append(out, g)
	p := app.RegisterGroup{Block: "e1000e-phy"}
	for _, r := range e1000ePHYRegs {
		v, err := c.nic.ReadPHY(r.reg)
		if err != nil {
			p.Error = err.Error()
			break
		}
		p.Regs = append(p.Regs, app.Register{Name: r.name, Offset: uint32(r.reg), Value: uint32(v)})
	}
	out = append(out, p)
	if c.rc != nil {
		q := app.RegisterGroup{Block: "pcie"}
		for _, r := range c.rc.Registers() {
			q.Regs = append(q.Regs, app.Register(r))
		}
		out = append(out, q)
	}
	return out
}

// e1000eStats is the 82574L's /stats member: the driver's counters, the
// endpoint's, the statistics registers, the link and interrupts.
type e1000eStats struct {
	Driver   e1000e.Stats   `json:"driver"`
	Endpoint netstack.Stats `json:"endpoint"`
	HW       e1000e.HWStats `json:"hw"`
	Link     e1000e.Link    `json:"link"`
	IRQs     int64          `json:"irqs"`
	IRQNs    int64          `json:"irq_ns"`
	// SelfTest is the loopback self-test at boot; its Counts are in
	// Driver's counters, not the endpoint's.
	SelfTest *e1000eSelfTestReport `json:"selftest"`
}

func (c *e1000eControls) Stats() any {
	s := e1000eStats{Driver: c.nic.Stats(), Endpoint: c.ep.Stats(), HW: c.nic.HWStats(), Link: c.nic.Link(), SelfTest: c.self}
	s.IRQs, s.IRQNs = c.irqs()
	return s
}

// addE1000E brings up the 82574L d as NIC 2 of n's stack, takes its
// address (DHCP or static, E1000EIP) and serves on it.
func addE1000E(n *app.Network, rc *pcie.RC, d *pcie.Device, boot time.Time) (*e1000eControls, error) {
	cfg, err := app.ParseNetConfig(E1000EIP, E1000EGateway, E1000EDHCP)
	if err != nil {
		return nil, fmt.Errorf("e1000e: %v", err)
	}
	cfg.Hostname = "tamanic"
	s := n.Stack
	var ep *netstack.Endpoint
	nic, irqs, err := mcimx7d.E1000E(rc, d, E1000EIRQ == "msi", e1000e.Config{})
	if err != nil {
		return nil, err
	}
	// The loopback self-test, before the stack's endpoint exists (it
	// receives from the NIC itself).
	self := e1000eSelfTest(nic)
	nic.SetAllMulticast(true) // gVisor never says which groups it joins
	ep, err = netstack.New(netstack.Options{Device: e1000e.Device{NIC: nic}, TSO: true, AckFilter: true, GRO: true,
		Clock: mcimx7d.Nanotime})
	if err != nil {
		return nil, err
	}
	if err := s.CreateNIC(2, ep); err != nil {
		return nil, fmt.Errorf("e1000e: CreateNIC: %v", err)
	}
	m := nic.MAC()
	if err := s.AddProtocolAddress(2, tcpip.ProtocolAddress{Protocol: ipv6.ProtocolNumber,
		AddressWithPrefix: header.LinkLocalAddr(tcpip.LinkAddress(m[:])).WithPrefix()}, stack.AddressProperties{}); err != nil {
		return nil, fmt.Errorf("e1000e: IPv6 link-local: %v", err)
	}
	// The address and its subnet route (gVisor keeps routes ordered by
	// prefix length: the subnet's comes before ENET1's default route).
	e, err := n.AddInterface(2, cfg, os.Stdout)
	if err != nil {
		return nil, fmt.Errorf("e1000e: %w", err)
	}
	c := &e1000eControls{HWTSOMode: cxnic.HWTSOMode{Name: "e1000e", EP: ep, Idle: mcimx7d.IdleNanoseconds}, nic: nic, ep: ep, irqs: irqs, rc: rc, self: self}
	// The services listen on any address of NIC 2, so they follow the
	// lease.
	srv := &app.Server{Stack: s, NIC: 2, Ctl: c, Boot: boot, Net: e, Limits: app.DefaultLimits.Split(Interfaces)}
	if err := srv.Start(); err != nil {
		return nil, err
	}
	if e.DHCP != nil {
		// READY waits for the lease a while, as it does for ENET1's, so
		// that the address is on the console before it.
		select {
		case <-e.DHCP.Bound():
		case <-time.After(app.DefaultDHCPWait):
		}
	}
	ip := "none"
	if a := e.Addr(); a.IsValid() {
		ip = a.String()
	}
	l := nic.Link()
	fmt.Printf("E1000E ip=%s mac=%02x:%02x:%02x:%02x:%02x:%02x link=%v speed=%d irq=%s\n",
		ip, m[0], m[1], m[2], m[3], m[4], m[5], l.Up, l.Mbps, E1000EIRQ)
	return c, nil
}

// e1000eSelfTestReport is the 82574L's self-test at boot, as
// fwmain.SelfTestReport is ENET1's.
type e1000eSelfTestReport struct {
	// Skipped: built with SELFTEST=off. Error: the test could not run.
	Skipped bool                    `json:"skipped,omitempty"`
	Error   string                  `json:"error,omitempty"`
	Results []e1000e.SelfTestResult `json:"results,omitempty"`
	// Counts is what the test added to the driver's counters.
	Counts e1000e.SelfTestCounts `json:"counts"`
	// Failures counts the failed checks of every mode: never hidden.
	Failures int `json:"failures"`
}

// e1000eSelfTest runs the 82574L's loopback self-test unless the build
// says SELFTEST=off (fwmain.SelfTest), prints one line per mode
// ("SELFTEST e1000e mode=sg frames=19 ok 1.2ms", "... FAIL ..." or
// "... unsupported: ...") and returns the report.
func e1000eSelfTest(nic *e1000e.NIC) *e1000eSelfTestReport {
	r := &e1000eSelfTestReport{}
	if fwmain.SelfTest == "off" {
		r.Skipped = true
		fmt.Println("SELFTEST e1000e skipped (SELFTEST=off)")
		return r
	}
	res, counts, err := nic.SelfTestCounted(e1000e.SelfTestOptions{})
	r.Results, r.Counts = res, counts
	for _, x := range res {
		r.Failures += x.Failures
		if !x.OK() && !x.Unsupported && x.Failures == 0 {
			r.Failures++ // frames missing without a check failing: counted all the same
		}
		fmt.Printf("SELFTEST e1000e %s\n", x)
	}
	if err != nil {
		r.Error = err.Error()
		r.Failures++
		fmt.Printf("SELFTEST e1000e error=%q\n", err.Error())
	}
	return r
}

// Interfaces is how many interfaces may run the services: ENET1, the
// 82574L and the ConnectX. Each takes a third of the default limits
// (app.Limits.Split), so that the three fit one memory budget.
const Interfaces = 3

func main() {
	var (
		rc  *pcie.RC
		rep mcimx7d.PCIeReport
		e1  *e1000eControls
		cx  *cxnic.Controls
	)
	fwmain.Run(fwmain.Board{
		Init: func() error {
			mcimx7d.Init()
			rc, rep = mcimx7d.PCIe()
			pcireport.Print(os.Stdout, rep)
			return nil
		},
		ENET:     mcimx7d.ENET1,
		Nanotime: mcimx7d.Nanotime, Idle: mcimx7d.IdleNanoseconds, Interrupts: mcimx7d.Interrupts,
		AttachNet: func(n *app.Network, boot time.Time) error {
			e1, cx = attach(n, rc, boot)
			return nil
		},
		Stats: func() map[string]any {
			m := map[string]any{"pcie": rep}
			if e1 != nil {
				m["e1000e"] = e1.Stats()
			}
			if cx != nil {
				m["connectx"] = cx.Stats()
			}
			return m
		},
	}, fwmain.Settings{Mode: Mode, Interfaces: Interfaces})
}

// attach adds the 82574L (NIC 2) and the ConnectX (NIC 3) found on the
// bus to n's stack, each with its own address and services. Their errors are reported on the
// console, not fatal: ENET1 still serves.
func attach(n *app.Network, rc *pcie.RC, boot time.Time) (*e1000eControls, *cxnic.Controls) {
	if rc == nil {
		fmt.Println("CONNECTX none: no PCIe root complex")
		return nil, nil
	}
	var e1 *e1000eControls
	if d := e1000e.Find(rc.Devices()); d != nil {
		c, err := addE1000E(n, rc, d, boot)
		if err != nil {
			fmt.Printf("E1000E error=%q\n", err.Error())
		}
		e1 = c
	}
	cx, err := addConnectX(n, rc, boot)
	switch {
	case err != nil:
		fmt.Printf("CONNECTX error=%q\n", err.Error())
	case cx == nil:
		fmt.Println("CONNECTX none: no Mellanox 15b3 or ivshmem 1af4:1110 function on the bus")
	}
	return e1, cx
}
