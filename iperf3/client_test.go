package iperf3

import (
	"context"
	"encoding/json"
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
	Error string `json:"error"`
	Start struct {
		TestStart struct {
			Protocol   string `json:"protocol"`
			NumStreams int    `json:"num_streams"`
			Reverse    int    `json:"reverse"`
		} `json:"test_start"`
	} `json:"start"`
	End struct {
		Streams []struct {
			Sender *struct {
				Socket int     `json:"socket"`
				Bytes  uint64  `json:"bytes"`
				Sender bool    `json:"sender"`
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
	Bytes   uint64  `json:"bytes"`
	Seconds float64 `json:"seconds"`
	Bps     float64 `json:"bits_per_second"`
	Sender  bool    `json:"sender"`
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
// JSON report; the raw report is logged for the record.
func runClient(t *testing.T, ts *testServer, args ...string) (clientReport, string) {
	t.Helper()
	bin := iperf3Path(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	full := append([]string{"-c", "127.0.0.1", "-p", strconv.Itoa(ts.port), "--json"}, args...)
	out, err := exec.CommandContext(ctx, bin, full...).Output()
	t.Logf("iperf3 %s", strings.Join(full, " "))
	var r clientReport
	if jerr := json.Unmarshal(out, &r); jerr != nil {
		t.Fatalf("client output is not JSON (%v, exit %v):\n%s", jerr, err, out)
	}
	return r, string(out)
}

func TestScratch(t *testing.T) {
	ts := startServer(t, Config{})
	_, out := runClient(t, ts, "-t", "1", "-u", "-b", "10M")
	t.Log(out)
	t.Logf("%+v", ts.Stats())
}
