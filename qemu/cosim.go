package qemu

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tamanic/tamanic/firmware/app"
	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/link/channel"
	"gvisor.dev/gvisor/pkg/tcpip/link/ethernet"
	"gvisor.dev/gvisor/pkg/tcpip/network/arp"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"
)

// Co-simulation of the ConnectX path: the i.MX7D firmware under QEMU
// drives the connectxtest model running in a tamanic-cxsim process,
// through QEMU's ivshmem-plain (its BAR2 is the model's BAR0, a shared
// file) and the guest RAM shared as a file.

// CXGuest is the firmware's ConnectX address (its static CXIP, set by
// CosimXFlags) and CXPeer the address the host-side peer stack takes.
const (
	CXGuest = "10.0.3.1"
	CXPeer  = "10.0.3.2"
)

// CosimXFlags are the linker -X settings of the co-simulation's firmware:
// the ConnectX takes DHCP by default, but the wire peer (WirePeer, a
// gVisor stack) runs no DHCP server, so the co-simulation builds the
// ConnectX static at CXGuest.
var CosimXFlags = []string{"main.CXDHCP=off", "main.CXIP=" + CXGuest + "/24"}

// CosimArgs are the QEMU arguments (besides Boards' mcimx7d ones) that
// back the guest RAM with dir/ram and put an ivshmem-plain function with a
// 32 MiB BAR backed by dir/bar behind the i.MX7D root port.
func CosimArgs(dir string) []string {
	return []string{"-machine", "memory-backend=ram",
		"-object", "memory-backend-file,id=ram,size=1G,mem-path=" + filepath.Join(dir, "ram") + ",share=on",
		"-object", "memory-backend-file,id=cxbar,size=32M,mem-path=" + filepath.Join(dir, "bar") + ",share=on",
		"-device", "ivshmem-plain,memdev=cxbar,bus=dw-pcie"}
}

// CXSim is a running tamanic-cxsim.
type CXSim struct {
	cmd  *exec.Cmd
	Addr string // its wire's listening address
	done chan struct{}
	mu   sync.Mutex
	out  []string
}

// BuildCXSim compiles tamanic-cxsim into dir and returns its path.
func BuildCXSim(ctx context.Context, root, dir string) (string, error) {
	bin := filepath.Join(dir, "tamanic-cxsim")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./qemu/cmd/tamanic-cxsim")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("qemu: building tamanic-cxsim: %w\n%s", err, out)
	}
	return bin, nil
}

// StartCXSim starts bin on dir/ram and dir/bar, listening on a free
// loopback port, and waits for its READY line.
func StartCXSim(bin, dir string) (*CXSim, error) {
	c := &CXSim{done: make(chan struct{})}
	c.cmd = exec.Command(bin, "-ram", filepath.Join(dir, "ram"), "-ram-base", "0x80000000",
		"-bar", filepath.Join(dir, "bar"), "-listen", "127.0.0.1:0")
	out, err := c.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	c.cmd.Stderr = c.cmd.Stdout
	if err := c.cmd.Start(); err != nil {
		return nil, fmt.Errorf("qemu: tamanic-cxsim: %w", err)
	}
	ready := make(chan string, 1)
	go func() {
		defer close(c.done)
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			c.mu.Lock()
			c.out = append(c.out, line)
			c.mu.Unlock()
			if a, ok := strings.CutPrefix(line, "CXSIM READY "); ok {
				ready <- a
			}
		}
		c.cmd.Wait()
	}()
	select {
	case c.Addr = <-ready:
		return c, nil
	case <-c.done:
		return nil, fmt.Errorf("qemu: tamanic-cxsim exited:\n%s", c.Output())
	case <-time.After(30 * time.Second):
		c.Kill()
		return nil, errors.New("qemu: tamanic-cxsim: no READY within 30 s")
	}
}

// Output returns what the process printed so far.
func (c *CXSim) Output() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.Join(c.out, "\n")
}

// Violations returns the CXSIM VIOLATION lines so far.
func (c *CXSim) Violations() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var v []string
	for _, l := range c.out {
		if strings.HasPrefix(l, "CXSIM VIOLATION ") {
			v = append(v, l)
		}
	}
	return v
}

// Stop sends SIGTERM, waits for the process and returns its STATS line.
func (c *CXSim) Stop() (string, error) {
	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return "", err
	}
	select {
	case <-c.done:
	case <-time.After(30 * time.Second):
		c.Kill()
		return "", errors.New("qemu: tamanic-cxsim did not stop on SIGTERM")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, l := range c.out {
		if s, ok := strings.CutPrefix(l, "CXSIM STATS "); ok {
			return s, nil
		}
	}
	return "", errors.New("qemu: tamanic-cxsim printed no STATS")
}

// Kill ends the process at once (SIGKILL, by its id), as a crash would.
func (c *CXSim) Kill() {
	c.cmd.Process.Kill()
	<-c.done
}

// WirePeer is a gVisor stack on the model's wire: its link endpoint
// speaks QEMU's -netdev socket stream framing to tamanic-cxsim, and checks
// every checksum itself (no offload declared).
type WirePeer struct {
	Stack *stack.Stack
	ch    *channel.Endpoint
	mu    sync.Mutex
	conn  net.Conn
	ctx   context.Context
	stop  context.CancelFunc
	wg    sync.WaitGroup
	// Malformed frames to inject are written by WriteRaw.
}

// NewWirePeer builds the peer stack at addr (with prefix) and connects it
// to the wire at wire.
func NewWirePeer(wire string, addr netip.Prefix) (*WirePeer, error) {
	p := &WirePeer{ch: channel.New(1024, 1514, tcpip.LinkAddress([]byte{2, 0x70, 0x65, 0x65, 0x72, 1}))}
	p.Stack = stack.New(stack.Options{
		NetworkProtocols:   []stack.NetworkProtocolFactory{ipv4.NewProtocol, arp.NewProtocol},
		TransportProtocols: []stack.TransportProtocolFactory{tcp.NewProtocol, udp.NewProtocol},
	})
	if err := p.Stack.CreateNIC(1, ethernet.New(p.ch)); err != nil {
		return nil, fmt.Errorf("qemu: peer NIC: %v", err)
	}
	if err := p.Stack.AddProtocolAddress(1, tcpip.ProtocolAddress{Protocol: ipv4.ProtocolNumber,
		AddressWithPrefix: tcpip.AddressWithPrefix{Address: tcpip.AddrFrom4(addr.Addr().As4()), PrefixLen: addr.Bits()}},
		stack.AddressProperties{}); err != nil {
		return nil, fmt.Errorf("qemu: peer address: %v", err)
	}
	sub, _ := tcpip.NewSubnet(tcpip.AddrFrom4(addr.Masked().Addr().As4()), tcpip.MaskFromBytes(net.CIDRMask(addr.Bits(), 32)))
	p.Stack.SetRouteTable([]tcpip.Route{{Destination: sub, NIC: 1}})
	// Buffers large enough for a window of data in flight over QEMU.
	p.Stack.SetTransportProtocolOption(tcp.ProtocolNumber, &tcpip.TCPReceiveBufferSizeRangeOption{Min: 4096, Default: 1 << 20, Max: 4 << 20})
	p.Stack.SetTransportProtocolOption(tcp.ProtocolNumber, &tcpip.TCPSendBufferSizeRangeOption{Min: 4096, Default: 1 << 20, Max: 4 << 20})
	p.ctx, p.stop = context.WithCancel(context.Background())
	if err := p.Reconnect(wire); err != nil {
		p.Close()
		return nil, err
	}
	p.wg.Add(1)
	go p.transmit()
	return p, nil
}

// Reconnect replaces the connection to the wire.
func (p *WirePeer) Reconnect(wire string) error {
	c, err := net.Dial("tcp", wire)
	if err != nil {
		return fmt.Errorf("qemu: peer: %w", err)
	}
	p.mu.Lock()
	if p.conn != nil {
		p.conn.Close()
	}
	p.conn = c
	p.mu.Unlock()
	p.wg.Add(1)
	go p.receive(c)
	return nil
}

// Disconnect closes the connection to the wire.
func (p *WirePeer) Disconnect() {
	p.mu.Lock()
	if p.conn != nil {
		p.conn.Close()
		p.conn = nil
	}
	p.mu.Unlock()
}

// WriteRaw writes b to the wire as is (for malformed framing).
func (p *WirePeer) WriteRaw(b []byte) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conn == nil {
		return errors.New("qemu: peer not connected")
	}
	_, err := p.conn.Write(b)
	return err
}

// WriteFrame writes one frame with the stream framing.
func (p *WirePeer) WriteFrame(f []byte) error {
	b := make([]byte, 4+len(f))
	binary.BigEndian.PutUint32(b, uint32(len(f)))
	copy(b[4:], f)
	return p.WriteRaw(b)
}

func (p *WirePeer) transmit() {
	defer p.wg.Done()
	for {
		pkt := p.ch.ReadContext(p.ctx)
		if pkt == nil {
			return
		}
		v := pkt.ToView()
		pkt.DecRef()
		_ = p.WriteFrame(v.AsSlice())
		v.Release()
	}
}

func (p *WirePeer) receive(c net.Conn) {
	defer p.wg.Done()
	var hdr [4]byte
	for {
		if _, err := io.ReadFull(c, hdr[:]); err != nil {
			return
		}
		n := binary.BigEndian.Uint32(hdr[:])
		if n > 1<<16 {
			c.Close()
			return
		}
		f := make([]byte, n)
		if _, err := io.ReadFull(c, f); err != nil {
			return
		}
		pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buffer.MakeWithData(f)})
		p.ch.InjectInbound(0, pkt)
		pkt.DecRef()
	}
}

// Ports returns the guest's services at guest as reached through the
// peer stack.
func (p *WirePeer) Ports(guest string) *Ports {
	a := tcpip.AddrFromSlice(net.ParseIP(guest).To4())
	return &Ports{SinkPort: app.SinkPort, SourcePort: app.SourcePort, HTTPPort: app.HTTPPort, EchoPort: app.EchoPort,
		Dial: func(ctx context.Context, port int) (net.Conn, error) {
			return gonet.DialContextTCP(ctx, p.Stack, tcpip.FullAddress{NIC: 1, Addr: a, Port: uint16(port)}, ipv4.ProtocolNumber)
		}}
}

// Close stops the peer.
func (p *WirePeer) Close() {
	p.stop()
	p.Disconnect()
	p.ch.Close()
	p.wg.Wait()
	p.Stack.Close()
}

// tempDir returns a directory for the shared files, in memory when
// /dev/shm exists.
func tempDir() (string, error) {
	base := ""
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		base = "/dev/shm"
	}
	return os.MkdirTemp(base, "tamanic-cosim-")
}
