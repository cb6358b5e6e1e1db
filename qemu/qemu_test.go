package qemu

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

var fw struct {
	once sync.Once
	elf  string
	err  error
}

// firmware builds the firmware once per test binary, or skips the test
// with one line saying what is missing.
func firmware(t *testing.T) string {
	t.Helper()
	if why := Missing(); why != "" {
		t.Skipf("skipping QEMU tests: %s", why)
	}
	fw.once.Do(func() {
		dir, err := os.MkdirTemp("", "tamanic-fw")
		if err != nil {
			fw.err = err
			return
		}
		root, _ := filepath.Abs("..")
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		fw.elf, fw.err = Build(ctx, root, dir, "mx6ullevk")
	})
	if fw.err != nil {
		t.Fatal(fw.err)
	}
	return fw.elf
}

func num(m map[string]any, path ...string) float64 {
	var v any = m
	for _, p := range path {
		mm, ok := v.(map[string]any)
		if !ok {
			return -1
		}
		v = mm[p]
	}
	f, _ := v.(float64)
	return f
}

func TestFirmwareEndToEnd(t *testing.T) {
	elf := firmware(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var console bytes.Buffer
	m, err := Boot(ctx, Options{ELF: elf, Console: &console})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Stop()
	t.Logf("booted in %v: %s", m.Boot.Round(time.Millisecond), m.Ready)
	t.Logf("command: %s", m.CommandLine())
	const n = 16 << 20
	for _, mode := range []string{"bounce", "sg", "tso"} {
		if err := m.SetMode(mode, 512); err != nil {
			t.Fatalf("%v\nconsole:\n%s", err, m.Console())
		}
		el, err := m.Receive(n, 2*time.Minute)
		if err != nil {
			t.Fatalf("%s guest->host: %v\nconsole:\n%s", mode, err, m.Console())
		}
		r, err := m.Send(n, 2*time.Minute)
		if err != nil || r.Bytes != n {
			t.Fatalf("%s host->guest: %+v %v\nconsole:\n%s", mode, r, err, m.Console())
		}
		s, err := m.Stats()
		if err != nil {
			t.Fatal(err)
		}
		last, _ := s["last_sink"].(map[string]any)
		if last["sha256"] != PatternSHA256(n) {
			t.Fatalf("%s host->guest: guest received data with SHA-256 %v", mode, last["sha256"])
		}
		if s["tx_mode"] != mode {
			t.Fatalf("/stats says mode %v after switching to %s", s["tx_mode"], mode)
		}
		t.Logf("%s: guest->host %.1f Mbit/s, host->guest %.1f Mbit/s (wall)", mode,
			float64(n*8)/el.Seconds()/1e6, float64(n*8)/r.Wall.Seconds()/1e6)
	}
	// The sink without hashing (for benchmarks) still counts every byte.
	if err := m.SetSinkHash(false); err != nil {
		t.Fatal(err)
	}
	if r, err := m.Send(1<<20, time.Minute); err != nil || r.Bytes != 1<<20 {
		t.Fatalf("host->guest without hashing: %+v %v", r, err)
	}
	if s, err := m.Stats(); err != nil || num(s, "last_sink", "bytes") != 1<<20 || s["last_sink"].(map[string]any)["sha256"] != "" {
		t.Fatalf("sink without hashing: %v %v", s["last_sink"], err)
	}
	if err := m.SetSinkHash(true); err != nil {
		t.Fatal(err)
	}
	// The closed connections leave TCP timers (TIME-WAIT) pending. The
	// idle governor must sleep in WFI until the next one, not spin:
	// TamaGo's default governor spins whenever a timer is pending, which
	// would show here as a busy guest.
	s0, err := m.Stats()
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	s1, err := m.Stats()
	if err != nil {
		t.Fatal(err)
	}
	up, idle := num(s1, "uptime_ns")-num(s0, "uptime_ns"), num(s1, "idle_ns")-num(s0, "idle_ns")
	t.Logf("idle with TCP timers pending: %.1f%% of %.0f ms", 100*idle/up, up/1e6)
	if idle < up/2 {
		t.Errorf("guest idle only %.0f of %.0f ms with only timers pending: the idle governor spins", idle/1e6, up/1e6)
	}
	for _, size := range []int{1, 100, 1472, 1473, 4000, 8192} {
		d := bytes.Repeat([]byte{byte(size)}, size)
		got, err := m.Echo(d, 5*time.Second)
		if err != nil || !bytes.Equal(got, d) {
			t.Fatalf("UDP echo of %d bytes: %d bytes back, %v", size, len(got), err)
		}
	}
	s, err := m.Stats()
	if err != nil {
		t.Fatal(err)
	}
	// Counters add up and nothing failed.
	drvTx := func(k string) float64 { return num(s, "nic", "driver", "Tx", k) }
	drvRx := func(k string) float64 { return num(s, "nic", "driver", "Rx", k) }
	ep := func(k string) float64 { return num(s, "nic", "endpoint", k) }
	if drvTx("Frames")-drvTx("GSOSegments") != ep("TxPackets")-ep("TxGSOPackets") || drvTx("GSOPackets") != ep("TxGSOPackets") {
		t.Fatalf("TX counters disagree: driver %v frames (%v GSO segments of %v packets), endpoint %v packets (%v GSO)",
			drvTx("Frames"), drvTx("GSOSegments"), drvTx("GSOPackets"), ep("TxPackets"), ep("TxGSOPackets"))
	}
	if drvRx("Frames") != ep("RxPackets")+ep("RxUnknownType")+ep("RxRunts")+ep("RxBadCsum")+ep("RxFragDrops")+ep("RxACKsFiltered") {
		t.Fatalf("RX counters disagree: driver %v frames, endpoint %v packets", drvRx("Frames"), ep("RxPackets"))
	}
	// The firmware filters ACKs: slirp acknowledges every segment or two,
	// and the guest sends in bursts, so ACKs queue and most are superseded.
	if ep("RxACKsFiltered") == 0 {
		t.Errorf("no ACK filtered in %v received frames", drvRx("Frames"))
	}
	if drvRx("Bytes") < 3*n || drvTx("Bytes") < 3*n {
		t.Fatalf("byte counters too small: rx %v tx %v", drvRx("Bytes"), drvTx("Bytes"))
	}
	for _, k := range []string{"CRC", "Overrun", "TooLong", "Truncated", "NonOctet", "MACError", "MultiBuffer", "Runt", "BadChecksum", "NoBuffer"} {
		if drvRx(k) != 0 {
			t.Errorf("driver RX %s = %v", k, drvRx(k))
		}
	}
	if drvTx("Errors") != 0 || drvTx("GSOErrors") != 0 || ep("TxErrors") != 0 || num(s, "nic", "driver", "BusErrors") != 0 {
		t.Errorf("TX errors: %v", s["nic"])
	}
	if up, idle := num(s, "uptime_ns"), num(s, "idle_ns"); idle <= 0 || idle >= up {
		t.Errorf("idle %v of uptime %v", idle, up)
	}
	if strings.Contains(m.Console(), "PANIC") {
		t.Fatalf("guest panicked:\n%s", m.Console())
	}
}
