// Package qemu builds the tamanic firmware with the TamaGo toolchain and
// boots it under qemu-system-arm (mcimx6ul-evk for the mx6ullevk board,
// mcimx7d-sabre for the mcimx7d board), with user networking forwarded to
// free ports on 127.0.0.1 only, and talks to its services.
package qemu

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tamanic/tamanic/firmware/app"
)

// Missing returns why the firmware cannot be built and booted here (no
// TamaGo toolchain, no qemu-system-arm), or "" when it can.
func Missing() string {
	if err := exec.Command("go", "tool", "-n", "tamago").Run(); err != nil {
		return "the tamago tool (go tool tamago) cannot be built"
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return "no user cache directory for the TamaGo toolchain"
	}
	if _, err := os.Stat(filepath.Join(cache, "tamago-go", "tamago-go1.26.0", "bin", "go")); err != nil {
		return "the TamaGo compiler (tamago-go1.26.0) is not installed at " + filepath.Join(cache, "tamago-go", "tamago-go1.26.0")
	}
	if _, err := exec.LookPath("qemu-system-arm"); err != nil {
		return "qemu-system-arm is not installed"
	}
	return ""
}

// Boards maps each firmware board to the QEMU machine it boots on: the
// -machine and -m arguments.
var Boards = map[string][]string{
	"mx6ullevk": {"-machine", "mcimx6ul-evk", "-cpu", "cortex-a7", "-m", "512M"},
	"mcimx7d":   {"-machine", "mcimx7d-sabre", "-cpu", "cortex-a7", "-m", "1G"},
	// The SABRE Lite's console is UART2: QEMU gives the n-th -serial to
	// UARTn, so UART1 is discarded and the stdio -serial that Boot adds
	// lands on UART2.
	"sabrelite": {"-machine", "sabrelite", "-cpu", "cortex-a9", "-m", "1G", "-serial", "null"},
	// The USB armory Mk II LAN uses ENET2 and UART2: QEMU 7.2's i.MX6UL
	// gives the n-th -nic to ENETn (hw/arm/fsl-imx6ul.c, nd_table[i] for
	// eth[i]) and the n-th -serial to UARTn, so ENET1 gets an isolated
	// (restrict=on) user network, UART1 is discarded, and the -nic and
	// -serial that Boot adds land on ENET2 and UART2.
	"usbarmory": {"-machine", "mcimx6ul-evk", "-cpu", "cortex-a7", "-m", "512M", "-serial", "null",
		"-nic", "user,model=imx.enet,restrict=on,net=192.168.254.0/24"},
}

// LinkAddress is the firmware's text address per board (default
// 0x80010000): where the board's DDR starts, plus 64 KiB for TamaGo's
// vector table and page tables. The i.MX6Q's DDR starts at 0x1000_0000.
var LinkAddress = map[string]string{"sabrelite": "0x10010000"}

// linkFlags returns the -ldflags of board's firmware.
func linkFlags(board string) string {
	a, ok := LinkAddress[board]
	if !ok {
		a = "0x80010000"
	}
	return "-T " + a + " -R 0x1000"
}

// ControlToken is the control token every image Build makes is linked
// with (app.BuildControlToken): the harness's own, so that its POST /mode
// requests are authorised while images built without a token keep the
// control port closed.
const ControlToken = "tamanic-qemu-harness"

// Build compiles the firmware for board (see Boards) into dir and returns
// the ELF's path. root is the module root. The image accepts POST /mode
// with ControlToken and, like make firmware, takes its address by DHCP
// (Boot has QEMU's DHCP server hand out 10.0.0.1). Each of xflags is a
// further linker -X setting of the firmware's package main
// ("main.E1000EIRQ=msi").
func Build(ctx context.Context, root, dir, board string, xflags ...string) (string, error) {
	return BuildWith(ctx, root, dir, board, BuildOptions{XFlags: xflags})
}

// BuildOptions vary the image Build makes.
type BuildOptions struct {
	// IP and Gateway, if set, build a static image (make firmware
	// IP=... GATEWAY=...); the ELF is then named tamanic-<board>-static.elf.
	IP, Gateway string
	// XFlags are further linker -X settings of package main.
	XFlags []string
}

// BuildWith is Build with options.
func BuildWith(ctx context.Context, root, dir, board string, o BuildOptions) (string, error) {
	tool, err := exec.CommandContext(ctx, "go", "tool", "-n", "tamago").Output()
	if err != nil {
		return "", fmt.Errorf("qemu: locating the tamago tool: %w", err)
	}
	const appPkg = "github.com/tamanic/tamanic/firmware/app."
	ldflags := linkFlags(board) + " -X " + appPkg + "BuildControlToken=" + ControlToken
	name := "tamanic-" + board
	if o.IP != "" {
		ldflags += " -X " + appPkg + "BuildIP=" + o.IP
		name += "-static"
	}
	if o.Gateway != "" {
		ldflags += " -X " + appPkg + "BuildGateway=" + o.Gateway
	}
	for _, x := range o.XFlags {
		ldflags += " -X " + x
	}
	elf := filepath.Join(dir, name+".elf")
	cmd := exec.CommandContext(ctx, strings.TrimSpace(string(tool)), "build", "-tags", "linkramsize,linkcpuinit",
		"-ldflags", ldflags, "-o", elf, "./firmware/"+board)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOOS=tamago", "GOOSPKG=github.com/usbarmory/tamago", "GOARCH=arm", "GOARM=7")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("qemu: building firmware: %w\n%s", err, out)
	}
	return elf, nil
}

// Options configure a boot.
type Options struct {
	ELF string
	// Board selects the QEMU machine (a key of Boards; default
	// mx6ullevk).
	Board string
	// Devices are extra -device arguments, for example
	// "e1000e,bus=dw-pcie" behind the i.MX7D's PCIe root port.
	Devices []string
	// Icount runs QEMU with -icount shift=0,sleep=off: one guest
	// instruction per guest nanosecond, so guest busy time counts
	// instructions.
	Icount bool
	// Console receives the guest console (nil: discarded).
	Console io.Writer
	// ReadyTimeout bounds the wait for READY (default 60 s).
	ReadyTimeout time.Duration
	// GDB opens QEMU's gdbstub on a loopback port (Machine.GDBPort), for
	// StartProfile.
	GDB bool
	// E1000E (mcimx7d) adds QEMU's e1000e (Intel 82574L) behind the PCIe
	// root port on its own user network (E1000ENet, host .2), its
	// services forwarded from 127.0.0.1 (Machine.E1000E).
	E1000E bool
	// E1000ENetdev, when set with E1000E, is the e1000e's -netdev backend
	// in place of its user network (a socket netdev to a host-side peer,
	// as Netdev for Boot's NIC); nothing is then forwarded and
	// Machine.E1000E is nil.
	E1000ENetdev string
	// Args are further QEMU arguments (CosimArgs).
	Args []string
	// Monitor opens QEMU's human monitor on a Unix socket, for
	// Machine.SetLink (instead of -monitor none).
	Monitor bool
	// Image, when set, boots a flat image (tamanic-image's .bin) instead
	// of the ELF.
	Image *FlatImage
	// Netdev, when set, is the -netdev backend of Boot's NIC in place of
	// the user network (a socket netdev to a host-side peer:
	// "socket,udp=127.0.0.1:A,localaddr=127.0.0.1:B"); nothing is then
	// forwarded, so Ports reach nothing and Pcap is ignored.
	Netdev string
	// Pcap, when set, is a file QEMU records the frames of Boot's NIC in
	// (filter-dump on its user network, the first 128 bytes of each:
	// headers, for sequence numbers and lengths).
	Pcap string
}

// FlatImage is a flat firmware image for Options.Image: Bin loaded at Base,
// execution from Entry, and Fill, when set, a file loaded at FillAt first
// (what a boot loader or DDR's power-on state left where the image has no
// contents).
type FlatImage struct {
	Bin         string
	Base, Entry uint64
	Fill        string
	FillAt      uint64
}

// E1000ENet is the e1000e's user network and E1000EGuest the firmware's
// address on it: slirp's DHCP server leases it (dhcpstart), as the
// firmware takes the e1000e's address by DHCP unless built with E1000EIP.
const (
	E1000ENet   = "10.0.2.0/24"
	E1000EHost  = "10.0.2.2"
	E1000EGuest = "10.0.2.1"
)

// Ports are the host ports forwarded to one guest interface's services;
// its methods talk to them.
type Ports struct {
	SinkPort, SourcePort, HTTPPort, EchoPort int
	// IperfPort (0: none) is forwarded to the guest's iperf3 server (5201)
	// for TCP and UDP alike, as the iperf3 client uses one port number for
	// both.
	IperfPort int
	// Dial, when set, reaches a guest port instead of 127.0.0.1 (the
	// ports are then the guest's own: a peer stack on a co-simulation's
	// wire, WirePeer.Ports).
	Dial func(ctx context.Context, port int) (net.Conn, error)
}

// hostfwd forwards p's ports to guest; EchoPort for UDP and TCP alike
// (the UDP echo and the TCP echo, app.EchoPort; freePorts found the
// number free for TCP).
func (p Ports) hostfwd(guest string) string {
	f := fmt.Sprintf("hostfwd=tcp:127.0.0.1:%d-%s:%d,hostfwd=tcp:127.0.0.1:%d-%s:%d,hostfwd=tcp:127.0.0.1:%d-%s:%d,hostfwd=udp:127.0.0.1:%d-%s:%d,hostfwd=tcp:127.0.0.1:%d-%s:%d",
		p.SinkPort, guest, app.SinkPort, p.SourcePort, guest, app.SourcePort, p.HTTPPort, guest, app.HTTPPort, p.EchoPort, guest, app.EchoPort, p.EchoPort, guest, app.EchoPort)
	if p.IperfPort != 0 {
		f += fmt.Sprintf(",hostfwd=tcp:127.0.0.1:%d-%s:%d,hostfwd=udp:127.0.0.1:%d-%s:%d", p.IperfPort, guest, app.IperfPort, p.IperfPort, guest, app.IperfPort)
	}
	return f
}

// Machine is a booted firmware.
type Machine struct {
	cmd   *exec.Cmd
	Args  []string // the QEMU command line
	Ready string   // the READY line
	Boot  time.Duration
	// Host ports forwarded to the guest's services (on ENET1).
	Ports
	// E1000E holds the ports forwarded to the e1000e's services
	// (Options.E1000E), else nil.
	E1000E  *Ports
	GDBPort int    // 0 unless Options.GDB
	monitor string // the monitor's socket (Options.Monitor)
	nic     string // QEMU's name of the NIC Boot's -nic attaches
	done    chan struct{}
	exit    string // QEMU's exit error once done is closed, if it failed
	mu      sync.Mutex
	lines   []string
}

func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ps []int
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ps = append(ps, l.Addr().(*net.TCPAddr).Port)
	}
	return ps, nil
}

// freeTCPAndUDPPort returns a loopback port number free for TCP and for UDP.
func freeTCPAndUDPPort() (int, error) {
	for range 32 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		p := l.Addr().(*net.TCPAddr).Port
		u, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", p))
		l.Close()
		if err == nil {
			u.Close()
			return p, nil
		}
	}
	return 0, errors.New("no port free for both TCP and UDP in 32 tries")
}

// Boot starts QEMU and waits for the firmware's READY line.
func Boot(ctx context.Context, o Options) (*Machine, error) {
	if o.E1000ENetdev != "" && !o.E1000E {
		return nil, errors.New("qemu: Options.E1000ENetdev without E1000E: no e1000e to put on it")
	}
	ps, err := freePorts(9)
	if err != nil {
		return nil, fmt.Errorf("qemu: free ports: %w", err)
	}
	// freePorts has closed its listeners: the kernel may hand one of
	// those ports out again, and QEMU refuses two forwards on one port.
	ip, err := freeTCPAndUDPPort()
	for try := 0; err == nil && slices.Contains(ps, ip); try++ {
		if try == 32 {
			err = errors.New("the kernel kept handing out the same ports")
			break
		}
		ip, err = freeTCPAndUDPPort()
	}
	if err != nil {
		return nil, fmt.Errorf("qemu: free ports: %w", err)
	}
	m := &Machine{Ports: Ports{SinkPort: ps[0], SourcePort: ps[1], HTTPPort: ps[2], EchoPort: ps[3], IperfPort: ip}, done: make(chan struct{})}
	fwd := m.Ports.hostfwd("10.0.0.1")
	board := o.Board
	if board == "" {
		board = "mx6ullevk"
	}
	machine, ok := Boards[board]
	if !ok {
		return nil, fmt.Errorf("qemu: unknown board %q", board)
	}
	mon := "none"
	if o.Monitor {
		dir, err := os.MkdirTemp("", "tamanic-qmon")
		if err != nil {
			return nil, fmt.Errorf("qemu: monitor: %w", err)
		}
		m.monitor = filepath.Join(dir, "monitor.sock")
		mon = "unix:" + m.monitor + ",server=on,wait=off"
	}
	// The n-th -nic is ENETn (the USB armory's machine adds ENET1's).
	m.nic = "imx.enet.0"
	if board == "usbarmory" {
		m.nic = "imx.enet.1"
	}
	m.Args = append(append([]string{}, machine...),
		"-nographic", "-monitor", mon, "-serial", "stdio")
	user := "user,net=10.0.0.0/24,host=10.0.0.2,dhcpstart=10.0.0.1," + fwd
	if o.Netdev != "" {
		m.Args = append(m.Args, "-netdev", o.Netdev+",id=tamanicnet", "-net", "nic,model=imx.enet,netdev=tamanicnet")
	} else if o.Pcap == "" {
		m.Args = append(m.Args, "-nic", "user,model=imx.enet,"+strings.TrimPrefix(user, "user,"))
	} else {
		m.Args = append(m.Args, "-netdev", user+",id=tamanicnet", "-net", "nic,model=imx.enet,netdev=tamanicnet",
			"-object", "filter-dump,id=tamanicdump,netdev=tamanicnet,maxlen=128,file="+o.Pcap)
	}
	if o.Image != nil {
		// A flat image through QEMU's generic loader, as a boot ROM or a
		// boot loader would leave it: the contents at their address, the
		// zero-fill ranges the image omits holding whatever Image.Fill
		// puts there, and the CPU's PC at the entry point.
		m.Args = append(m.Args, "-device", fmt.Sprintf("loader,file=%s,addr=%#x,force-raw=on", o.Image.Bin, o.Image.Base))
		if o.Image.Fill != "" {
			m.Args = append(m.Args, "-device", fmt.Sprintf("loader,file=%s,addr=%#x,force-raw=on", o.Image.Fill, o.Image.FillAt))
		}
		m.Args = append(m.Args, "-device", fmt.Sprintf("loader,addr=%#x,cpu-num=0", o.Image.Entry), "-semihosting")
	} else {
		m.Args = append(m.Args, "-kernel", o.ELF, "-semihosting")
	}
	for _, d := range o.Devices {
		m.Args = append(m.Args, "-device", d)
	}
	if o.E1000E && o.E1000ENetdev != "" {
		m.Args = append(m.Args, "-netdev", o.E1000ENetdev+",id=e1k", "-device", "e1000e,bus=dw-pcie,netdev=e1k")
	} else if o.E1000E {
		m.E1000E = &Ports{SinkPort: ps[5], SourcePort: ps[6], HTTPPort: ps[7], EchoPort: ps[8]}
		m.Args = append(m.Args, "-netdev", "user,id=e1k,net="+E1000ENet+",host="+E1000EHost+",dhcpstart="+E1000EGuest+","+m.E1000E.hostfwd(E1000EGuest),
			"-device", "e1000e,bus=dw-pcie,netdev=e1k")
	}
	m.Args = append(m.Args, o.Args...)
	if o.Icount {
		m.Args = append(m.Args, "-icount", "shift=0,sleep=off")
	}
	if o.GDB {
		m.GDBPort = ps[4]
		m.Args = append(m.Args, "-gdb", fmt.Sprintf("tcp:127.0.0.1:%d", m.GDBPort))
	}
	m.cmd = exec.Command("qemu-system-arm", m.Args...)
	out, err := m.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	m.cmd.Stderr = m.cmd.Stdout
	start := time.Now()
	if err := m.cmd.Start(); err != nil {
		return nil, fmt.Errorf("qemu: start: %w", err)
	}
	ready := make(chan string, 1)
	go func() {
		defer close(m.done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			line := sc.Text()
			if o.Console != nil {
				fmt.Fprintln(o.Console, line)
			}
			m.mu.Lock()
			m.lines = append(m.lines, line)
			m.mu.Unlock()
			if strings.HasPrefix(line, "READY ") {
				select {
				case ready <- line:
				default:
				}
			}
		}
		// How QEMU ended, for "exited before READY": QEMU 7.2 itself has
		// crashed here under load (a general protection fault in
		// qemu-system-arm, dmesg, 2026-12-06), which only the exit status
		// tells apart from a firmware that stopped.
		if err := m.cmd.Wait(); err != nil {
			m.mu.Lock()
			m.exit = err.Error()
			m.mu.Unlock()
		}
	}()
	to := o.ReadyTimeout
	if to == 0 {
		to = 60 * time.Second
	}
	select {
	case m.Ready = <-ready:
		m.Boot = time.Since(start)
		return m, nil
	case <-m.done:
		m.mu.Lock()
		exit := m.exit
		m.mu.Unlock()
		if exit == "" {
			exit = "exit status 0"
		}
		return nil, fmt.Errorf("qemu: exited before READY (%s):\n%s", exit, m.Console())
	case <-time.After(to):
		m.Stop()
		return nil, fmt.Errorf("qemu: no READY within %v:\n%s", to, m.Console())
	case <-ctx.Done():
		m.Stop()
		return nil, ctx.Err()
	}
}

// Console returns what the guest printed so far.
func (m *Machine) Console() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return strings.Join(m.lines, "\n")
}

// Stop kills QEMU by its process id and waits for it.
func (m *Machine) Stop() error {
	if m.monitor != "" {
		defer os.RemoveAll(filepath.Dir(m.monitor))
	}
	if m.cmd.Process == nil {
		return nil
	}
	err := m.cmd.Process.Kill()
	select {
	case <-m.done:
	case <-time.After(10 * time.Second):
		return errors.New("qemu: process did not exit")
	}
	return err
}

// SetLink connects (up) or disconnects the cable of the NIC Boot's -nic
// attaches, through the monitor's set_link (Options.Monitor): QEMU's
// imx.enet reports it in its PHY's link status.
func (m *Machine) SetLink(up bool) error {
	if m.monitor == "" {
		return errors.New("qemu: SetLink needs Options.Monitor")
	}
	state := "off"
	if up {
		state = "on"
	}
	c, err := net.DialTimeout("unix", m.monitor, 5*time.Second)
	if err != nil {
		return fmt.Errorf("qemu: monitor: %w", err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	r := bufio.NewReader(c)
	prompt := func() (string, error) {
		var b strings.Builder
		for !strings.HasSuffix(b.String(), "(qemu) ") {
			ch, err := r.ReadByte()
			if err != nil {
				return b.String(), fmt.Errorf("qemu: monitor: %w (read %q)", err, b.String())
			}
			b.WriteByte(ch)
		}
		return b.String(), nil
	}
	if _, err := prompt(); err != nil {
		return err
	}
	if _, err := fmt.Fprintf(c, "set_link %s %s\n", m.nic, state); err != nil {
		return fmt.Errorf("qemu: monitor: %w", err)
	}
	out, err := prompt()
	if err != nil {
		return err
	}
	// The monitor echoes the command; anything else is an error message.
	if rest := strings.TrimSpace(strings.TrimSuffix(out, "(qemu) ")); strings.Contains(rest, "not found") || strings.Contains(rest, "rror") {
		return fmt.Errorf("qemu: set_link %s %s: %s", m.nic, state, rest)
	}
	return nil
}

// CommandLine returns the QEMU invocation as a shell line.
func (m *Machine) CommandLine() string {
	return "qemu-system-arm " + strings.Join(m.Args, " ")
}
