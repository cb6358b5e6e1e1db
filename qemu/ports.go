package qemu

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/tamanic/tamanic/firmware/app"
)

// dial reaches port through Dial when set, else on 127.0.0.1.
func (m *Ports) dial(port int, timeout time.Duration) (net.Conn, error) {
	if m.Dial == nil {
		return dial(port, timeout)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := m.Dial(ctx, port)
	if err != nil {
		return nil, err
	}
	c.SetDeadline(time.Now().Add(timeout))
	return c, nil
}

func dial(port int, timeout time.Duration) (net.Conn, error) {
	c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), 10*time.Second)
	if err != nil {
		return nil, err
	}
	c.SetDeadline(time.Now().Add(timeout))
	return c, nil
}

// SinkResult is the guest's reply to a host-to-guest transfer.
type SinkResult struct {
	Bytes, ElapsedNs, FirstByteToEOFNs, IdleNs int64
	Wall                                       time.Duration
}

// Send streams n bytes of app.Pattern to the guest's sink (5001).
func (m *Ports) Send(n int64, timeout time.Duration) (SinkResult, error) {
	var r SinkResult
	c, err := m.dial(m.SinkPort, timeout)
	if err != nil {
		return r, fmt.Errorf("qemu: sink: %w", err)
	}
	defer c.Close()
	start := time.Now()
	if _, err := io.Copy(c, app.PatternStream(n)); err != nil {
		return r, fmt.Errorf("qemu: sink: sending: %w", err)
	}
	c.(interface{ CloseWrite() error }).CloseWrite()
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return r, fmt.Errorf("qemu: sink: reply: %w", err)
	}
	r.Wall = time.Since(start)
	_, err = fmt.Sscanf(line, "%d %d %d %d", &r.Bytes, &r.ElapsedNs, &r.FirstByteToEOFNs, &r.IdleNs)
	return r, err
}

// Receive asks the guest's source (5002) for n bytes and checks they are
// app.Pattern, by SHA-256.
func (m *Ports) Receive(n int64, timeout time.Duration) (time.Duration, error) {
	c, err := m.dial(m.SourcePort, timeout)
	if err != nil {
		return 0, fmt.Errorf("qemu: source: %w", err)
	}
	defer c.Close()
	start := time.Now()
	fmt.Fprintf(c, "%d\n", n)
	h := sha256.New()
	got, err := io.CopyN(h, c, n)
	if err != nil {
		return 0, fmt.Errorf("qemu: source: %d of %d bytes: %w", got, n, err)
	}
	el := time.Since(start)
	want := sha256.New()
	io.Copy(want, app.PatternStream(n))
	if !bytes.Equal(h.Sum(nil), want.Sum(nil)) {
		return el, errors.New("qemu: source: SHA-256 mismatch")
	}
	return el, nil
}

// PatternSHA256 is the hex SHA-256 of the first n pattern bytes.
func PatternSHA256(n int64) string {
	h := sha256.New()
	io.Copy(h, app.PatternStream(n))
	return hex.EncodeToString(h.Sum(nil))
}

// Echo sends one UDP datagram to the guest's echo port and returns the
// reply.
func (m *Ports) Echo(d []byte, timeout time.Duration) ([]byte, error) {
	c, err := net.Dial("udp", fmt.Sprintf("127.0.0.1:%d", m.EchoPort))
	if err != nil {
		return nil, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(timeout))
	if _, err := c.Write(d); err != nil {
		return nil, err
	}
	buf := make([]byte, 1<<16)
	n, err := c.Read(buf)
	return buf[:n], err
}

// Stats fetches /stats.
func (m *Ports) Stats() (map[string]any, error) {
	r, err := m.client().Get(fmt.Sprintf("http://127.0.0.1:%d/stats", m.HTTPPort))
	if err != nil {
		return nil, err
	}
	defer r.Body.Close()
	var s map[string]any
	return s, json.NewDecoder(r.Body).Decode(&s)
}

// SetMode posts /mode.
func (m *Ports) SetMode(tx string, copybreak int) error {
	return m.post(fmt.Sprintf("tx=%s&copybreak=%s", tx, strconv.Itoa(copybreak)))
}

// SetSinkHash turns the sink's SHA-256 of received data on or off (it is
// on at boot). Off, Send's result still counts bytes but carries no digest.
func (m *Ports) SetSinkHash(on bool) error {
	if on {
		return m.post("hash=1")
	}
	return m.post("hash=0")
}

func (m *Ports) post(query string) error {
	// A mode is set, not toggled, so a request that got no answer (the
	// connection closed before one: seen as EOF on the first request after
	// READY under icount) is sent again, twice at most.
	var r *http.Response
	var err error
	for try := 0; try < 3; try++ {
		if try > 0 {
			time.Sleep(time.Second)
		}
		if r, err = m.PostMode(query, "Bearer "+ControlToken); err == nil {
			break
		}
	}
	if err != nil {
		return err
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	if r.StatusCode != http.StatusOK {
		return fmt.Errorf("qemu: /mode: %s: %s", r.Status, b)
	}
	return nil
}

// PostMode posts /mode?query with the given Authorization header (none
// when empty) and returns the response.
func (m *Ports) PostMode(query, authorization string) (*http.Response, error) {
	req, err := http.NewRequest(http.MethodPost, fmt.Sprintf("http://127.0.0.1:%d/mode?%s", m.HTTPPort, query), nil)
	if err != nil {
		return nil, err
	}
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	return m.client().Do(req)
}

// DebugRegs gets /debug/regs?format=text with authorization (empty: none)
// and returns the status and the body.
func (m *Ports) DebugRegs(authorization string) (int, string, error) {
	req, err := http.NewRequest(http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/debug/regs?format=text", m.HTTPPort), nil)
	if err != nil {
		return 0, "", err
	}
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	resp, err := m.client().Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, string(b), err
}

// PostGC asks the firmware for a full garbage collection (POST /gc, with
// the harness's control token) and returns the runtime statistics it
// answers after it.
func (m *Ports) PostGC() (map[string]any, error) {
	req, err := http.NewRequest(http.MethodPost, fmt.Sprintf("http://127.0.0.1:%d/gc", m.HTTPPort), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+ControlToken)
	resp, err := m.client().Do(req)
	if err != nil {
		return nil, fmt.Errorf("POST /gc: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, fmt.Errorf("POST /gc: %s: %s", resp.Status, b)
	}
	var r map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return nil, fmt.Errorf("POST /gc: %w", err)
	}
	return r, nil
}

// client is an HTTP client that reaches the guest through Dial when set.
// It keeps no connection alive. A kept-alive connection that waits through
// a long transfer meets the firmware's HTTP idle timeout, and a POST sent
// on it as the firmware closes it fails with EOF (Go retries only
// idempotent requests; make bench lost runs to this under icount). And
// through Dial each client has its own transport, so each call would leave
// an idle connection holding one of the firmware's few HTTP places until
// that timeout; once they were all held the firmware reset the next
// request.
func (m *Ports) client() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DisableKeepAlives, t.Proxy = true, nil
	if m.Dial != nil {
		t.DialContext = func(ctx context.Context, _, addr string) (net.Conn, error) {
			_, p, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, err
			}
			port, err := strconv.Atoi(p)
			if err != nil {
				return nil, err
			}
			return m.Dial(ctx, port)
		}
	}
	return &http.Client{Timeout: 60 * time.Second, Transport: t}
}

// Iperf3 runs the stock iperf3 client against the guest's iperf3 server
// with --json and the given arguments, and returns its JSON report.
func (m *Ports) Iperf3(ctx context.Context, args ...string) (map[string]any, error) {
	a := append([]string{"-c", "127.0.0.1", "-p", strconv.Itoa(m.IperfPort), "--json"}, args...)
	out, err := exec.CommandContext(ctx, "iperf3", a...).Output()
	var rep map[string]any
	if jerr := json.Unmarshal(out, &rep); jerr != nil {
		return nil, fmt.Errorf("qemu: iperf3 %s: %v (exit: %v)\n%s", strings.Join(args, " "), jerr, err, out)
	}
	if e, ok := rep["error"]; ok {
		return rep, fmt.Errorf("qemu: iperf3 %s: %v", strings.Join(args, " "), e)
	}
	if err != nil {
		return rep, fmt.Errorf("qemu: iperf3 %s: %w", strings.Join(args, " "), err)
	}
	return rep, nil
}
