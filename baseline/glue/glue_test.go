package glue_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/tamanic/tamanic/baseline/glue"
	"github.com/tamanic/tamanic/firmware/app"
)

// wire is one side of a back-to-back link that behaves as TamaGo's
// ENET.Rx and ENET.Tx do: Rx returns a fresh copy whose length is rounded
// up to 8 bytes (soc/nxp/enet bufferDescriptor.Data), Tx drops frames
// longer than 1518 bytes without a word (ENET.Tx).
type wire struct {
	mu   sync.Mutex
	q    [][]byte
	peer *wire
	kick chan struct{}
	// dropped counts frames Tx dropped for length.
	dropped int
}

func (w *wire) Rx() []byte {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.q) == 0 {
		return nil
	}
	f := w.q[0]
	w.q = w.q[1:]
	out := make([]byte, (len(f)+7)&^7)
	copy(out, f)
	return out
}

func (w *wire) Tx(b []byte) {
	if len(b) > glue.MaxFrame {
		w.mu.Lock()
		w.dropped++
		w.mu.Unlock()
		return
	}
	p := w.peer
	p.mu.Lock()
	p.q = append(p.q, append([]byte(nil), b...))
	p.mu.Unlock()
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

type side struct {
	dev  *glue.Device
	w    *wire
	addr tcpip.Address
}

func pair(t *testing.T) (a, b *side, stackA, stackB *gonetStack) {
	t.Helper()
	wa, wb := &wire{kick: make(chan struct{}, 1)}, &wire{kick: make(chan struct{}, 1)}
	wa.peer, wb.peer = wb, wa
	mk := func(w *wire, mac string, ip string) (*side, *gonetStack) {
		d := &glue.Device{ENET: w, Clock: func() int64 { return time.Now().UnixNano() }}
		hw, _ := net.ParseMAC(mac)
		iface, err := glue.NewStack(d, hw, netip.MustParsePrefix(ip+"/24"), netip.MustParseAddr("10.0.0.3"))
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() {
			for {
				select {
				case <-w.kick:
					d.Drain()
				case <-done:
					return
				}
			}
		}()
		t.Cleanup(func() { close(done) })
		return &side{dev: d, w: w, addr: tcpip.AddrFrom4(netip.MustParseAddr(ip).As4())}, &gonetStack{iface.Stack, iface.NICID}
	}
	a, stackA = mk(wa, "02:00:00:00:00:01", "10.0.0.1")
	b, stackB = mk(wb, "02:00:00:00:00:02", "10.0.0.2")
	return
}

type gonetStack struct {
	s   *stack.Stack
	nic tcpip.NICID
}

// TestServicesOnGoNet runs the tamanic firmware's services on go-net's
// stack over the glue and drives every one from a second go-net stack:
// sink (byte count and reply line), source (bytes equal the pattern), UDP
// echo, /stats (the fields the bench reads) and /mode (bearer token, the
// baseline's one mode, hash switch).
func TestServicesOnGoNet(t *testing.T) {
	a, _, sa, sb := pair(t)
	srv := &app.Server{Stack: stackOf(sa), NIC: sa.nic, Addr: a.addr, Boot: time.Now(), ControlToken: "tok",
		Ctl: &glue.Controls{Dev: a.dev, Idle: func() int64 { return 0 }}}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dial := func(port uint16) *gonet.TCPConn {
		t.Helper()
		c, err := gonet.DialContextTCP(ctx, stackOf(sb), tcpip.FullAddress{NIC: sb.nic, Addr: a.addr, Port: port}, ipv4.ProtocolNumber)
		if err != nil {
			t.Fatalf("dial %d: %v", port, err)
		}
		return c
	}

	// Sink: 1 MiB in, one reply line "<bytes> <elapsed> <fte> <idle>".
	const n = 1 << 20
	c := dial(app.SinkPort)
	if _, err := io.Copy(c, app.PatternStream(n)); err != nil {
		t.Fatal(err)
	}
	c.CloseWrite()
	line, err := bufio.NewReader(c).ReadString('\n')
	c.Close()
	if err != nil {
		t.Fatalf("sink reply: %v", err)
	}
	var got, el, fte, idle int64
	if _, err := fmt.Sscanf(line, "%d %d %d %d", &got, &el, &fte, &idle); err != nil || got != n {
		t.Fatalf("sink reply %q: %v (want %d bytes)", line, err, n)
	}

	// Source: N bytes out, equal to the pattern.
	c = dial(app.SourcePort)
	fmt.Fprintf(c, "%d\n", n)
	h := sha256.New()
	if k, err := io.CopyN(h, c, n); err != nil {
		t.Fatalf("source: %d of %d bytes: %v", k, n, err)
	}
	c.Close()
	want := sha256.New()
	io.Copy(want, app.PatternStream(n))
	if !bytes.Equal(h.Sum(nil), want.Sum(nil)) {
		t.Fatal("source: bytes differ from the pattern")
	}

	// UDP echo.
	u, err := gonet.DialUDP(stackOf(sb), nil, &tcpip.FullAddress{NIC: sb.nic, Addr: a.addr, Port: app.EchoPort}, ipv4.ProtocolNumber)
	if err != nil {
		t.Fatal(err)
	}
	msg := []byte("baseline echo")
	u.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := u.Write(msg); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 100)
	k, err := u.Read(buf)
	u.Close()
	if err != nil || !bytes.Equal(buf[:k], msg) {
		t.Fatalf("echo: %q, %v", buf[:k], err)
	}

	// HTTP.
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return gonet.DialContextTCP(ctx, stackOf(sb), tcpip.FullAddress{NIC: sb.nic, Addr: a.addr, Port: app.HTTPPort}, ipv4.ProtocolNumber)
	}}}
	r, err := hc.Get("http://board/stats")
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		UptimeNs int64  `json:"uptime_ns"`
		TxMode   string `json:"tx_mode"`
		NIC      struct {
			Driver   struct{ Tx, Rx glue.DirStats } `json:"driver"`
			Endpoint glue.EndpointStats             `json:"endpoint"`
		} `json:"nic"`
	}
	err = json.NewDecoder(r.Body).Decode(&st)
	r.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if st.TxMode != glue.Mode || st.UptimeNs <= 0 {
		t.Errorf("/stats: tx_mode %q uptime %d", st.TxMode, st.UptimeNs)
	}
	// Both directions moved at least a MiB of payload in whole frames.
	if st.NIC.Driver.Tx.Bytes < n || st.NIC.Driver.Rx.Bytes < n {
		t.Errorf("/stats: driver bytes tx %d rx %d, want >= %d each", st.NIC.Driver.Tx.Bytes, st.NIC.Driver.Rx.Bytes, n)
	}
	if st.NIC.Driver.Tx.Copied != 2*st.NIC.Driver.Tx.Bytes {
		t.Errorf("/stats: TX copied %d for %d bytes (go-net and ENET.Tx copy once each)", st.NIC.Driver.Tx.Copied, st.NIC.Driver.Tx.Bytes)
	}
	if st.NIC.Endpoint.RxBatches == 0 || st.NIC.Endpoint.TxNs <= 0 || st.NIC.Endpoint.RxNs <= 0 {
		t.Errorf("/stats: endpoint %+v: stages not timed", st.NIC.Endpoint)
	}

	post := func(q, auth string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, "http://board/mode?"+q, nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		r, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Body.Close()
		b, _ := io.ReadAll(r.Body)
		return r.StatusCode, string(b)
	}
	if code, _ := post("hash=0", ""); code != http.StatusUnauthorized {
		t.Errorf("POST /mode without token: %d, want 401", code)
	}
	if code, body := post("hash=0", "Bearer tok"); code != http.StatusOK || !strings.Contains(body, "tx=tamago") {
		t.Errorf("POST /mode?hash=0: %d %q", code, body)
	}
	if code, _ := post("tx=sg", "Bearer tok"); code != http.StatusBadRequest {
		t.Errorf("POST /mode?tx=sg: %d, want 400 (the baseline has one mode)", code)
	}
	if code, _ := post("copybreak=512", "Bearer tok"); code != http.StatusBadRequest {
		t.Errorf("POST /mode?copybreak=512: %d, want 400", code)
	}
	if st.NIC.Driver.Tx.Dropped != 0 {
		t.Errorf("the board refused %d frames longer than ENET sends", st.NIC.Driver.Tx.Dropped)
	}
	t.Logf("board TX %+v RX %+v", st.NIC.Driver.Tx, st.NIC.Driver.Rx)
}

func stackOf(g *gonetStack) *stack.Stack { return g.s }

func TestTransmitRefusesLongFrames(t *testing.T) {
	w := &wire{kick: make(chan struct{}, 1)}
	w.peer = &wire{kick: make(chan struct{}, 1)}
	d := &glue.Device{ENET: w}
	if err := d.Transmit(make([]byte, glue.MaxFrame+1)); !errors.Is(err, glue.ErrFrameTooLong) {
		t.Fatalf("Transmit(1519 bytes) = %v, want ErrFrameTooLong", err)
	}
	if err := d.Transmit(nil); err != nil {
		t.Fatalf("Transmit(nil) = %v (go-net calls it so when its queue is empty)", err)
	}
	if err := d.Transmit(make([]byte, 60)); err != nil {
		t.Fatal(err)
	}
	st := (&glue.Controls{Dev: d, Idle: func() int64 { return 0 }}).Stats().(glue.Stats)
	if st.Driver.Tx.Dropped != 1 || st.Driver.Tx.Frames != 1 || st.Driver.Tx.Bytes != 60 || len(w.peer.q) != 1 {
		t.Fatalf("after one long, one empty, one 60-byte frame: %+v, %d on the wire", st.Driver.Tx, len(w.peer.q))
	}
}

func TestReceive(t *testing.T) {
	w := &wire{}
	w.q = [][]byte{bytes.Repeat([]byte{7}, 60)}
	d := &glue.Device{ENET: w}
	buf := make([]byte, 1518)
	if n, err := d.Receive(buf); n != 64 || err != nil || buf[59] != 7 {
		t.Fatalf("Receive = %d, %v", n, err)
	}
	if n, err := d.Receive(buf); n != 0 || err != nil {
		t.Fatalf("Receive on an empty ring = %d, %v", n, err)
	}
	w.q = [][]byte{make([]byte, 100)}
	if _, err := d.Receive(make([]byte, 50)); err == nil {
		t.Fatal("Receive into a short buffer: no error")
	}
}
