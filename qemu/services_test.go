package qemu

import (
	"context"
	"io"
	"net/http"
	"os/exec"
	"testing"
	"time"
)

// TestControlPortAndIperf3 boots the mx6ullevk firmware and checks that
// POST /mode refuses a missing or wrong bearer token (changing nothing)
// and that the stock iperf3 client passes against the firmware's server
// in both directions, TCP and UDP, with the board's CPU load in its report.
func TestControlPortAndIperf3(t *testing.T) {
	elf := firmware(t, "mx6ullevk")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	m, err := Boot(ctx, Options{ELF: elf, Board: "mx6ullevk"})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Stop()

	before, err := m.Stats()
	if err != nil {
		t.Fatal(err)
	}
	for _, auth := range []string{"", "Bearer wrong", "Basic " + ControlToken} {
		r, err := m.PostMode("tx=bounce&copybreak=0", auth)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(r.Body)
		r.Body.Close()
		if r.StatusCode != http.StatusUnauthorized {
			t.Errorf("POST /mode with Authorization %q: %s %s, want 401", auth, r.Status, b)
		}
	}
	after, err := m.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if after["tx_mode"] != before["tx_mode"] || after["copybreak"] != before["copybreak"] {
		t.Fatalf("refused POST /mode changed the mode: %v/%v -> %v/%v", before["tx_mode"], before["copybreak"], after["tx_mode"], after["copybreak"])
	}
	if err := m.SetMode("sg", 256); err != nil {
		t.Fatalf("POST /mode with the image's token: %v", err)
	}
	if s, _ := m.Stats(); s["tx_mode"] != "sg" || num(s, "copybreak") != 256 {
		t.Fatalf("authorised POST /mode not applied: %v %v", s["tx_mode"], s["copybreak"])
	}
	if err := m.SetMode("tso", 512); err != nil {
		t.Fatal(err)
	}

	if _, err := exec.LookPath("iperf3"); err != nil {
		t.Skip("skipping the iperf3 half: the iperf3 client (Debian package iperf3) is not installed")
	}
	for _, args := range [][]string{{"-t", "2"}, {"-t", "2", "-R"}, {"-t", "2", "-P", "2"}} {
		rep, err := m.Iperf3(ctx, args...)
		if err != nil {
			t.Fatalf("%v\nconsole:\n%s", err, m.Console())
		}
		sent, recv := num(rep, "end", "sum_sent", "bytes"), num(rep, "end", "sum_received", "bytes")
		cpu := num(rep, "end", "cpu_utilization_percent", "remote_total")
		t.Logf("iperf3 %v: %.1f Mbit/s received, board CPU %.1f%%", args, num(rep, "end", "sum_received", "bits_per_second")/1e6, cpu)
		if sent <= 0 || recv <= 0 || recv > sent {
			t.Errorf("iperf3 %v: sent %v, received %v bytes", args, sent, recv)
		}
		if cpu <= 0 || cpu > 100 {
			t.Errorf("iperf3 %v: board CPU %v%%, want the firmware's idle-based load in (0, 100]", args, cpu)
		}
	}
	for _, args := range [][]string{{"-u", "-b", "10M", "-t", "2"}, {"-u", "-b", "10M", "-t", "2", "-R"}} {
		rep, err := m.Iperf3(ctx, args...)
		if err != nil {
			t.Fatalf("%v\nconsole:\n%s", err, m.Console())
		}
		pk, lost := num(rep, "end", "sum", "packets"), num(rep, "end", "sum", "lost_packets")
		t.Logf("iperf3 %v: %v packets, %v lost, jitter %.2f ms", args, pk, lost, num(rep, "end", "sum", "jitter_ms"))
		if pk <= 0 || lost < 0 || lost > pk/2 {
			t.Errorf("iperf3 %v: %v packets, %v lost", args, pk, lost)
		}
	}
	s, err := m.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if drv := num(s, "nic", "driver", "Tx", "Errors"); drv != 0 {
		t.Errorf("driver TX errors after iperf3: %v", drv)
	}
}
