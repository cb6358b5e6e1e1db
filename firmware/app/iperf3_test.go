package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/link/pipe"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// halfIdle is a Controls whose CPU was idle exactly half the time since
// boot, so the iperf3 client must report 50 % remote CPU.
type halfIdle struct{ boot time.Time }

func (halfIdle) SetMode(string, *int) error { return errors.New("not here") }
func (halfIdle) Mode() (string, int)        { return "", 0 }
func (halfIdle) Stats() any                 { return nil }
func (h halfIdle) IdleNanoseconds() int64   { return int64(time.Since(h.boot)) / 2 }

// gonetProxy relays the host's loopback to a gVisor stack: every TCP
// connection and every UDP source address on 127.0.0.1:port becomes a
// gonet connection from the client stack to the board's IperfPort.
type gonetProxy struct {
	tcp  net.Listener
	udp  net.PacketConn
	st   *stack.Stack
	dst  tcpip.FullAddress
	wg   sync.WaitGroup
	mu   sync.Mutex
	open []io.Closer
}

func (p *gonetProxy) track(c io.Closer) {
	p.mu.Lock()
	p.open = append(p.open, c)
	p.mu.Unlock()
}

func (p *gonetProxy) close() {
	p.tcp.Close()
	p.udp.Close()
	p.mu.Lock()
	for _, c := range p.open {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *gonetProxy) serveTCP() {
	defer p.wg.Done()
	for {
		c, err := p.tcp.Accept()
		if err != nil {
			return
		}
		g, err := gonet.DialTCP(p.st, p.dst, ipv4.ProtocolNumber)
		if err != nil {
			c.Close()
			continue
		}
		p.track(c)
		p.track(g)
		p.wg.Add(2)
		pump := func(dst, src net.Conn) {
			defer p.wg.Done()
			io.Copy(dst, src)
			dst.Close()
			src.Close()
		}
		go pump(c, g)
		go pump(g, c)
	}
}

func (p *gonetProxy) serveUDP() {
	defer p.wg.Done()
	peers := map[string]*gonet.UDPConn{}
	buf := make([]byte, 64<<10)
	for {
		n, from, err := p.udp.ReadFrom(buf)
		if err != nil {
			return
		}
		g := peers[from.String()]
		if g == nil {
			if g, err = gonet.DialUDP(p.st, nil, &p.dst, ipv4.ProtocolNumber); err != nil {
				continue
			}
			peers[from.String()] = g
			p.track(g)
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				b := make([]byte, 64<<10)
				for {
					n, err := g.Read(b)
					if err != nil {
						return
					}
					p.udp.WriteTo(b[:n], from)
				}
			}()
		}
		g.Write(buf[:n])
	}
}

// TestIperf3OverGonet runs the stock iperf3 client against the firmware's
// iperf3 service on a gVisor stack (gonet listener and UDP socket), the
// client's connections relayed from the host loopback by a second gVisor
// stack joined to the first by a pipe link.
func TestIperf3OverGonet(t *testing.T) {
	bin, err := exec.LookPath("iperf3")
	if err != nil {
		t.Skip("iperf3 client not installed (apt-get install iperf3); skipping")
	}
	board, client := netip.MustParsePrefix("10.0.0.1/24"), netip.MustParsePrefix("10.0.0.2/24")
	mac1, mac2 := [6]byte{2, 0, 0, 0, 0, 1}, [6]byte{2, 0, 0, 0, 0, 2}
	e1, e2 := pipe.New(tcpip.LinkAddress(mac1[:]), tcpip.LinkAddress(mac2[:]), 1500)
	s1, err := NewStack(e1, mac1, board, client.Addr())
	if err != nil {
		t.Fatal(err)
	}
	s2, err := NewStack(e2, mac2, client, board.Addr())
	if err != nil {
		t.Fatal(err)
	}
	boot := time.Now()
	srv := &Server{Stack: s1, NIC: 1, Addr: tcpip.AddrFrom4(board.Addr().As4()), Ctl: halfIdle{boot}, Boot: boot}
	ip, err := srv.StartIperf3()
	if err != nil {
		t.Fatal(err)
	}

	var p *gonetProxy
	for i := 0; p == nil; i++ {
		l, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		u, err := net.ListenPacket("udp4", l.Addr().String())
		if err != nil {
			l.Close()
			if i == 20 {
				t.Fatal(err)
			}
			continue
		}
		p = &gonetProxy{tcp: l, udp: u, st: s2, dst: tcpip.FullAddress{NIC: 1, Addr: srv.Addr, Port: IperfPort}}
	}
	p.wg.Add(2)
	go p.serveTCP()
	go p.serveUDP()
	defer func() {
		p.close()
		ip.Close()
		if n := ip.Goroutines(); n != 0 {
			t.Errorf("%d iperf3 goroutines after Close", n)
		}
		s1.Close()
		s2.Close()
		s1.Wait()
		s2.Wait()
	}()
	port := strconv.Itoa(p.tcp.Addr().(*net.TCPAddr).Port)

	for _, args := range [][]string{
		{"-t", "1"},
		{"-t", "1", "-R"},
		{"-t", "1", "-u", "-b", "10M", "-l", "1400"},
		{"-t", "1", "-u", "-b", "10M", "-l", "1400", "-R"},
	} {
		t.Run(fmt.Sprint(args), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			full := append([]string{"-c", "127.0.0.1", "-p", port, "--json"}, args...)
			out, _ := exec.CommandContext(ctx, bin, full...).Output()
			var r struct {
				Error string `json:"error"`
				End   struct {
					SumSent     struct{ Bytes uint64 } `json:"sum_sent"`
					SumReceived struct {
						Bytes uint64
						Bps   float64 `json:"bits_per_second"`
					} `json:"sum_received"`
					CPU *struct {
						RemoteTotal float64 `json:"remote_total"`
						RemoteUser  float64 `json:"remote_user"`
					} `json:"cpu_utilization_percent"`
				} `json:"end"`
			}
			if err := json.Unmarshal(out, &r); err != nil || r.Error != "" {
				t.Fatalf("iperf3 %v: %v %q\n%s\nserver: %+v", full, err, r.Error, out, ip.Stats())
			}
			e := r.End
			if e.SumSent.Bytes == 0 || e.SumReceived.Bytes == 0 || e.SumReceived.Bytes > e.SumSent.Bytes {
				t.Errorf("sent %d, received %d", e.SumSent.Bytes, e.SumReceived.Bytes)
			}
			// Idle half the time: 50 % busy, within what the microseconds
			// between the two clock readings of each sample can move.
			if e.CPU == nil || e.CPU.RemoteTotal < 49.9 || e.CPU.RemoteTotal > 50.1 || e.CPU.RemoteUser != e.CPU.RemoteTotal {
				t.Errorf("remote CPU %+v, want 50 %% from the idle accounting", e.CPU)
			}
			t.Logf("iperf3 %v: sent %d B, received %d B (%.0f Mbit/s), remote CPU %.2f%%",
				args, e.SumSent.Bytes, e.SumReceived.Bytes, e.SumReceived.Bps/1e6, e.CPU.RemoteTotal)
		})
	}
	// The client is done once it has its results; the server counts the
	// test when the client's IPERF_DONE or close arrives.
	for deadline := time.Now().Add(20 * time.Second); ip.Busy() && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if st := ip.Stats(); st.Completed != 4 || st.Aborted != 0 {
		t.Errorf("server stats %+v", st)
	}
}
