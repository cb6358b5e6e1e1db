package qemu

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tamanic/tamanic/tee/netcall"
)

var teeFW struct {
	mu   sync.Mutex
	elfs map[bool]string
	errs map[bool]error
}

// teeFirmware builds the partitioned image once per test binary (hostile:
// with the Normal World's hostile-call mode), or skips the test with one
// line saying what is missing.
func teeFirmware(t *testing.T, hostile bool) string {
	t.Helper()
	if why := Missing(); why != "" {
		t.Skipf("skipping QEMU tests: %s", why)
	}
	teeFW.mu.Lock()
	defer teeFW.mu.Unlock()
	if teeFW.elfs == nil {
		teeFW.elfs, teeFW.errs = map[bool]string{}, map[bool]error{}
	}
	if _, done := teeFW.elfs[hostile]; !done {
		dir, err := os.MkdirTemp("", "tamanic-tee")
		if err == nil {
			root, _ := filepath.Abs("..")
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			teeFW.elfs[hostile], err = BuildTEE(ctx, root, dir, hostile)
			cancel()
		}
		teeFW.errs[hostile] = err
	}
	if err := teeFW.errs[hostile]; err != nil {
		t.Fatal(err)
	}
	return teeFW.elfs[hostile]
}

// bootTEE boots the partitioned image, with args as further QEMU
// arguments, and checks what its console says about the partition.
func bootTEE(t *testing.T, hostile bool, args ...string) *Machine {
	t.Helper()
	elf := teeFirmware(t, hostile)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var console bytes.Buffer
	o := Options{ELF: elf, Board: "mx6ullevk", Console: &console, Args: args}
	if len(args) > 0 {
		o.ReadyTimeout = 2 * time.Minute // a plugin slows the boot
	}
	m, err := Boot(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Stop() })
	t.Logf("booted in %v: %s", m.Boot.Round(time.Millisecond), m.Ready)
	for _, want := range []string{"tee: Trusted OS, Secure World, native=false",
		"tee: Normal World memory: Non-secure, execute-never in the Secure page table",
		"tee: emulated: CSU and TZASC not programmed", "normal: Normal World OS, non-secure=true"} {
		if !strings.Contains(m.Console(), want) {
			t.Errorf("console lacks %q:\n%s", want, m.Console())
		}
	}
	for _, l := range strings.Split(m.Console(), "\n") {
		if strings.HasPrefix(l, "tee: ") || strings.HasPrefix(l, "BANKED ") || strings.HasPrefix(l, "GROUPS ") || strings.HasPrefix(l, "STORM ") {
			t.Log(strings.TrimSpace(l))
		}
	}
	if !strings.HasSuffix(m.Ready, " world=normal") {
		t.Errorf("READY line from the wrong world: %s", m.Ready)
	}
	return m
}

// transfers moves n bytes each way in each TX mode and checks them by
// SHA-256 (the guest's source against the pattern here, the host's data in
// the guest's sink against the pattern there), and logs the world calls
// each direction took per MiB in each mode.
func transfers(t *testing.T, m *Machine, n int64) {
	t.Helper()
	for _, mode := range []string{"bounce", "sg", "tso"} {
		if err := m.SetMode(mode, 512); err != nil {
			t.Fatalf("%v\nconsole:\n%s", err, m.Console())
		}
		s0, err := m.Stats()
		if err != nil {
			t.Fatal(err)
		}
		el, err := m.Receive(n, 2*time.Minute)
		if err != nil {
			t.Fatalf("%s guest->host: %v\nconsole:\n%s", mode, err, m.Console())
		}
		s1, err := m.Stats()
		if err != nil {
			t.Fatal(err)
		}
		r, err := m.Send(n, 2*time.Minute)
		if err != nil || r.Bytes != n {
			t.Fatalf("%s host->guest: %+v %v\nconsole:\n%s", mode, r, err, m.Console())
		}
		s2, err := m.Stats()
		if err != nil {
			t.Fatal(err)
		}
		if last, _ := s2["last_sink"].(map[string]any); last["sha256"] != PatternSHA256(n) {
			t.Fatalf("%s host->guest: guest received data with SHA-256 %v", mode, last["sha256"])
		}
		if s2["tx_mode"] != mode {
			t.Fatalf("/stats says mode %v after switching to %s", s2["tx_mode"], mode)
		}
		calls := func(s map[string]any) float64 { return num(s, "nic", "device", "Calls") }
		srv := func(s map[string]any, k string) float64 { return num(s, "nic", "secure", "Server", k) }
		mib := float64(n) / (1 << 20)
		gso := srv(s1, "TxGSOPackets") - srv(s0, "TxGSOPackets")
		t.Logf("%s: guest->host %.1f Mbit/s, %.1f world calls/MiB (%v GSO packets, %v frames); host->guest %.1f Mbit/s, %.1f world calls/MiB (wall)",
			mode, float64(n*8)/el.Seconds()/1e6, (calls(s1)-calls(s0))/mib, gso, srv(s1, "TxFrames")-srv(s0, "TxFrames"),
			float64(n*8)/r.Wall.Seconds()/1e6, (calls(s2)-calls(s1))/mib)
		if mode == "tso" && gso == 0 {
			t.Errorf("tso: no GSO packet crossed the world boundary")
		}
		if copied := num(s1, "nic", "secure", "NIC", "Tx", "Copied") - num(s0, "nic", "secure", "NIC", "Tx", "Copied"); mode == "bounce" && copied < float64(n) {
			t.Errorf("bounce: the Secure World's driver copied %v bytes of %d sent", copied, n)
		} else if mode == "sg" && copied > float64(n)/10 {
			t.Errorf("sg: the Secure World's driver copied %v bytes of %d sent", copied, n)
		}
	}
}

// checkCounters checks that nothing failed and that the Normal World's,
// the Secure World's and the driver's counters agree.
func checkCounters(t *testing.T, m *Machine, hostile bool) map[string]any {
	t.Helper()
	s, err := m.Stats()
	if err != nil {
		t.Fatal(err)
	}
	srv := func(k string) float64 { return num(s, "nic", "secure", "Server", k) }
	drv := func(k string) float64 { return num(s, "nic", "secure", "NIC", "Tx", k) }
	ep := func(k string) float64 { return num(s, "nic", "endpoint", k) }
	dev := func(k string) float64 { return num(s, "nic", "device", k) }
	if srv("TxGSOPackets") != drv("GSOPackets") || srv("TxGSOPackets") != ep("TxGSOPackets") ||
		srv("TxFrames")+srv("TxGSOPackets") != ep("TxPackets") {
		t.Errorf("TX counters disagree: endpoint %v packets (%v GSO), Secure World %v frames and %v GSO packets, driver %v GSO packets",
			ep("TxPackets"), ep("TxGSOPackets"), srv("TxFrames"), srv("TxGSOPackets"), drv("GSOPackets"))
	}
	if srv("TxErrors") != 0 || srv("RxErrors") != 0 || dev("BadRecords") != 0 || ep("TxErrors") != 0 || ep("RxBadCsum") != 0 {
		t.Errorf("errors: %v", s["nic"])
	}
	if !hostile && (dev("Refused") != 0 || s["nic"].(map[string]any)["secure"].(map[string]any)["Server"].(map[string]any)["Refused"] != nil) {
		t.Errorf("a well-behaved Normal World was refused: %v", s["nic"])
	}
	if srv("Staging") > 256+8 {
		t.Errorf("staging buffers %v", srv("Staging"))
	}
	return s
}

// TestTEEEndToEnd boots the TrustZone-partitioned image (driver in the
// Secure World, gVisor and the services in the Normal World, one world
// call per GSO packet or receive batch) and runs the other boards'
// checks: SHA-256 of the sink and source transfers in bounce, sg and tso modes,
// UDP echo, /stats.
func TestTEEEndToEnd(t *testing.T) {
	m := bootTEE(t, false)
	transfers(t, m, 8<<20)
	for _, size := range []int{1, 100, 1472, 1473, 4000, 8192} {
		d := bytes.Repeat([]byte{byte(size)}, size)
		got, err := m.Echo(d, 5*time.Second)
		if err != nil || !bytes.Equal(got, d) {
			t.Fatalf("echo of %d bytes: %d bytes back, %v", size, len(got), err)
		}
	}
	s := checkCounters(t, m, false)
	if num(s, "nic", "device", "Woken") == 0 {
		t.Errorf("no idle wait was ended by a received frame: the Secure World's RX interrupt does not wake the Normal World")
	}
	// The Normal World's entropy is the Secure World's (OpRandom): its
	// runtime's seed at least (8 calls of 4 bytes), nothing from an RNG of
	// its own.
	if n := num(s, "nic", "secure", "Server", "RandomCalls"); n < 8 || num(s, "nic", "secure", "Server", "RandomErrors") != 0 {
		t.Errorf("Normal World entropy: %v OpRandom calls, %v failed; want the runtime's seed from the Secure World", n, num(s, "nic", "secure", "Server", "RandomErrors"))
	}
	// Idle, the Normal World waits in the Secure World (its idle governor,
	// an OpWait per timer deadline), which sleeps in WFI: it must not spin.
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
	calls := num(s1, "nic", "device", "Calls") - num(s0, "nic", "device", "Calls")
	t.Logf("idle: %.1f%% of %.0f ms, %.0f world calls", 100*idle/up, up/1e6, calls)
	if idle < up/2 {
		t.Errorf("guest idle only %.0f of %.0f ms with nothing to do", idle/1e6, up/1e6)
	}
}

// TestTEEHostileCalls boots the partitioned image with the Normal World's
// hostile-call mode: it makes every malformed call of netcall.HostileCalls
// before READY and every 100 ms after. The Trusted OS must refuse each with
// the status the table wants, count it, and keep serving: the transfers
// then pass as on the well-behaved image.
func TestTEEHostileCalls(t *testing.T) {
	m := bootTEE(t, true)
	table := float64(len(netcall.HostileCalls()))
	if !strings.Contains(m.Console(), fmt.Sprintf("HOSTILE calls=%d unexpected=0", len(netcall.HostileCalls()))) {
		t.Fatalf("no clean HOSTILE line before READY:\n%s", m.Console())
	}
	// Issue 32 item 1: the Normal World aimed its IRQ-mode stack at a
	// canary and set every exception-mode banked register, then waited in
	// the Secure World 20 times (each wait takes at least the Secure
	// timer's interrupt): no Secure interrupt may run on that stack, and
	// every register must come back as it was set.
	if !strings.Contains(m.Console(), "BANKED canary_touched=0 changed=none") {
		t.Errorf("Secure interrupts ran on the Normal World's stack or changed its banked registers:\n%s", m.Console())
	}
	// ... and not because the waits ran with IRQs masked: the Trusted OS
	// unmasks them in every wait, after checking that SP_irq is its own.
	if strings.Contains(m.Console(), "tee: the IRQ stack is not the Trusted OS's") {
		t.Errorf("a wait found the Normal World's IRQ stack in place:\n%s", m.Console())
	}
	// Item 4: the Normal World can enable its own physical timer's PPI
	// (Group 1) and cannot see ENET1's (Group 0).
	if !strings.Contains(m.Console(), "GROUPS ppi30=1 enet1=0") {
		t.Errorf("the Normal World's timer PPI is not Group 1, or ENET1's interrupt is not Group 0:\n%s", m.Console())
	}
	// ... and its timer held asserted does not stall the Secure World:
	// the waits made meanwhile come back (bootTEE's READY would not come
	// otherwise).
	if !strings.Contains(m.Console(), "STORM waits=5") {
		t.Errorf("waits with the Normal World's timer asserted did not come back:\n%s", m.Console())
	}
	transfers(t, m, 4<<20)
	s := checkCounters(t, m, true)
	h := func(k string) float64 { return num(s, "nic", "hostile", k) }
	if h("Unexpected") != 0 || h("Rounds") < 2 {
		t.Fatalf("hostile calls: %v", s["nic"].(map[string]any)["hostile"])
	}
	refused := 0.0
	for _, v := range s["nic"].(map[string]any)["secure"].(map[string]any)["Server"].(map[string]any)["Refused"].(map[string]any) {
		refused += v.(float64)
	}
	// The Secure World's counters are read before the hostile ones, and
	// a round may run in between.
	if refused > h("Calls") || refused < h("Calls")-table {
		t.Errorf("%v refusals counted by the Trusted OS, %v hostile calls made", refused, h("Calls"))
	}
	t.Logf("%v hostile calls in %v rounds, all refused as the table wants, beside the transfers", h("Calls"), h("Rounds"))
}
