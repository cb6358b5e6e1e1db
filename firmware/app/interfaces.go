package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"sync"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"

	"github.com/tamanic/tamanic/dhcp"
)

// routeOwner gives the stack's IPv4 default route to one interface: the
// first whose static configuration or DHCP lease brings a gateway. gVisor
// takes the first of several default routes, and a DHCP renewal re-adds
// its route after the others', so without an owner the default route
// would move between interfaces at each renewal. The DNS servers are
// each lease's own (in /stats); the firmware resolves no names.
type routeOwner struct {
	mu  sync.Mutex
	nic tcpip.NICID // 0: none yet
}

// claim reports whether nic may have the default route, taking it if no
// interface has.
func (o *routeOwner) claim(nic tcpip.NICID, _ netip.Addr) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.nic == 0 {
		o.nic = nic
	}
	return o.nic == nic
}

// setStatic configures n's static address, and its gateway if it may
// have the default route.
func (n *Network) setStatic() error {
	gw := n.gateway
	if gw.IsValid() && !n.routes.claim(n.NIC, gw) {
		gw = netip.Addr{}
	}
	return setStatic(n.Stack, n.NIC, n.static, gw)
}

// startDHCP starts a DHCP client on n's NIC; stopped is closed when it
// has stopped (n.stopDHCP stops it).
func (n *Network) startDHCP(cfg NetConfig, console io.Writer) (*dhcp.Client, chan struct{}, error) {
	prefix := "" // NIC 1's lines as they always were; the others' say which NIC
	if n.NIC != 1 {
		prefix = fmt.Sprintf("NIC %d: ", n.NIC)
	}
	c, err := dhcp.New(dhcp.Config{Stack: n.Stack, NIC: n.NIC, Hostname: cfg.Hostname, DefaultRoute: n.routes.claim,
		Log: func(f string, a ...any) { fmt.Fprintf(console, prefix+f+"\n", a...) }})
	if err != nil {
		return nil, nil, fmt.Errorf("app: NIC %d: %w", n.NIC, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() {
		c.Run(ctx)
		close(stopped)
	}()
	n.mu.Lock()
	n.DHCP, n.stopDHCP, n.mode = c, cancel, "dhcp"
	n.mu.Unlock()
	return c, stopped, nil
}

// AddInterface configures IPv4 on another NIC of n's stack (one the
// caller created, NIC 2 and up), as cfg says, and reports it in n's
// Status under "interfaces". Unlike StartNetwork it does not wait for a
// lease: under DHCP it returns at once, and if no lease comes within
// cfg.DHCPWait and cfg.Static is valid it takes cfg.Static then, saying so
// on console. The default route stays with the interface that first
// brought one (NIC 1's, normally).
func (n *Network) AddInterface(nic tcpip.NICID, cfg NetConfig, console io.Writer) (*Network, error) {
	if _, ok := n.Stack.NICInfo()[nic]; !ok {
		return nil, fmt.Errorf("app: no NIC %d", nic)
	}
	o := &Network{Stack: n.Stack, NIC: nic, routes: n.routes, static: cfg.Static, gateway: cfg.Gateway, mode: "static"}
	if !cfg.DHCP {
		if !cfg.Static.IsValid() {
			return nil, fmt.Errorf("app: NIC %d: %w", nic, errors.New("no static address and DHCP off"))
		}
		if err := o.setStatic(); err != nil {
			return nil, err
		}
	} else {
		c, stopped, err := o.startDHCP(cfg, console)
		if err != nil {
			return nil, err
		}
		if cfg.Static.IsValid() {
			wait := cfg.DHCPWait
			if wait <= 0 {
				wait = DefaultDHCPWait
			}
			go o.fallback(c, stopped, wait, console)
		}
	}
	n.mu.Lock()
	n.others = append(n.others, o)
	n.mu.Unlock()
	return o, nil
}

// fallback takes the static address if c binds no lease within wait.
func (n *Network) fallback(c *dhcp.Client, stopped chan struct{}, wait time.Duration, console io.Writer) {
	select {
	case <-c.Bound():
		return
	case <-stopped:
		return
	case <-time.After(wait):
	}
	st := c.Stats()
	fmt.Fprintf(console, "NIC %d DHCP: no lease after %v (%d DISCOVERs, %d offers): falling back to the static %v\n",
		n.NIC, wait, st.Discovers, st.Offers, n.static)
	n.stopDHCP()
	<-stopped
	n.mu.Lock()
	n.mode = "static-fallback"
	n.mu.Unlock()
	if err := n.setStatic(); err != nil {
		fmt.Fprintf(console, "NIC %d: static %v: %v\n", n.NIC, n.static, err)
	}
}
