//go:build tamago && arm

package main

import (
	"fmt"
	"net"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/tamanic/tamanic/board/mcimx7d"
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

// Build-time settings of the ConnectX interface.
var (
	// CXIP is the ConnectX interface's address and prefix.
	CXIP = "10.0.3.1/24"
	// CXMode is its initial TX mode: "tso" (the card segments: LSO) or
	// "sg" (no LSO; checksums still offloaded).
	CXMode = "tso"
)

// cxNIC is the ConnectX's NIC ID in the stack (ENET1 is 1, the 82574L 2).
const cxNIC = 3

// Health check: the card advances the init segment's health counter
// (offset 0x1010) while its firmware runs; Linux mlx5 (health.c) declares
// the device dead after missing it for three 2-second polls. The check
// here is faster, as a co-simulation's model may be killed mid-transfer.
const (
	cxHealthOffset = 0x1010
	cxHealthEvery  = 250 * time.Millisecond
	cxHealthMisses = 4
)

// cxControls implements app.Controls for the ConnectX: "tso" is the card's
// LSO for connections established from now on, "sg" turns it off
// (checksum offload stays on).
type cxControls struct {
	hwTSOMode
	nic       *connectx.NIC
	ep        *netstack.Endpoint
	transport string
	bus       uint64
	health    atomic.Uint32 // last health counter read
	stalled   atomic.Bool
	misses    atomic.Int32
}

// cxStats is the ConnectX's /stats member.
type cxStats struct {
	Transport string         `json:"transport"`
	BAR0      uint64         `json:"bar0"`
	Link      bool           `json:"link"`
	Health    string         `json:"health"` // "ok" or "stalled"
	Counter   uint32         `json:"health_counter"`
	Caps      connectx.Caps  `json:"caps"`
	Driver    connectx.Stats `json:"driver"`
	Endpoint  netstack.Stats `json:"endpoint"`
	Mode      string         `json:"mode"`
}

func (c *cxControls) Stats() any {
	s := cxStats{Transport: c.transport, BAR0: c.bus, Health: "ok", Counter: c.health.Load(),
		Caps: c.nic.Caps(), Driver: c.nic.Stats(), Endpoint: c.ep.Stats()}
	s.Mode, _ = c.Mode()
	if c.stalled.Load() {
		s.Health = "stalled"
	}
	s.Link = c.nic.Link() && !c.stalled.Load()
	return s
}

// watch polls the health counter through w until the board stops.
func (c *cxControls) watch(w *pcie.Window) {
	last := w.Read32(cxHealthOffset)
	c.health.Store(last)
	for {
		time.Sleep(cxHealthEvery)
		v := w.Read32(cxHealthOffset)
		c.health.Store(v)
		if v != last {
			last = v
			c.misses.Store(0)
			if c.stalled.Swap(false) {
				fmt.Printf("CONNECTX health=ok counter=%d\n", v)
			}
			continue
		}
		if c.misses.Add(1) == cxHealthMisses && !c.stalled.Swap(true) {
			fmt.Printf("CONNECTX health=stalled counter=%d (unchanged for %v): link reported down\n",
				v, cxHealthEvery*cxHealthMisses)
		}
	}
}

// addConnectX brings up the first ConnectX function on rc's bus (or an
// ivshmem function standing in for one) as NIC 3 of s and serves on it. It
// returns nil, nil when there is none.
//
// A failure after the card is up closes it again (and removes its NIC from
// the stack, if it was added), so nothing is left half-initialised: the
// card's queues torn down and its pages taken back, bus mastering off.
func addConnectX(s *stack.Stack, rc *pcie.RC, boot time.Time) (_ *cxControls, err error) {
	d, transport, bar := mcimx7d.FindConnectX(rc.Devices())
	if d == nil {
		return nil, nil
	}
	addr, err := netip.ParsePrefix(CXIP)
	if err != nil {
		return nil, fmt.Errorf("CXIP %q: %v", CXIP, err)
	}
	nic, w, err := mcimx7d.ConnectX(rc, d, transport, bar, connectx.Config{})
	if err != nil {
		return nil, err
	}
	added := false
	defer func() {
		if err == nil {
			return
		}
		if added {
			s.RemoveNIC(cxNIC)
		}
		if cerr := nic.Close(); cerr != nil {
			err = fmt.Errorf("%w (and closing the card: %v)", err, cerr)
		}
	}()
	ep, err := netstack.New(netstack.Options{Device: nic, TSO: true, AckFilter: true, GRO: true,
		PollInterval: 500 * time.Microsecond, Clock: mcimx7d.Nanotime})
	if err != nil {
		return nil, err
	}
	if err := s.CreateNIC(cxNIC, ep); err != nil {
		return nil, fmt.Errorf("connectx: CreateNIC: %v", err)
	}
	added = true
	a4 := tcpip.AddrFrom4(addr.Addr().As4())
	if err := s.AddProtocolAddress(cxNIC, tcpip.ProtocolAddress{Protocol: ipv4.ProtocolNumber,
		AddressWithPrefix: tcpip.AddressWithPrefix{Address: a4, PrefixLen: addr.Bits()}}, stack.AddressProperties{}); err != nil {
		return nil, fmt.Errorf("connectx: address: %v", err)
	}
	m := nic.MAC()
	if err := s.AddProtocolAddress(cxNIC, tcpip.ProtocolAddress{Protocol: ipv6.ProtocolNumber,
		AddressWithPrefix: header.LinkLocalAddr(tcpip.LinkAddress(m[:])).WithPrefix()}, stack.AddressProperties{}); err != nil {
		return nil, fmt.Errorf("connectx: IPv6 link-local: %v", err)
	}
	sub, err := tcpip.NewSubnet(tcpip.AddrFrom4(addr.Masked().Addr().As4()),
		tcpip.MaskFromBytes(net.CIDRMask(addr.Bits(), 32)))
	if err != nil {
		return nil, fmt.Errorf("connectx: subnet: %v", err)
	}
	s.SetRouteTable(append([]tcpip.Route{{Destination: sub, NIC: cxNIC}}, s.GetRouteTable()...))
	c := &cxControls{hwTSOMode: hwTSOMode{"connectx", ep}, nic: nic, ep: ep, transport: transport, bus: d.BARs[bar].Addr}
	if err := c.SetMode(CXMode, nil); err != nil {
		return nil, err
	}
	go c.watch(w)
	srv := &app.Server{Stack: s, NIC: cxNIC, Addr: a4, Ctl: c, Boot: boot}
	if err := srv.Start(); err != nil {
		return nil, err
	}
	fmt.Printf("CONNECTX ip=%s mac=%02x:%02x:%02x:%02x:%02x:%02x link=%v transport=%s bdf=%v bar0=%#x lso=%v mode=%s\n",
		addr, m[0], m[1], m[2], m[3], m[4], m[5], nic.Link(), transport, d.BDF, d.BARs[bar].Addr, nic.Caps().MaxLSO, CXMode)
	return c, nil
}
