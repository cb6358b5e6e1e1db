package app

import (
	"fmt"
	"net/netip"

	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/tamanic/tamanic/bounce"
	"github.com/tamanic/tamanic/fec"
	"github.com/tamanic/tamanic/netstack"
)

// NICControls implements Controls for an ENET behind a netstack endpoint.
type NICControls struct {
	NIC  *fec.NIC
	EP   *netstack.Endpoint
	Idle func() int64
	// Interrupts, if set, reports interrupts serviced and time spent
	// handling them.
	Interrupts func() (n, ns int64)
}

// SetMode implements Controls. "tso" is scatter-gather placement plus host
// GSO for connections established from now on; "bounce" and "sg" turn GSO
// off for new connections.
func (c *NICControls) SetMode(tx string, cb *int) error {
	switch tx {
	case "bounce":
		c.NIC.SetStrategy(bounce.Bounce)
		c.EP.SetTSO(false)
	case "sg":
		c.NIC.SetStrategy(bounce.SG)
		c.EP.SetTSO(false)
	case "tso":
		c.NIC.SetStrategy(bounce.SG)
		c.EP.SetTSO(true)
	default:
		return fmt.Errorf("unknown tx mode %q (want bounce, sg or tso)", tx)
	}
	if cb != nil {
		c.NIC.SetCopybreak(*cb)
	}
	return nil
}

// Mode implements Controls.
func (c *NICControls) Mode() (string, int) {
	tx := c.NIC.Strategy().String()
	if c.EP.TSO() {
		tx = "tso"
	}
	return tx, c.NIC.Copybreak()
}

// IdleNanoseconds implements Controls.
func (c *NICControls) IdleNanoseconds() int64 { return c.Idle() }

// NICStats is the "nic" member of /stats.
type NICStats struct {
	Link     LinkStats         `json:"link"`
	Driver   fec.Stats         `json:"driver"`
	Endpoint netstack.Stats    `json:"endpoint"`
	MIB      map[string]uint32 `json:"mib"`
	IRQs     int64             `json:"irqs"`
	IRQNs    int64             `json:"irq_ns"`
	// TxFree is the number of free TX descriptors (ring occupancy).
	TxFree int `json:"tx_free"`
}

// LinkStats is the link as the driver runs it: up or down, speed and
// duplex of the last negotiation, and how often it went up and down.
type LinkStats struct {
	Up        bool   `json:"up"`
	SpeedMbps int    `json:"speed_mbps"`
	Duplex    string `json:"duplex"`
	Ups       uint64 `json:"ups"`
	Downs     uint64 `json:"downs"`
}

func linkStats(st fec.Stats) LinkStats {
	d := "half"
	if st.Link.FullDuplex {
		d = "full"
	}
	return LinkStats{Up: st.Link.Up, SpeedMbps: st.Link.Speed, Duplex: d, Ups: st.LinkUps, Downs: st.LinkDowns}
}

// Stats implements Controls.
func (c *NICControls) Stats() any {
	m := map[string]uint32{}
	for _, x := range c.NIC.MIB() {
		m[x.Name] = x.Value
	}
	drv := c.NIC.Stats()
	st := NICStats{Link: linkStats(drv), Driver: drv, Endpoint: c.EP.Stats(), MIB: m, TxFree: c.NIC.TxFree()}
	if c.Interrupts != nil {
		st.IRQs, st.IRQNs = c.Interrupts()
	}
	return st
}

// NewStack builds a gVisor stack on ep with a static IPv4 address and
// prefix, a default route via gw, and an IPv6 link-local address derived
// from mac (EUI-64).
func NewStack(ep stack.LinkEndpoint, mac [6]byte, addr netip.Prefix, gw netip.Addr) (*stack.Stack, error) {
	s, err := newBareStack(ep, mac, nil)
	if err != nil {
		return nil, err
	}
	return s, setStatic(s, 1, addr, gw)
}

func net4Mask(bits int) []byte {
	m := make([]byte, 4)
	for i := 0; i < bits; i++ {
		m[i/8] |= 0x80 >> (i % 8)
	}
	return m
}

// RegisterGroup is one block of GET /debug/regs: "enet", "phy@<addr>",
// or whatever a board's interface adds.
type RegisterGroup struct {
	Block string     `json:"block"`
	Regs  []Register `json:"regs"`
	Error string     `json:"error,omitempty"`
}

// Register is one register of a RegisterGroup, named as in its manual.
type Register struct {
	Name   string `json:"name"`
	Offset uint32 `json:"offset"`
	Value  uint32 `json:"value"`
}

// FromFEC converts the ENET driver's register list.
func FromFEC(rs []fec.Register) []Register {
	out := make([]Register, len(rs))
	for i, r := range rs {
		out[i] = Register(r)
	}
	return out
}

// RegisterDumper is a Controls whose device registers GET /debug/regs
// can read.
type RegisterDumper interface {
	Registers() []RegisterGroup
}

// SelfTester is a Controls whose NIC POST /selftest can put through its
// loopback self-test at run time (the interface is offline meanwhile:
// its traffic is dropped, the link may drop). The result is the report
// /stats shows, as JSON; failures are in it, not in the error, which
// says the test could not run.
type SelfTester interface {
	SelfTest() (any, error)
}

// Registers implements RegisterDumper: the ENET's registers and those of
// the PHY the driver took (fec.NIC.StartLink), not the first that answers:
// on a shared MDIO bus (the EVK's) that may be the other port's.
func (c *NICControls) Registers() []RegisterGroup {
	out := []RegisterGroup{{Block: "enet", Regs: FromFEC(c.NIC.Registers())}}
	addr := c.NIC.PHYAddr()
	if addr < 0 {
		return append(out, RegisterGroup{Block: "phy", Error: "no PHY taken by the driver (StartLink)"})
	}
	g := RegisterGroup{Block: fmt.Sprintf("phy@%d", addr)}
	rs, err := c.NIC.PHYRegisters(addr)
	g.Regs = FromFEC(rs)
	if err != nil {
		g.Error = err.Error()
	}
	return append(out, g)
}
