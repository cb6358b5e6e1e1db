package qemu

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// cosimBytes is what TestConnectXCosim moves each way in each TX mode:
// by default the 64 MiB (23 s on a shared 2-core host), 16 MiB
// under -race, where the peer stack runs instrumented (64 MiB took 103 s).
var cosimBytes = flag.Int64("cosim.bytes", 0, "bytes TestConnectXCosim moves each way per TX mode (0: 64 MiB, 16 MiB under -race)")

// cosim starts tamanic-cxsim and the i.MX7D firmware on its files, and a
// peer stack on its wire.
func cosim(t *testing.T) (*Machine, *CXSim, *WirePeer) {
	t.Helper()
	elf := firmware(t, "mcimx7d", CosimXFlags...)
	root, _ := filepath.Abs("..")
	dir, err := tempDir()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bin, err := BuildCXSim(ctx, root, dir)
	if err != nil {
		t.Fatal(err)
	}
	sim, err := StartCXSim(bin, dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		select {
		case <-sim.done:
		default:
			sim.Kill()
		}
	})
	m, err := Boot(ctx, Options{ELF: elf, Board: "mcimx7d", Args: CosimArgs(dir)})
	if err != nil {
		t.Fatalf("%v\ncxsim:\n%s", err, sim.Output())
	}
	t.Cleanup(func() { m.Stop() })
	t.Logf("command: %s", m.CommandLine())
	if !strings.Contains(m.Console(), "CONNECTX ip="+CXGuest+"/24") || !strings.Contains(m.Console(), "transport=ivshmem") {
		t.Fatalf("no CONNECTX line on the console:\n%s\ncxsim:\n%s", m.Console(), sim.Output())
	}
	// The ConnectX's loopback self-test ran at boot, before its endpoint,
	// through the model's vport local loopback (connectx.NIC.SelfTest).
	for _, l := range strings.Split(m.Console(), "\n") {
		if strings.HasPrefix(l, "SELFTEST cx0 ") {
			t.Logf("%s", l)
		}
	}
	for _, want := range []string{"SELFTEST cx0 mode=sg frames=19 ok ", "SELFTEST cx0 mode=lso frames=46 ok "} {
		if !strings.Contains(m.Console(), want) {
			t.Errorf("no %q line on the console:\n%s\ncxsim:\n%s", want, m.Console(), sim.Output())
		}
	}
	peer, err := NewWirePeer(sim.Addr, netip.MustParsePrefix(CXPeer+"/24"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(peer.Close)
	return m, sim, peer
}

// cosimDiag describes a stalled co-simulation: ENET1's /stats (with
// nic.connectx), the console, and the model's output and counters (it is
// stopped).
func cosimDiag(m *Machine, sim *CXSim) string {
	s, err := m.Stats()
	b, _ := json.Marshal(s)
	stats, serr := sim.Stop()
	return fmt.Sprintf("ENET1 /stats (%v): %s\nconsole:\n%s\ncxsim (%v):\n%s\n%s", err, b, m.Console(), serr, sim.Output(), stats)
}

// cxStats returns nic.connectx of a /stats document.
func cxStats(t *testing.T, p *Ports) map[string]any {
	t.Helper()
	s, err := p.Stats()
	if err != nil {
		t.Fatalf("/stats: %v", err)
	}
	// On the ConnectX's own services nic is the ConnectX; on ENET1's
	// it holds it as nic.connectx.
	c, ok := s["nic"].(map[string]any)
	if ok && c["transport"] == nil {
		c, ok = c["connectx"].(map[string]any)
	}
	if !ok {
		t.Fatalf("/stats has no nic.connectx: %v", s["nic"])
	}
	return c
}

// TestConnectXCosim: the i.MX7D firmware under QEMU drives the ConnectX
// model in tamanic-cxsim (BAR0 an ivshmem BAR2, DMA into the shared guest
// RAM); a gVisor stack on the model's wire moves data each way over the
// ConnectX interface with SHA-256 integrity, with LSO and without, while
// ENET1 serves; then the wire peer reconnects, the wire carries malformed
// frames, and the model process is killed mid-transfer. No CXSIM
// VIOLATION may appear.
func TestConnectXCosim(t *testing.T) {
	m, sim, peer := cosim(t)
	cx := peer.Ports(CXGuest)
	n := *cosimBytes
	if n == 0 {
		n = 64 << 20
		if raceEnabled {
			n = 16 << 20
		}
	}
	cxSelfTest(t, cx)
	var lso0 float64
	for _, mode := range []string{"tso", "sg"} {
		if err := cx.SetMode(mode, 0); err != nil {
			t.Fatalf("%s: %v\nconsole:\n%s", mode, err, m.Console())
		}
		before := cxStats(t, cx)
		// ENET1 serves at the same time.
		enet := make(chan error, 1)
		go func() { _, err := m.Receive(1<<20, 2*time.Minute); enet <- err }()
		el, err := cx.Receive(n, 5*time.Minute)
		if err != nil {
			t.Fatalf("%s guest->peer over the ConnectX: %v\n%s", mode, err, cosimDiag(m, sim))
		}
		r, err := cx.Send(n, 5*time.Minute)
		if err != nil || r.Bytes != n {
			t.Fatalf("%s peer->guest over the ConnectX: %+v %v\n%s", mode, r, err, cosimDiag(m, sim))
		}
		if err := <-enet; err != nil {
			t.Fatalf("%s: ENET1 during the ConnectX transfer: %v", mode, err)
		}
		s, err := cx.Stats()
		if err != nil {
			t.Fatal(err)
		}
		if last, _ := s["last_sink"].(map[string]any); last["sha256"] != PatternSHA256(n) {
			t.Fatalf("%s peer->guest: the guest received data with SHA-256 %v", mode, last["sha256"])
		}
		c := cxStats(t, cx)
		if c["transport"] != "ivshmem" || c["link"] != true || c["health"] != "ok" || c["mode"] != mode {
			t.Fatalf("%s: nic.connectx %v", mode, c)
		}
		d := func(k string) float64 { return num(c, "driver", k) - num(before, "driver", k) }
		if d("TxBytes") < float64(n) || d("RxBytes") < float64(n) || d("TxErrors") != 0 || d("RxErrors") != 0 {
			t.Errorf("%s: driver counters moved tx %v rx %v bytes (want >= %d), errors tx %v rx %v",
				mode, d("TxBytes"), d("RxBytes"), n, d("TxErrors"), d("RxErrors"))
		}
		if mode == "tso" && d("TxLSO") == 0 {
			t.Errorf("tso: no LSO WQE posted: %v", c["driver"])
		}
		if mode == "sg" && d("TxLSO") != 0 {
			t.Errorf("sg: %v LSO WQEs posted with LSO off", d("TxLSO"))
		}
		if num(c, "driver", "RxCsumOK") <= 0 {
			t.Errorf("%s: no receive checksum verified by the card", mode)
		}
		lso0 = num(c, "driver", "TxLSO")
		t.Logf("%s: guest->peer %.1f Mbit/s, peer->guest %.1f Mbit/s (wall); LSO WQEs so far %v", mode,
			float64(n*8)/el.Seconds()/1e6, float64(n*8)/r.Wall.Seconds()/1e6, lso0)
	}
	// ENET1's /stats reports the ConnectX too.
	if s, err := m.Stats(); err != nil || num(s, "nic", "connectx", "driver", "TxLSO") < lso0 {
		t.Errorf("ENET1 /stats nic.connectx: %v %v", err, s["nic"])
	}

	// The peer goes away and comes back.
	peer.Disconnect()
	time.Sleep(200 * time.Millisecond)
	if err := peer.Reconnect(sim.Addr); err != nil {
		t.Fatal(err)
	}
	if _, err := cx.Receive(1<<20, 2*time.Minute); err != nil {
		t.Fatalf("after the peer reconnected: %v", err)
	}
	// A frame that is not IP (garbage with a valid length) reaches the
	// guest and is dropped there; a runt is counted and dropped by the
	// card's MAC; a length beyond the framing limit breaks the framing:
	// the model closes the connection and the peer reconnects.
	junk := make([]byte, 60)
	copy(junk, []byte{0x02, 0xC7, 0, 0, 0, 1, 2, 0x70, 0x65, 0x65, 0x72, 1, 0x88, 0xB5})
	if err := peer.WriteFrame(junk); err != nil {
		t.Fatal(err)
	}
	if err := peer.WriteRaw([]byte{0, 0, 0, 5, 1, 2, 3, 4, 5}); err != nil {
		t.Fatal(err)
	}
	if err := peer.WriteRaw([]byte{0, 1, 0x10, 1}); err != nil { // 69633: QEMU's NET_BUFSIZE + 1
		t.Fatal(err)
	}
	for i := 0; i < 100 && !strings.Contains(sim.Output(), "malformed frame length 69633"); i++ {
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.Contains(sim.Output(), "malformed frame length 69633") {
		t.Fatalf("malformed framing not reported:\n%s", sim.Output())
	}
	if err := peer.Reconnect(sim.Addr); err != nil {
		t.Fatal(err)
	}
	if r, err := cx.Send(1<<20, 2*time.Minute); err != nil || r.Bytes != 1<<20 {
		t.Fatalf("after malformed frames: %+v %v", r, err)
	}
	if v := sim.Violations(); len(v) != 0 {
		t.Fatalf("tamanic-cxsim reported:\n%s", strings.Join(v, "\n"))
	}
	final := cxStats(t, cx)

	// The model's counters agree with the driver's.
	out, err := sim.Stop()
	if err != nil {
		t.Fatalf("%v\n%s", err, sim.Output())
	}
	var st struct {
		Model map[string]float64 `json:"model"`
		Sim   map[string]float64 `json:"sim"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("STATS %q: %v", out, err)
	}
	t.Logf("cxsim: %s", out)
	if st.Sim["violations"] != 0 || st.Sim["wire_malformed"] != 1 || st.Sim["wire_runts"] != 1 || st.Sim["peers"] < 3 || st.Model["TxWQEErrors"] != 0 {
		t.Errorf("cxsim counters: %v", st)
	}
	if drv := num(final, "driver", "TxLSO"); st.Model["TxLSO"] != drv {
		t.Errorf("model executed %v LSO WQEs, the driver posted %v", st.Model["TxLSO"], drv)
	}
	if drv := num(final, "driver", "RxPackets"); st.Model["RxFrames"] < drv {
		t.Errorf("model delivered %v frames, the driver received %v", st.Model["RxFrames"], drv)
	}
	// Every frame the model sent was written, had no peer, failed, or was
	// dropped on a full transmit queue (a peer reading slower than the
	// card sends: tamanic-cxsim queues 256 per peer and never blocks the
	// card); at most a queue's worth per peer may still wait to be written.
	if d := st.Model["TxFrames"] - (st.Sim["wire_tx_frames"] + st.Sim["wire_tx_no_peer"] + st.Sim["wire_tx_errors"] + st.Sim["wire_tx_queue_full"]); d < 0 || d > 256*st.Sim["peers"] {
		t.Errorf("model sent %v frames, the wire took %v", st.Model["TxFrames"], st.Sim)
	}
}

// TestConnectXCosimModelKilled: the model process dies in the middle of a
// transfer. The firmware keeps running: /stats shows the ConnectX down
// (health counter stalled, link down) within a second or so; 6 s without
// the counter moving, the firmware asks the card a command, which times
// out (5 s), and declares it failed (connectx.NIC.Fail): the sends the
// guest's source connection had put into the dead card come back to the
// stack instead of staying held for ever. ENET1 serves throughout.
func TestConnectXCosimModelKilled(t *testing.T) {
	m, sim, peer := cosim(t)
	cx := peer.Ports(CXGuest)
	done := make(chan error, 1)
	go func() { _, err := cx.Receive(256<<20, 6*time.Second); done <- err }()
	time.Sleep(time.Second)
	sim.Kill()
	if err := <-done; err == nil {
		t.Fatal("a 256 MiB transfer completed although the model was killed")
	}
	// state waits until nic.connectx's health is one of want, with the
	// link down.
	state := func(within time.Duration, want ...string) map[string]any {
		t.Helper()
		var c map[string]any
		for end := time.Now().Add(within); ; time.Sleep(100 * time.Millisecond) {
			s, err := m.Stats()
			if err != nil {
				t.Fatalf("ENET1 /stats after the model died: %v", err)
			}
			c, _ = s["nic"].(map[string]any)["connectx"].(map[string]any)
			if h, _ := c["health"].(string); slices.Contains(want, h) || time.Now().After(end) {
				break
			}
		}
		if h, _ := c["health"].(string); !slices.Contains(want, h) || c["link"] != false {
			t.Fatalf("nic.connectx after the model died, want health %v: %v\nconsole:\n%s", want, c, m.Console())
		}
		return c
	}
	// The transfer ran on for seconds after the kill, so the card may
	// already be past stalled: either state has the link down.
	state(5*time.Second, "stalled", "failed")
	if !strings.Contains(m.Console(), "CONNECTX health=stalled") {
		t.Errorf("no CONNECTX health=stalled line:\n%s", m.Console())
	}
	if _, err := m.Receive(4<<20, time.Minute); err != nil {
		t.Fatalf("ENET1 after the model died: %v", err)
	}
	c := state(20*time.Second, "failed")
	if !strings.Contains(m.Console(), "CONNECTX health=failed") {
		t.Errorf("no CONNECTX health=failed line:\n%s", m.Console())
	}
	if e, _ := c["error"].(string); !strings.Contains(e, "health counter") || !strings.Contains(e, "timed out") {
		t.Errorf("nic.connectx.error %q", e)
	}
	// The guest's sends into the dead card (the retransmissions included)
	// come back with an error: none stays held, and new ones fail at once.
	for end := time.Now().Add(5 * time.Second); num(c, "endpoint", "TxHeld") != 0 && time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		c = cxStats(t, &m.Ports)
	}
	if held := num(c, "endpoint", "TxHeld"); held != 0 {
		t.Fatalf("%v sends still held by the failed card: nic.connectx %v", held, c)
	}
	if num(c, "driver", "TxErrors") < 1 {
		t.Fatalf("no send completed with an error when the card failed: nic.connectx %v", c)
	}
	if _, err := m.Receive(4<<20, time.Minute); err != nil {
		t.Fatalf("ENET1 after the card failed: %v", err)
	}
}

// TestConnectXNoCard: without a ConnectX or ivshmem function the firmware
// says so in one line and serves on ENET1.
func TestConnectXNoCard(t *testing.T) {
	elf := firmware(t, "mcimx7d")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	m, err := Boot(ctx, Options{ELF: elf, Board: "mcimx7d", E1000E: true})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Stop()
	if c := strings.Count(m.Console(), "CONNECTX"); c != 1 || !strings.Contains(m.Console(), "CONNECTX none:") {
		t.Fatalf("console:\n%s", m.Console())
	}
	if s, err := m.Stats(); err != nil || s["nic"].(map[string]any)["connectx"] != nil {
		t.Fatalf("/stats: %v %v", err, s)
	}
	if _, err := m.Receive(1<<20, time.Minute); err != nil {
		t.Fatal(err)
	}
}

// TestConnectXCosimModelLate: QEMU starts first (creating both files) and
// the model a second later; the firmware waits for the init segment and
// brings the ConnectX up.
func TestConnectXCosimModelLate(t *testing.T) {
	elf := firmware(t, "mcimx7d", CosimXFlags...)
	root, _ := filepath.Abs("..")
	dir, err := tempDir()
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bin, err := BuildCXSim(ctx, root, dir)
	if err != nil {
		t.Fatal(err)
	}
	type booted struct {
		m   *Machine
		err error
	}
	ch := make(chan booted, 1)
	go func() {
		m, err := Boot(ctx, Options{ELF: elf, Board: "mcimx7d", Args: CosimArgs(dir)})
		ch <- booted{m, err}
	}()
	time.Sleep(time.Second)
	sim, err := StartCXSim(bin, dir)
	b := <-ch
	if b.m != nil {
		defer b.m.Stop()
	}
	if err != nil {
		t.Fatal(err)
	}
	defer sim.Kill()
	if b.err != nil {
		t.Fatal(b.err)
	}
	if !strings.Contains(b.m.Console(), "CONNECTX ip="+CXGuest+"/24") {
		t.Fatalf("console:\n%s\ncxsim:\n%s", b.m.Console(), sim.Output())
	}
	if v := sim.Violations(); len(v) != 0 {
		t.Fatalf("violations:\n%s", strings.Join(v, "\n"))
	}
}

// TestCosimScriptArgs runs scripts/cosim.sh (make cosim) with stand-ins
// for qemu-system-arm and tamanic-cxsim that record their arguments, and
// checks its QEMU command line against the one Boot builds for the mcimx7d
// board with CosimArgs: the same arguments in the same order, up to the
// host port numbers and the shared files' directory. A script that drifts
// from Boot (the ENET1 user network without dhcpstart=10.0.0.1, so slirp
// leases 10.0.0.15 and the forwards to 10.0.0.1 reach nothing) fails here.
func TestCosimScriptArgs(t *testing.T) {
	bin := t.TempDir()
	argsFile := filepath.Join(bin, "args")
	fakeQEMU := "#!/bin/sh\nprintf '%s\\n' \"$@\" >\"" + argsFile + "\"\necho READY fake\nexec sleep 1\n"
	fakeSim := "#!/bin/sh\necho CXSIM READY 127.0.0.1:1\nexec sleep 30\n"
	for name, s := range map[string]string{"qemu-system-arm": fakeQEMU, "tamanic-cxsim": fakeSim} {
		if err := os.WriteFile(filepath.Join(bin, name), []byte(s), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))

	dir := t.TempDir()
	m, err := Boot(context.Background(), Options{ELF: "FW.elf", Board: "mcimx7d", Args: CosimArgs(dir)})
	if err != nil {
		t.Fatal(err)
	}
	m.Stop()
	want := normalizeArgs(m.Args, dir)

	root, _ := filepath.Abs("..")
	cmd := exec.Command("sh", filepath.Join(root, "scripts", "cosim.sh"), "FW.elf", filepath.Join(bin, "tamanic-cxsim"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("cosim.sh: %v\n%s", err, out)
	}
	b, err := os.ReadFile(argsFile)
	if err != nil {
		t.Fatalf("cosim.sh did not start qemu-system-arm: %v\n%s", err, out)
	}
	got := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	// The script's shared files are in a directory it made: find it from
	// its guest RAM file.
	sdir := ""
	for _, a := range got {
		if i := strings.Index(a, "mem-path="); i >= 0 && strings.HasSuffix(a, "/ram,share=on") {
			sdir = filepath.Dir(strings.TrimSuffix(a[i+len("mem-path="):], ",share=on"))
		}
	}
	if sdir == "" {
		t.Fatalf("cosim.sh's QEMU has no guest RAM file: %q", got)
	}
	if _, err := os.Stat(sdir); err == nil {
		t.Errorf("cosim.sh left its directory %s behind", sdir)
	}
	if g := normalizeArgs(got, sdir); !slices.Equal(g, want) {
		t.Errorf("cosim.sh's QEMU arguments differ from Boot's:\n got %q\nwant %q", g, want)
	}
	if !strings.Contains(string(out), "curl http://127.0.0.1:8080/stats") {
		t.Errorf("cosim.sh does not print the /stats address:\n%s", out)
	}
}

// normalizeArgs replaces the host port numbers of hostfwd forwards and the
// shared files' directory dir in a QEMU command line.
func normalizeArgs(args []string, dir string) []string {
	port := regexp.MustCompile(`127\.0\.0\.1:[0-9]+-`)
	var n []string
	for _, a := range args {
		a = port.ReplaceAllString(a, "127.0.0.1:PORT-")
		n = append(n, strings.ReplaceAll(a, dir, "DIR"))
	}
	return n
}

// TestMakefileCXIP: make firmware passes CX_IP to the firmware's CXIP
// (the ConnectX interface's address, issue 20), as it passes IP and
// GATEWAY to ENET1's, and passes nothing without it (the firmware's
// default, DHCP, stands).
func TestMakefileCXIP(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make is not installed")
	}
	root, _ := filepath.Abs("..")
	for _, c := range []struct{ arg, want string }{
		{"CX_IP=10.0.9.1/24", "-X main.CXIP=10.0.9.1/24"},
		{"IP=10.0.0.1/24", ""},
	} {
		cmd := exec.Command("make", "-n", "-C", root, "firmware", "BOARD=mcimx7d", c.arg)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("make -n firmware %s: %v\n%s", c.arg, err, out)
		}
		if c.want != "" && !strings.Contains(string(out), c.want) {
			t.Errorf("make firmware %s: no %q in\n%s", c.arg, c.want, out)
		}
		if c.want == "" && strings.Contains(string(out), "main.CXIP") {
			t.Errorf("make firmware %s sets CXIP:\n%s", c.arg, out)
		}
	}
}

// cxSelfTest runs the ConnectX's self-test at run time (POST /selftest
// on its own services, with the control token) while the endpoint is up:
// it must pass, and /stats must show it as the last run.
func cxSelfTest(t *testing.T, cx *Ports) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, fmt.Sprintf("http://127.0.0.1:%d/selftest", cx.HTTPPort), nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+ControlToken)
	resp, err := cx.client().Do(req)
	if err != nil {
		t.Fatalf("POST /selftest: %v", err)
	}
	defer resp.Body.Close()
	var rep struct {
		When     string           `json:"when"`
		Failures int              `json:"failures"`
		Results  []map[string]any `json:"results"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&rep); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /selftest: %s %v", resp.Status, err)
	}
	if rep.Failures != 0 || len(rep.Results) != 2 || rep.When != "run time" {
		t.Errorf("POST /selftest: %+v", rep)
	}
	st, ok := cxStats(t, cx)["selftest"].(map[string]any)
	if !ok || st["when"] != "run time" || st["failures"] != 0.0 {
		t.Errorf("/stats nic.selftest after POST /selftest: %v", st)
	}
}
