package main

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"strings"

	"github.com/tamanic/tamanic/qemu"
)

// abandon, while a co-simulation runs, ends it (fail calls it).
var abandon func()

// cxPorts reaches the ConnectX interface's services through the peer
// stack on tamanic-cxsim's wire, during an i.MX7D boot (nil otherwise).
var cxPorts *qemu.Ports

// cosim is the ConnectX co-simulation of one boot: tamanic-cxsim on
// shared files, and a gVisor peer stack on its wire.
type cosim struct {
	dir  string
	sim  *qemu.CXSim
	peer *qemu.WirePeer
}

// startCosim starts tamanic-cxsim (built into out) and returns the QEMU
// arguments that join the firmware to it.
func startCosim(ctx context.Context, root, out string) (*cosim, []string, error) {
	bin, err := qemu.BuildCXSim(ctx, root, out)
	if err != nil {
		return nil, nil, err
	}
	base := ""
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		base = "/dev/shm"
	}
	dir, err := os.MkdirTemp(base, "tamanic-bench-cosim-")
	if err != nil {
		return nil, nil, err
	}
	sim, err := qemu.StartCXSim(bin, dir)
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	c := &cosim{dir: dir, sim: sim}
	abandon = func() {
		if c.peer != nil {
			c.peer.Close()
		}
		sim.Kill()
		os.RemoveAll(dir)
	}
	return c, qemu.CosimArgs(dir), nil
}

// attach connects the peer stack once the firmware is up.
func (c *cosim) attach() error {
	p, err := qemu.NewWirePeer(c.sim.Addr, netip.MustParsePrefix(qemu.CXPeer+"/24"))
	if err != nil {
		return err
	}
	c.peer = p
	cxPorts = p.Ports(qemu.CXGuest)
	return cxPorts.SetSinkHash(false)
}

// stop ends the peer and the model; a model violation is an error.
func (c *cosim) stop() error {
	cxPorts, abandon = nil, nil
	if c.peer != nil {
		c.peer.Close()
	}
	stats, err := c.sim.Stop()
	os.RemoveAll(c.dir)
	if err != nil {
		return err
	}
	fmt.Printf("# tamanic-cxsim: %s\n", stats)
	if v := c.sim.Violations(); len(v) > 0 {
		return fmt.Errorf("tamanic-cxsim reported:\n%s", strings.Join(v, "\n"))
	}
	return nil
}

// modeName is the TX mode a configuration's mode sets on its interface.
func modeName(mode string) string {
	return strings.TrimPrefix(strings.TrimPrefix(mode, "e1000e-"), "cx-")
}

// phase is one boot of the benchmark: plain or icount, with the ConnectX
// co-simulation or without.
type phase struct {
	boot string
	cx   bool
}

// phases lists the boots: plain and icount, and on the i.MX7D both again
// with the ConnectX co-simulation.
func phases(board string) []phase {
	p := []phase{{"plain", false}, {"icount", false}}
	if board == "mcimx7d" {
		p = append(p, phase{"plain", true}, phase{"icount", true})
	}
	return p
}
