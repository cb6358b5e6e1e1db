package iperf3

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// iperf3Path finds the stock client or skips the test.
func iperf3Path(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("iperf3")
	if err != nil {
		t.Skip("iperf3 client not installed (apt-get install iperf3); skipping interoperability tests")
	}
	return p
}

// clientReport is the part of `iperf3 --json` the tests read.
type clientReport struct {
	Error      string `json:"error"`
	ServerText string `json:"server_output_text"`
	Start      struct {
		TestStart struct {
			Protocol   string `json:"protocol"`
			NumStreams int    `json:"num_streams"`
			Reverse    int    `json:"reverse"`
		} `json:"test_start"`
	} `json:"start"`
	End struct {
		Streams []struct {
			Sender *struct {
				Socket  int     `json:"socket"`
				Bytes   uint64  `json:"bytes"`
				Sender  bool    `json:"sender"`
				Seconds float64 `json:"seconds"`
			} `json:"sender"`
			Receiver *struct {
				Bytes  uint64 `json:"bytes"`
				Sender bool   `json:"sender"`
			} `json:"receiver"`
			UDP *udpSum `json:"udp"`
		} `json:"streams"`
		SumSent     *sum    `json:"sum_sent"`
		SumReceived *sum    `json:"sum_received"`
		Sum         *udpSum `json:"sum"`
		CPU         *struct {
			HostTotal    float64 `json:"host_total"`
			RemoteTotal  float64 `json:"remote_total"`
			RemoteUser   float64 `json:"remote_user"`
			RemoteSystem float64 `json:"remote_system"`
		} `json:"cpu_utilization_percent"`
	} `json:"end"`
}

type sum struct {
	Bytes       uint64  `json:"bytes"`
	Seconds     float64 `json:"seconds"`
	Bps         float64 `json:"bits_per_second"`
	Sender      bool    `json:"sender"`
	JitterMs    float64 `json:"jitter_ms"`
	LostPackets uint64  `json:"lost_packets"`
	Packets     uint64  `json:"packets"`
}

type udpSum struct {
	Bytes       uint64  `json:"bytes"`
	Seconds     float64 `json:"seconds"`
	Bps         float64 `json:"bits_per_second"`
	JitterMs    float64 `json:"jitter_ms"`
	LostPackets uint64  `json:"lost_packets"`
	Packets     uint64  `json:"packets"`
	LostPercent float64 `json:"lost_percent"`
	Sender      bool    `json:"sender"`
}

// runClient runs the stock client against ts with args and decodes its
// JSON report; the raw report is returned for the record.
func runClient(t *testing.T, ts *testServer, args ...string) (clientReport, string) {
	t.Helper()
	r, out, err := clientRun(iperf3Path(t), ts, args...)
	t.Logf("iperf3 -c 127.0.0.1 -p %d --json %s", ts.port, strings.Join(args, " "))
	if err != nil {
		t.Fatal(err)
	}
	return r, out
}

// clientRun is runClient without the testing.T, for other goroutines.
func clientRun(bin string, ts *testServer, args ...string) (clientReport, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	full := append([]string{"-c", "127.0.0.1", "-p", strconv.Itoa(ts.port), "--json"}, args...)
	out, err := exec.CommandContext(ctx, bin, full...).Output()
	var r clientReport
	if jerr := json.Unmarshal(out, &r); jerr != nil {
		return r, string(out), fmt.Errorf("client output is not JSON (%v, exit %v):\n%s", jerr, err, out)
	}
	return r, string(out), nil
}

// TestStockClient runs the distribution's iperf3 client against the
// server in every mode the firmware promises and checks the client's
// report against itself and against the server's own counters.
func TestStockClient(t *testing.T) {
	iperf3Path(t)
	const mib = 1 << 20
	cases := []struct {
		name    string
		args    []string
		udp     bool
		reverse bool // the server sends
		bidir   bool
		streams int
		minSent uint64 // -n: the sender must reach it
		omit    bool   // -O: each side starts counting on its own clock
		maxSent uint64 // -k -R: the server stops after the blocks asked
		text    bool   // --get-server-output
	}{
		{name: "tcp", args: []string{"-t", "1"}, streams: 1},
		{name: "tcp-R", args: []string{"-t", "1", "-R"}, reverse: true, streams: 1},
		{name: "tcp-P4", args: []string{"-t", "1", "-P", "4"}, streams: 4},
		{name: "tcp-R-P4", args: []string{"-t", "1", "-P", "4", "-R"}, reverse: true, streams: 4},
		{name: "tcp-n", args: []string{"-n", "8M"}, streams: 1, minSent: 8 * mib},
		{name: "tcp-R-n", args: []string{"-n", "8M", "-R"}, reverse: true, streams: 1, minSent: 8 * mib},
		// The client counts a block per read, so it may stop before 40
		// full blocks arrive; the server must not send more than 40.
		{name: "tcp-R-k", args: []string{"-k", "40", "-l", "64K", "-R"}, reverse: true, streams: 1, maxSent: 40 * 64 << 10},
		{name: "tcp-bidir", args: []string{"-t", "1", "--bidir"}, bidir: true, streams: 1},
		{name: "tcp-server-output", args: []string{"-t", "1", "--get-server-output"}, streams: 1, text: true},
		{name: "tcp-O", args: []string{"-t", "1", "-O", "1"}, streams: 1, omit: true},
		{name: "udp", args: []string{"-t", "1", "-u", "-b", "10M"}, udp: true, streams: 1},
		{name: "udp-R", args: []string{"-t", "1", "-u", "-b", "10M", "-R"}, udp: true, reverse: true, streams: 1},
		{name: "udp-P2-64", args: []string{"-t", "1", "-u", "-b", "10M", "-P", "2", "--udp-counters-64bit"}, udp: true, streams: 2},
		{name: "udp-bidir", args: []string{"-t", "1", "-u", "-b", "10M", "--bidir", "-l", "1400"}, udp: true, bidir: true, streams: 1},
		{name: "udp-R-64", args: []string{"-t", "1", "-u", "-b", "10M", "-R", "--udp-counters-64bit", "-l", "1400"}, udp: true, reverse: true, streams: 1},
	}
	ts := startServer(t, Config{})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := ts.Stats()
			r, raw := runClient(t, ts, tc.args...)
			ts.idle(t)
			st := ts.Stats()
			if r.Error != "" {
				t.Fatalf("client error %q; server: %+v\n%s", r.Error, st, raw)
			}
			if st.Completed != before.Completed+1 || st.Aborted != 0 || st.Last == nil {
				t.Fatalf("server stats after the test: %+v", st)
			}
			last := st.Last
			if last.Err != "" || last.Streams != tc.streams || last.Reverse != tc.reverse || last.Bidir != tc.bidir ||
				(last.Protocol == "udp") != tc.udp {
				t.Errorf("server result %+v does not match the test", *last)
			}
			wantStreams := tc.streams
			if tc.bidir {
				wantStreams *= 2
			}
			if len(r.End.Streams) != wantStreams {
				t.Errorf("client reports %d streams, want %d", len(r.End.Streams), wantStreams)
			}
			sent, recv := r.End.SumSent, r.End.SumReceived
			if sent == nil || recv == nil {
				t.Fatalf("client report lacks sum_sent/sum_received:\n%s", raw)
			}
			if sent.Bytes == 0 || recv.Bytes == 0 || (recv.Bytes > sent.Bytes && !tc.omit) {
				t.Errorf("client sums: sent %d, received %d bytes", sent.Bytes, recv.Bytes)
			}
			if tc.minSent > 0 && sent.Bytes < tc.minSent {
				t.Errorf("sent %d bytes, limit asked %d", sent.Bytes, tc.minSent)
			}
			if tc.maxSent > 0 && last.BytesSent > tc.maxSent {
				t.Errorf("server sent %d bytes, more than the %d asked", last.BytesSent, tc.maxSent)
			}
			// The sums over the streams add up.
			var ss, sr uint64
			for _, s := range r.End.Streams {
				if s.UDP != nil {
					continue
				}
				if s.Sender == nil || s.Receiver == nil || s.Sender.Bytes == 0 || s.Receiver.Bytes == 0 {
					t.Errorf("stream without traffic in the client report:\n%s", raw)
					continue
				}
				if !tc.bidir {
					ss += s.Sender.Bytes
					sr += s.Receiver.Bytes
				}
			}
			if !tc.udp && !tc.bidir && (ss != sent.Bytes || sr != recv.Bytes) {
				t.Errorf("streams add up to %d/%d, sums say %d/%d", ss, sr, sent.Bytes, recv.Bytes)
			}
			// What the client reports for the server's side is what the
			// server counted.
			switch {
			case tc.bidir:
				if last.BytesSent == 0 || last.BytesReceived == 0 {
					t.Errorf("bidirectional server counters: %+v", *last)
				}
			case tc.reverse:
				if sent.Bytes != last.BytesSent || last.ClientBytes != recv.Bytes {
					t.Errorf("server sent %d (client says %d), client received %d (server was told %d)",
						last.BytesSent, sent.Bytes, recv.Bytes, last.ClientBytes)
				}
			default:
				if recv.Bytes != last.BytesReceived || last.ClientBytes != sent.Bytes {
					t.Errorf("server received %d (client says %d), client sent %d (server was told %d)",
						last.BytesReceived, recv.Bytes, sent.Bytes, last.ClientBytes)
				}
			}
			if tc.udp {
				if tc.reverse {
					if sent.Packets == 0 || sent.Packets != last.PacketsSent || recv.Packets == 0 {
						t.Errorf("UDP -R: client says %d packets sent, %d received; server sent %d", sent.Packets, recv.Packets, last.PacketsSent)
					}
				} else if recv.Packets != last.Packets || recv.LostPackets != last.Lost || math.Abs(recv.JitterMs-last.Jitter*1000) > 1e-9 || recv.Packets == 0 {
					t.Errorf("UDP: client says %d packets, %d lost, jitter %v ms; server counted %d, %d, %v s",
						recv.Packets, recv.LostPackets, recv.JitterMs, last.Packets, last.Lost, last.Jitter)
				}
			}
			if tc.text && !strings.Contains(r.ServerText, "tamanic iperf3 server: tcp, 1 stream(s)") {
				t.Errorf("server output %q", r.ServerText)
			}
			cpu := r.End.CPU
			if cpu == nil {
				t.Fatalf("no cpu_utilization_percent in the client report")
			}
			// cJSON prints 15 significant digits when they round-trip
			// the double, 17 otherwise: compare to 1e-12 relative.
			near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-12*math.Max(math.Abs(a), math.Abs(b)) }
			if !near(cpu.RemoteTotal, last.CPUTotal) || !near(cpu.RemoteUser, last.CPUUser) || !near(cpu.RemoteSystem, last.CPUSystem) || last.CPUTotal <= 0 {
				t.Errorf("remote CPU %+v, server computed %v/%v/%v", *cpu, last.CPUTotal, last.CPUUser, last.CPUSystem)
			}
			t.Logf("sent %d B, received %d B in %.2f s (%.0f Mbit/s received); remote CPU %.1f%%",
				sent.Bytes, recv.Bytes, recv.Seconds, recv.Bps/1e6, cpu.RemoteTotal)
		})
	}
}

// TestStockClientBusy: a second stock client during a test is told the
// server is busy, and the first test completes undisturbed.
func TestStockClientBusy(t *testing.T) {
	bin := iperf3Path(t)
	ts := startServer(t, Config{})
	first := make(chan clientReport, 1)
	go func() {
		r, _, err := clientRun(bin, ts, "-t", "2")
		if err != nil {
			r.Error = err.Error()
		}
		first <- r
	}()
	waitFor(t, "first test running", func() bool {
		ts.mu.Lock()
		defer ts.mu.Unlock()
		return ts.active != nil && ts.active.phase == phaseRunning
	})
	r, _ := runClient(t, ts, "-t", "1")
	if !strings.Contains(r.Error, "busy") {
		t.Errorf("second client: error %q, want the server-busy error", r.Error)
	}
	if r1 := <-first; r1.Error != "" || r1.End.SumReceived == nil || r1.End.SumReceived.Bytes == 0 {
		t.Errorf("first client: error %q, report %+v", r1.Error, r1.End.SumReceived)
	}
	ts.idle(t)
	if st := ts.Stats(); st.Denied != 1 || st.Completed != 1 || st.Aborted != 0 {
		t.Errorf("stats %+v", st)
	}
}

// TestStockClientBidirLimit: the stock client with --bidir opens two
// streams per -P; with MaxStreams 4 it runs -P 2 --bidir and is refused
// -P 3 --bidir with its own text for IENUMSTREAMS ("number of parallel
// streams too large (maximum = 128)": the client's own limit for -P; the
// server logs the real one). Before the fix it ran 6 streams.
func TestStockClientBidirLimit(t *testing.T) {
	iperf3Path(t)
	ts := startServer(t, Config{MaxStreams: 4})
	r, raw := runClient(t, ts, "-t", "1", "-P", "2", "--bidir")
	if r.Error != "" || len(r.End.Streams) != 4 {
		t.Fatalf("-P 2 --bidir: error %q, %d streams\n%s", r.Error, len(r.End.Streams), raw)
	}
	ts.idle(t)
	r, _ = runClient(t, ts, "-t", "1", "-P", "3", "--bidir")
	t.Logf("-P 3 --bidir: client error %q", r.Error)
	if !strings.Contains(r.Error, "parallel streams") {
		t.Errorf("-P 3 --bidir: error %q, want the too-many-streams error", r.Error)
	}
	ts.idle(t)
	if st := ts.Stats(); st.Completed != 1 || st.BadParams != 1 {
		t.Errorf("stats %+v", st)
	}
}
