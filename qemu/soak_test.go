package qemu

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tamanic/tamanic/firmware/app"
)

// The soak (make soak, issue 17): the firmware under QEMU with many
// concurrent connections in both directions and UDP echo for a bounded
// time, every byte checked, its memory and counters watched.
//
//	go test ./qemu -run Soak -soak 3m [-soak.conns 64] [-soak.chunk 8388608]
var (
	soakFor   = flag.Duration("soak", 0, "run the soak for this long (0: skip it)")
	soakConns = flag.Int("soak.conns", 64, "concurrent TCP connections, half to the sink and half from the source")
	soakChunk = flag.Int64("soak.chunk", 1<<20, "bytes per soak connection")
	soakPcap  = flag.String("soak.pcap", "", "record the headers of every frame of the firmware's network in this pcap file")
)

// soakSample is one /stats reading.
type soakSample struct {
	at                                        time.Duration
	heapInuse, heapAlloc, sys, goroutines     float64
	txHeld, txFree, active                    float64
	errors                                    float64
	stackInuse, numGC, refused, idleClosed    float64
	rxNICErrors, rxBadCsum, txErrors, busErrs float64
}

func readSample(s map[string]any, at time.Duration) soakSample {
	var x soakSample
	x.at = at
	x.heapInuse = num(s, "runtime", "heap_inuse")
	x.heapAlloc = num(s, "runtime", "heap_alloc")
	x.sys = num(s, "runtime", "sys")
	x.stackInuse = num(s, "runtime", "stack_inuse")
	x.goroutines = num(s, "runtime", "goroutines")
	x.numGC = num(s, "runtime", "num_gc")
	x.txHeld = num(s, "nic", "endpoint", "TxHeld")
	x.txFree = num(s, "nic", "tx_free")
	for _, svc := range []string{"sink", "source", "http"} {
		x.active += num(s, "limits", svc, "active")
		x.refused += num(s, "limits", svc, "refused")
		x.idleClosed += num(s, "limits", svc, "idle_closed")
	}
	x.rxNICErrors = num(s, "nic", "endpoint", "RxNICErrors")
	x.rxBadCsum = num(s, "nic", "endpoint", "RxBadCsum")
	x.txErrors = num(s, "nic", "endpoint", "TxErrors") + num(s, "nic", "driver", "Tx", "Errors")
	x.busErrs = num(s, "nic", "driver", "BusErrors")
	x.errors = x.rxNICErrors + x.rxBadCsum + x.txErrors + x.busErrs
	return x
}

// bounded fails t if the samples' field, after the first fifth (warm-up),
// rises in the second half above the first half's peak by more than a
// quarter plus slack: growth without bound shows as a rising peak.
func bounded(t *testing.T, name string, xs []soakSample, f func(soakSample) float64, slack float64) (peak float64) {
	t.Helper()
	for _, x := range xs {
		peak = max(peak, f(x))
	}
	w := xs[len(xs)/5:]
	if len(w) < 4 {
		t.Errorf("%s: only %d samples after warm-up: the soak was too short to judge growth", name, len(w))
		return peak
	}
	var p1, p2 float64
	for i, x := range w {
		if i < len(w)/2 {
			p1 = max(p1, f(x))
		} else {
			p2 = max(p2, f(x))
		}
	}
	if p2 > 1.25*p1+slack {
		t.Errorf("%s grows: first half peak %.0f, second half peak %.0f", name, p1, p2)
	}
	return peak
}

// TestSoak is make soak's QEMU half.
func TestSoak(t *testing.T) {
	if *soakFor <= 0 {
		t.Skip("the soak runs with -soak DURATION (make soak)")
	}
	elf := firmware(t, "mx6ullevk")
	ctx, cancel := context.WithTimeout(context.Background(), *soakFor+5*time.Minute)
	defer cancel()
	m, err := Boot(ctx, Options{ELF: elf, Board: "mx6ullevk", Pcap: *soakPcap})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Stop()
	s0, err := m.Stats()
	if err != nil {
		t.Fatal(err)
	}
	base := readSample(s0, 0)
	g0, err := m.PostGC()
	if err != nil {
		t.Fatalf("POST /gc at boot: %v", err)
	}
	boot := readSample(map[string]any{"runtime": g0}, 0)
	chunk := *soakChunk
	wantSum := PatternSHA256(chunk)
	start := time.Now()
	var sunk, sourced, echoed, echoes, conns atomic.Int64
	var failMu sync.Mutex
	var failures []string
	var failPorts []int
	fail := func(f string, a ...any) {
		failMu.Lock()
		defer failMu.Unlock()
		if len(failures) < 20 {
			failures = append(failures, fmt.Sprintf("%v: ", time.Since(start).Round(time.Millisecond))+fmt.Sprintf(f, a...))
		}
	}
	nc := *soakConns
	// Two identical rounds of load, each followed by a full collection
	// (POST /gc): the live heap after the second must not exceed the live
	// heap after the first, or something the load leaves behind is kept.
	var samples []soakSample
	var gcAfter []soakSample
	var after soakSample
	for round := range 2 {
		deadline := time.Now().Add(*soakFor / 2)
		var wg sync.WaitGroup
		for i := range nc {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// Connections open over the first 2 s, as clients would.
				time.Sleep(time.Duration(i) * 2 * time.Second / time.Duration(nc))
				for time.Now().Before(deadline) {
					conns.Add(1)
					if i%2 == 0 {
						r, sum, port, err := sendChecked(m.Ports, chunk, 2*time.Minute)
						if err != nil || r != chunk || sum != wantSum {
							failMu.Lock()
							failPorts = append(failPorts, port)
							failMu.Unlock()
						}
						if err != nil {
							fail("sink connection from port %d: %v", port, err)
							return
						}
						if r != chunk || sum != wantSum {
							fail("sink connection from port %d got %d of %d bytes, SHA-256 %s, want %s", port, r, chunk, sum, wantSum)
							return
						}
						sunk.Add(chunk)
					} else {
						if _, err := m.Receive(chunk, 2*time.Minute); err != nil {
							fail("source connection: %v", err)
							return
						}
						sourced.Add(chunk)
					}
				}
			}()
		}
		// UDP echo, one datagram at a time, random sizes, each checked.
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(7, 7))
			c, err := net.Dial("udp", fmt.Sprintf("127.0.0.1:%d", m.EchoPort))
			if err != nil {
				fail("udp: %v", err)
				return
			}
			defer c.Close()
			buf := make([]byte, 2048)
			for seq := 0; time.Now().Before(deadline); seq++ {
				d := make([]byte, 8+r.IntN(1400))
				for k := range d {
					d[k] = byte(r.Uint32())
				}
				d[0], d[1], d[2], d[3] = byte(seq>>24), byte(seq>>16), byte(seq>>8), byte(seq)
				c.SetDeadline(time.Now().Add(5 * time.Second))
				if _, err := c.Write(d); err != nil {
					fail("udp write: %v", err)
					return
				}
				n, err := c.Read(buf)
				if err != nil {
					fail("udp echo %d (%d bytes) lost: %v", seq, len(d), err)
					return
				}
				if !bytes.Equal(buf[:n], d) {
					fail("udp echo %d corrupted (%d bytes back for %d)", seq, n, len(d))
					return
				}
				echoes.Add(1)
				echoed.Add(int64(len(d)))
				time.Sleep(2 * time.Millisecond)
			}
		}()
		// /stats every 2 s.
		stop := make(chan struct{})
		sampled := make(chan struct{})
		go func() {
			defer close(sampled)
			for {
				select {
				case <-stop:
					return
				case <-time.After(2 * time.Second):
				}
				s, err := m.Stats()
				if err != nil {
					fail("/stats under load: %v", err)
					continue
				}
				samples = append(samples, readSample(s, time.Since(start)))
			}
		}()
		wg.Wait()
		close(stop)
		<-sampled
		el := time.Since(start)
		failMu.Lock()
		failed := len(failures) > 0
		failMu.Unlock()
		if failed {
			break
		}
		// After the load: every connection and goroutine gone, nothing held.
		settled := false
		for end := time.Now().Add(60 * time.Second); time.Now().Before(end); time.Sleep(time.Second) {
			s, err := m.Stats()
			if err != nil {
				continue
			}
			after = readSample(s, time.Since(start))
			// The /stats request itself holds one HTTP connection.
			if after.active <= 1 && after.goroutines <= base.goroutines+4 && after.txHeld <= base.txHeld {
				settled = true
				break
			}
		}
		if !settled {
			t.Errorf("after round %d: %v connections active, %v goroutines (%v at boot), %v TX packets held (%v at boot)",
				round+1, after.active, after.goroutines, base.goroutines, after.txHeld, base.txHeld)
		}
		g, err := m.PostGC()
		if err != nil {
			t.Fatalf("POST /gc after round %d: %v", round+1, err)
		}
		gcAfter = append(gcAfter, readSample(map[string]any{"runtime": g}, time.Since(start)))
		t.Logf("round %d done at %v: after a full collection heap_alloc (live) %.1f MiB, heap_inuse %.1f MiB, %v goroutines",
			round+1, el.Round(time.Second), gcAfter[round].heapAlloc/(1<<20), gcAfter[round].heapInuse/(1<<20), gcAfter[round].goroutines)
	}
	el := time.Since(start)
	for _, f := range failures {
		t.Error(f)
	}
	if len(failures) > 0 {
		if *soakPcap != "" {
			soakPcapReport(t, *soakPcap, failPorts)
		}
		s, err := m.Stats()
		t.Fatalf("after %v: %d MiB to the sink, %d MiB from the source, %d echoes; sink transfers unlike the pattern (where): %v; /stats %v (%v)\nconsole:\n%s",
			el.Round(time.Second), sunk.Load()>>20, sourced.Load()>>20, echoes.Load(), get(s, "sink_pattern"), s, err, tail(m.Console(), 40))
	}
	if len(samples) == 0 {
		t.Fatal("no /stats sample")
	}
	heap := bounded(t, "heap in use", samples, func(x soakSample) float64 { return x.heapInuse }, 8<<20)
	sys := bounded(t, "memory obtained from the system", samples, func(x soakSample) float64 { return x.sys }, 8<<20)
	gr := bounded(t, "goroutines", samples, func(x soakSample) float64 { return x.goroutines }, 16)
	held := bounded(t, "TX packets held", samples, func(x soakSample) float64 { return x.txHeld }, 64)
	var minFree float64 = 1 << 30
	for _, x := range samples {
		minFree = min(minFree, x.txFree)
		if x.errors != base.errors || x.refused != base.refused || x.idleClosed != base.idleClosed {
			t.Errorf("at %v: error counters moved (endpoint RX NIC errors %v, bad checksums %v, TX errors %v, bus errors %v; refused %v, idle-closed %v)",
				x.at.Round(time.Second), x.rxNICErrors, x.rxBadCsum, x.txErrors, x.busErrs, x.refused, x.idleClosed)
			break
		}
	}
	// A leak shows as live heap that a second identical round adds to
	// what the first left; the runtime keeping spans it no longer needs
	// shows only in heap_inuse before a collection.
	t.Logf("live heap after a full collection: %.1f MiB at boot, %.1f MiB after round 1, %.1f MiB after round 2",
		boot.heapAlloc/(1<<20), gcAfter[0].heapAlloc/(1<<20), gcAfter[1].heapAlloc/(1<<20))
	if l1, l2 := gcAfter[0].heapAlloc, gcAfter[1].heapAlloc; l2 > l1*1.25+2<<20 {
		t.Errorf("live heap after a full collection grows with the load: %.1f MiB after round 1, %.1f MiB after round 2", l1/(1<<20), l2/(1<<20))
	}
	total := sunk.Load() + sourced.Load() + echoed.Load()
	t.Logf("soak: %v, %d concurrent TCP connections (%d opened in all, %d chunks of %d MiB), %d MiB to the sink, %d MiB from the source, %d UDP echoes (%d KiB), %d MiB in all (%.1f Mbit/s); %d /stats samples",
		el.Round(time.Second), nc, conns.Load(), (sunk.Load()+sourced.Load())/chunk, chunk>>20, sunk.Load()>>20, sourced.Load()>>20,
		echoes.Load(), echoed.Load()>>10, total>>20, float64(total*8)/el.Seconds()/1e6, len(samples))
	t.Logf("firmware high-water marks: heap in use %.1f MiB, sys %.1f MiB, %v goroutines, %v TX packets held, %v TX descriptors free at least; after the load heap in use %.1f MiB, %v goroutines, GCs %v; after a full collection live heap %.1f then %.1f MiB, heap in use %.1f then %.1f MiB",
		heap/(1<<20), sys/(1<<20), gr, held, minFree, after.heapInuse/(1<<20), after.goroutines, after.numGC,
		gcAfter[0].heapAlloc/(1<<20), gcAfter[1].heapAlloc/(1<<20), gcAfter[0].heapInuse/(1<<20), gcAfter[1].heapInuse/(1<<20))
	if total < 1<<30 {
		t.Logf("NOTE: %d MiB is under 1 GiB: run longer (SOAK=10m) for 1 GiB on this machine", total>>20)
	}
}

// soakPcapReport checks every sink and source connection of the soak's
// recording (ScanPcap) and writes each failed sink connection's segments
// next to it (FILE.portN.txt), so that a corrupted transfer can be told
// apart: QEMU's user network sending bytes other than its sequence
// numbers say, or the firmware acknowledging data never sent to it.
func soakPcapReport(t *testing.T, pcap string, ports []int) {
	t.Helper()
	conns, err := ScanPcap(pcap, 0, nil)
	if err != nil {
		t.Logf("pcap %s: %v", pcap, err)
	}
	bad := 0
	for _, c := range conns {
		if c.Misplaced+c.OverAck > 0 || c.N > 1 {
			bad++
			t.Logf("pcap: %s connection #%d (SYN seq %d, SYN-ACK seq %d): %d segments, %d bytes of data, %d data segments unlike the pattern at their sequence number, %d acknowledgements beyond the data, %d retransmitted SYN-ACKs; first: %s",
				c.Tuple, c.N, c.PeerISN, c.GuestISN, c.Frames, c.Sent, c.Misplaced, c.OverAck, c.GuestSYNAgain, c.First)
			if v := c.Verdict(); v != "" {
				t.Logf("pcap: %s: %s", c.Tuple, v)
			}
		}
	}
	t.Logf("pcap %s: %d sink and source connections, %d with anomalies or a reused 4-tuple", pcap, len(conns), bad)
	for _, p := range ports {
		var b strings.Builder
		if _, err := ScanPcap(pcap, uint16(p), &b); err != nil {
			t.Logf("pcap port %d: %v", p, err)
			continue
		}
		out := fmt.Sprintf("%s.port%d.txt", pcap, p)
		if err := os.WriteFile(out, []byte(b.String()), 0o644); err != nil {
			t.Logf("pcap port %d: %v", p, err)
			continue
		}
		t.Logf("pcap: every segment of the failed sink connection from port %d in %s", p, out)
	}
}

// sendChecked streams n bytes of the pattern to the sink and returns the
// byte count and SHA-256 the firmware replied, and the connection's local
// port (the guest sees it as the source port).
func sendChecked(p Ports, n int64, timeout time.Duration) (int64, string, int, error) {
	c, err := dial(p.SinkPort, timeout)
	if err != nil {
		return 0, "", 0, err
	}
	defer c.Close()
	port := c.LocalAddr().(*net.TCPAddr).Port
	if _, err := io.Copy(c, app.PatternStream(n)); err != nil {
		return 0, "", port, fmt.Errorf("sending: %w", err)
	}
	c.(*net.TCPConn).CloseWrite()
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return 0, "", port, fmt.Errorf("reply: %w", err)
	}
	f := strings.Fields(line)
	if len(f) != 5 {
		return 0, "", port, fmt.Errorf("reply %q: want 5 fields", line)
	}
	var got int64
	if _, err := fmt.Sscan(f[0], &got); err != nil {
		return 0, "", port, fmt.Errorf("reply %q: %w", line, err)
	}
	return got, f[4], port, nil
}

func tail(s string, n int) string {
	l := strings.Split(s, "\n")
	return strings.Join(l[max(0, len(l)-n):], "\n")
}

// TestConnectFlood floods the firmware's forwarded ports from the host at
// a bounded rate for a bounded time, then checks every service still
// answers. Under QEMU's user network (slirp) a raw SYN flood is not
// possible from the host: each host connect to a forwarded port becomes a
// guest SYN from slirp, which completes the handshake. So this exercises
// a flood of connections that are opened and abandoned (half reset at
// once, half left open and silent), which the connection bounds and idle
// timeouts must absorb; the SYN cookies gVisor uses against half-open
// floods are not reached this way. Runs with -soak (make soak) and with
// -flood.
var floodFor = flag.Duration("flood", 0, "run TestConnectFlood for this long without -soak")

func TestConnectFlood(t *testing.T) {
	d := *floodFor
	if d == 0 && *soakFor > 0 {
		d = 20 * time.Second
	}
	if d <= 0 {
		t.Skip("runs with -soak or -flood DURATION")
	}
	elf := firmware(t, "mx6ullevk")
	ctx, cancel := context.WithTimeout(context.Background(), d+5*time.Minute)
	defer cancel()
	m, err := Boot(ctx, Options{ELF: elf, Board: "mx6ullevk"})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Stop()
	const rate = 200 // connects per second, over all ports
	var opened, failed atomic.Int64
	var held []net.Conn
	var mu sync.Mutex
	stop := time.Now().Add(d)
	tk := time.NewTicker(time.Second / rate)
	ports := []int{m.SinkPort, m.SourcePort, m.HTTPPort}
	answered := map[string]int{}
	refused := map[string]int{}
	for i := 0; time.Now().Before(stop); i++ {
		<-tk.C
		go func() {
			c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", ports[i%len(ports)]), 5*time.Second)
			if err != nil {
				failed.Add(1)
				return
			}
			opened.Add(1)
			if i%2 == 0 {
				c.(*net.TCPConn).SetLinger(0) // reset at once
				c.Close()
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}()
		// The services answer during the flood (each probe bounded).
		if i%rate == rate/2 {
			for name, err := range probeEach(m.Ports) {
				if err != nil {
					refused[name]++
				} else {
					answered[name]++
				}
			}
		}
	}
	tk.Stop()
	mu.Lock()
	nheld := len(held)
	for _, c := range held {
		c.Close()
	}
	mu.Unlock()
	t.Logf("flood: %d connects in %v at %d/s (%d failed on the host), %d left open and silent until the end; probes during it: answered %v, failed %v",
		opened.Load(), d, rate, failed.Load(), nheld, answered, refused)
	// After it: every service answers.
	var perr error
	for end := time.Now().Add(2 * time.Minute); time.Now().Before(end); time.Sleep(time.Second) {
		if perr = probe(m.Ports); perr == nil {
			break
		}
	}
	if perr != nil {
		t.Fatalf("services do not answer after the flood: %v\nconsole:\n%s", perr, tail(m.Console(), 40))
	}
	if answered["echo"] == 0 {
		t.Errorf("UDP echo never answered during the flood (%v)", refused)
	}
	s, _ := m.Stats()
	t.Logf("after: limits %v, goroutines %v, heap in use %.1f MiB", s["limits"], num(s, "runtime", "goroutines"), num(s, "runtime", "heap_inuse")/(1<<20))
}

// probeEach probes each service once.
func probeEach(p Ports) map[string]error {
	r := map[string]error{}
	_, r["stats"] = p.Stats()
	if n, sum, _, err := sendChecked(p, 64<<10, 10*time.Second); err != nil || n != 64<<10 || sum != PatternSHA256(64<<10) {
		r["sink"] = fmt.Errorf("sink: %d bytes, %v", n, errors.Join(err))
	} else {
		r["sink"] = nil
	}
	_, r["source"] = p.Receive(64<<10, 10*time.Second)
	_, r["echo"] = p.Echo([]byte("flood probe"), 5*time.Second)
	return r
}

// probe checks that /stats, the sink, the source and UDP echo answer.
func probe(p Ports) error {
	if _, err := p.Stats(); err != nil {
		return fmt.Errorf("/stats: %w", err)
	}
	if n, sum, _, err := sendChecked(p, 64<<10, 20*time.Second); err != nil || n != 64<<10 || sum != PatternSHA256(64<<10) {
		return fmt.Errorf("sink: %d bytes, %v", n, errors.Join(err))
	}
	if _, err := p.Receive(64<<10, 20*time.Second); err != nil {
		return fmt.Errorf("source: %w", err)
	}
	if _, err := p.Echo([]byte("flood probe"), 5*time.Second); err != nil {
		return fmt.Errorf("echo: %w", err)
	}
	return nil
}
