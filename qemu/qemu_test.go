package qemu

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

var fw struct {
	mu   sync.Mutex
	elfs map[string]string
	errs map[string]error
}

// firmware builds the firmware of board once per test binary, or skips
// the test with one line saying what is missing. xflags are linker -X
// settings (a variant is built once per distinct set).
func firmware(t *testing.T, board string, xflags ...string) string {
	t.Helper()
	if why := Missing(); why != "" {
		t.Skipf("skipping QEMU tests: %s", why)
	}
	fw.mu.Lock()
	defer fw.mu.Unlock()
	if fw.elfs == nil {
		fw.elfs, fw.errs = map[string]string{}, map[string]error{}
	}
	key := strings.Join(append([]string{board}, xflags...), " ")
	if _, done := fw.elfs[key]; !done {
		dir, err := os.MkdirTemp("", "tamanic-fw")
		if err == nil {
			root, _ := filepath.Abs("..")
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			fw.elfs[key], err = Build(ctx, root, dir, board, xflags...)
			cancel()
		}
		fw.errs[key] = err
	}
	if err := fw.errs[key]; err != nil {
		t.Fatal(err)
	}
	return fw.elfs[key]
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

// boards lists the boards the QEMU tests run on, with the devices their
// end-to-end boot adds: the i.MX7D's boots with QEMU's e1000e (Intel
// 82574L) behind the PCIe root port, which the firmware enumerates.
var boards = []struct {
	name    string
	devices []string
}{
	{"mx6ullevk", nil},
	{"mcimx7d", []string{"e1000e,bus=dw-pcie"}},
	{"sabrelite", nil},
	// The USB armory's network is ENET2: ENET1 is on an isolated user
	// network, so the transfers pass only through ENET2.
	{"usbarmory", nil},
}

// TestFirmwareEndToEnd runs the same transfers on every board's firmware.
func TestFirmwareEndToEnd(t *testing.T) {
	for _, b := range boards {
		t.Run(b.name, func(t *testing.T) { endToEnd(t, b.name, b.devices) })
	}
}

func endToEnd(t *testing.T, board string, devices []string) {
	elf := firmware(t, board)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var console bytes.Buffer
	m, err := Boot(ctx, Options{ELF: elf, Board: board, Devices: devices, Console: &console})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Stop()
	t.Logf("booted in %v: %s", m.Boot.Round(time.Millisecond), m.Ready)
	t.Logf("command: %s", m.CommandLine())
	// QEMU's ENET has no loopback and no MIB (imx_fec.c), and its PHY
	// keeps BMCR's loopback bit but loops nothing: the boot self-test
	// must say so for every mode, not pass. A board whose driver took a
	// PHY loops at the PHY (loop=phy), one without at the MAC.
	loop := "loop=phy"
	if strings.Contains(m.Console(), "link not managed") {
		loop = "loop=mac"
	}
	for _, mode := range []string{"bounce", "sg", "tso"} {
		re := regexp.MustCompile(`SELFTEST enet mode=` + mode + ` loopback unsupported here .*` + loop)
		if !re.MatchString(m.Console()) {
			t.Errorf("console has no %q line:\n%s", re, m.Console())
		}
	}
	// GET /debug/regs: the ENET's and the PHY's registers with the token,
	// 401 without it.
	// A board whose ENET reaches no PHY under QEMU (the USB armory's
	// ENET2: "link not managed") dumps no PHY and says why.
	phyLine := " PHYIDR1 "
	if strings.Contains(m.Console(), "link not managed") {
		phyLine = "phy error "
	}
	if code, body, err := m.DebugRegs("Bearer " + ControlToken); err != nil || code != 200 ||
		!strings.Contains(body, "enet ECR ") || !strings.Contains(body, phyLine) {
		t.Errorf("/debug/regs: %d %v\n%s", code, err, body)
	}
	if code, _, err := m.DebugRegs(""); err != nil || code != 401 {
		t.Errorf("/debug/regs without the token: %d %v, want 401", code, err)
	}
	switch board {
	case "mcimx7d":
		checkE1000e(t, m)
	case "sabrelite":
		checkSabreLite(t, m)
	case "usbarmory":
		if !strings.Contains(m.Console(), "BOARD model=emulated enet=2") {
			t.Errorf("console has no BOARD line for ENET2:\n%s", m.Console())
		}
	}
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
	// What the boot self-test sent and received is the driver's, not the
	// stack's (nic.selftest.counts).
	self := func(k string) float64 { return num(s, "nic", "selftest", "counts", k) }
	drvTx := func(k string) float64 {
		return num(s, "nic", "driver", "Tx", k) - map[string]float64{"Frames": self("tx_frames"),
			"GSOSegments": self("tx_gso_segments"), "GSOPackets": self("tx_gso_packets")}[k]
	}
	drvRx := func(k string) float64 {
		return num(s, "nic", "driver", "Rx", k) - map[string]float64{"Frames": self("rx_frames"), "Skipped": self("rx_skipped")}[k]
	}
	ep := func(k string) float64 { return num(s, "nic", "endpoint", k) }
	if drvTx("Frames")-drvTx("GSOSegments") != ep("TxPackets")-ep("TxGSOPackets") || drvTx("GSOPackets") != ep("TxGSOPackets") {
		t.Fatalf("TX counters disagree: driver %v frames (%v GSO segments of %v packets), endpoint %v packets (%v GSO)",
			drvTx("Frames"), drvTx("GSOSegments"), drvTx("GSOPackets"), ep("TxPackets"), ep("TxGSOPackets"))
	}
	// The ACK filter drops superseded ACKs where they lie in the ENET's
	// ring (Peek/DropNext): the driver counts them as Skipped, not as
	// frames handed up, and the endpoint as filtered.
	if drvRx("Frames") != ep("RxPackets")+ep("RxUnknownType")+ep("RxRunts")+ep("RxBadCsum")+ep("RxFragDrops") ||
		drvRx("Skipped") != ep("RxACKsFiltered") {
		t.Fatalf("RX counters disagree: driver %v frames and %v dropped in place, endpoint %v packets and %v ACKs filtered",
			drvRx("Frames"), drvRx("Skipped"), ep("RxPackets"), ep("RxACKsFiltered"))
	}
	// The firmware filters ACKs: slirp acknowledges every segment or two,
	// and the guest sends in bursts, so ACKs queue and most are superseded.
	if ep("RxACKsFiltered") == 0 {
		t.Errorf("no ACK filtered in %v received frames", drvRx("Frames"))
	}
	if drvRx("Bytes") < 3*n || drvTx("Bytes") < 3*n {
		t.Fatalf("byte counters too small: rx %v tx %v", drvRx("Bytes"), drvTx("Bytes"))
	}
	for _, k := range []string{"CRC", "Overrun", "TooLong", "Truncated", "NonOctet", "MACError", "MultiBuffer", "Runt", "NoBuffer"} {
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

// pcieDevices returns /stats' nic.pcie report.
// checkSabreLite checks the board state the i.MX6Q firmware reports:
// QEMU has no PL310 (CACHE_ID reads 0, so the L2 stays off), its global
// timer counts at 100 MHz, and its PHY autonegotiates 100 Mb/s full
// duplex (it is not a gigabit PHY). The driver runs with the i.MX6Q's
// capabilities: gigabit and 16-byte TX alignment (ERR006358's re-kick is
// package fec's on every SoC).
func checkSabreLite(t *testing.T, m *Machine) {
	t.Helper()
	s, err := m.Stats()
	if err != nil {
		t.Fatal(err)
	}
	nic, _ := s["nic"].(map[string]any)
	b, ok := nic["board"].(map[string]any)
	if !ok {
		t.Fatalf("/stats has no nic.board: %v", s["nic"])
	}
	if b["l2"] != false || num(b, "timer_hz") != 100e6 || b["link"] != "100 Mb/s full duplex" || b["phy_error"] != nil || num(b, "phy_id") <= 0 ||
		b["caps"] != "i.MX6Q/DL" || !strings.Contains(b["quirks"].(string), "gbit") || num(b, "tx_align") != 16 {
		t.Fatalf("board state %v\nconsole:\n%s", b, m.Console())
	}
	if !strings.Contains(m.Console(), "BOARD l2=false timer_hz=100000000") {
		t.Errorf("console has no BOARD line:\n%s", m.Console())
	}
	// QEMU's sabrelite has no PCIe: the link times out, one line says
	// there is no ConnectX, and /stats reports the link's error.
	if c := strings.Count(m.Console(), "CONNECTX"); c != 1 || !strings.Contains(m.Console(), "CONNECTX none: no PCIe link (pcie: i.MX6Q link gen1:") {
		t.Errorf("want one CONNECTX none line for the untrained link:\n%s", m.Console())
	}
	p, _ := nic["pcie"].(map[string]any)
	if e, _ := p["error"].(string); p == nil || p["link_up"] != false || !strings.Contains(e, "link did not come up") || nic["connectx"] != nil {
		t.Errorf("/stats nic.pcie %v, nic.connectx %v", p, nic["connectx"])
	}
}

func pcieReport(t *testing.T, m *Machine) map[string]any {
	t.Helper()
	s, err := m.Stats()
	if err != nil {
		t.Fatal(err)
	}
	nic, _ := s["nic"].(map[string]any)
	rep, ok := nic["pcie"].(map[string]any)
	if !ok {
		t.Fatalf("/stats has no nic.pcie: %v", s["nic"])
	}
	return rep
}

// checkE1000e: the i.MX7D firmware found QEMU's e1000e at 01:00.0 with
// its IDs, BAR0 (128 KiB) inside the 255 MiB window, and read its STATUS
// register through BAR0 (0x00080283 under QEMU 7.2, measured by a
// hand-assembled guest in docs connectx-pcie.md §7).
func checkE1000e(t *testing.T, m *Machine) {
	t.Helper()
	rep := pcieReport(t, m)
	devs, _ := rep["devices"].([]any)
	if rep["link_up"] != true || len(devs) != 1 {
		t.Fatalf("PCIe: %v\nconsole:\n%s", rep, m.Console())
	}
	d := devs[0].(map[string]any)
	if d["bdf"] != "01:00.0" || num(d, "vendor") != 0x8086 || num(d, "device") != 0x10D3 || num(d, "class") != 0x020000 {
		t.Fatalf("PCIe device %v", d)
	}
	bars, _ := d["bars"].([]any)
	if len(bars) == 0 {
		t.Fatalf("no BARs: %v", d)
	}
	b0 := bars[0].(map[string]any)
	addr, size := num(b0, "addr"), num(b0, "size")
	if num(b0, "index") != 0 || b0["assigned"] != true || size != 128<<10 || addr < 0x4000_0000 || addr+size > 0x4FF0_0000 {
		t.Fatalf("BAR0 %v outside the window 0x40000000-0x4FEFFFFF", b0)
	}
	regs, _ := d["bar0"].([]any)
	if len(regs) != 2 || regs[1].(float64) != 0x0008_0283 || regs[0].(float64) == 0 || regs[0].(float64) == 0xFFFF_FFFF {
		t.Fatalf("BAR0 CTRL/STATUS read through the window: %v", regs)
	}
	if !strings.Contains(m.Console(), "PCIE 01:00.0 8086:10d3") {
		t.Errorf("console does not list the device:\n%s", m.Console())
	}
	// GET /debug/regs on the 82574L's interface: its registers (STATUS
	// with link up, bit 1), its PHY's and the root port's.
	if m.E1000E != nil {
		code, body, err := m.E1000E.DebugRegs("Bearer " + ControlToken)
		if err != nil || code != 200 || !strings.Contains(body, "e1000e STATUS ") || !strings.Contains(body, "e1000e-phy PHYIDR1 ") ||
			!strings.Contains(body, "pcie PL_DEBUG1 ") {
			t.Errorf("e1000e /debug/regs: %d %v\n%s", code, err, body)
		}
	}
}

// TestMCIMX7DEmptyPCIeBus: without an endpoint the i.MX7D firmware still
// boots, the link is up (QEMU always reports it) and the bus is empty.
func TestMCIMX7DEmptyPCIeBus(t *testing.T) {
	elf := firmware(t, "mcimx7d")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	m, err := Boot(ctx, Options{ELF: elf, Board: "mcimx7d"})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Stop()
	t.Logf("command: %s", m.CommandLine())
	rep := pcieReport(t, m)
	devs, ok := rep["devices"].([]any)
	if rep["link_up"] != true || !ok || len(devs) != 0 || rep["error"] != nil {
		t.Fatalf("PCIe without an endpoint: %v", rep)
	}
	if !strings.Contains(m.Console(), "PCIE link_up=true gen=1 width=1 devices=0") {
		t.Errorf("console:\n%s", m.Console())
	}
}

// TestE1000EEndToEnd: on the i.MX7D, QEMU's e1000e (Intel 82574L) on its
// own user network is the firmware's second interface. TCP 16 MiB each
// way with SHA-256 integrity with hardware TSO on (the guest's GSO
// packets must reach the 82574L as multi-segment TSO contexts), UDP echo
// with fragmentation, and its /stats counters add up.
//
// The second run builds the firmware with the 82574L's interrupt as an
// MSI through the DesignWare receiver instead of INTA, and moves 4 MiB
// each way.
func TestE1000EEndToEnd(t *testing.T) {
	t.Parallel()
	t.Run("intx", func(t *testing.T) { e1000eEndToEnd(t, 16<<20, "intx") })
	t.Run("msi", func(t *testing.T) { e1000eEndToEnd(t, 4<<20, "msi", "main.E1000EIRQ=msi") })
}

func e1000eEndToEnd(t *testing.T, n int64, irq string, xflags ...string) {
	elf := firmware(t, "mcimx7d", xflags...)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	m, err := Boot(ctx, Options{ELF: elf, Board: "mcimx7d", E1000E: true})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Stop()
	t.Logf("command: %s", m.CommandLine())
	if !strings.Contains(m.Console(), "E1000E ip="+E1000EGuest+"/24") || !strings.Contains(m.Console(), "irq="+irq) {
		t.Fatalf("no E1000E line with irq=%s on the console:\n%s", irq, m.Console())
	}
	// The 82574L's boot self-test: QEMU 7.2's e1000e loops back (RCTL.LBM,
	// e1000e_tx_pkt_send), so sg must pass; its TSO leaves as IP
	// fragments (net_tx_pkt_do_sw_fragmentation), which the test must
	// call unsupported. Never absent, never a FAIL.
	for _, want := range []string{"SELFTEST e1000e mode=sg frames=19 ok ", "SELFTEST e1000e mode=tso "} {
		i := strings.Index(m.Console(), want)
		line, _, _ := strings.Cut(m.Console()[max(i, 0):], "\n")
		if i < 0 || !strings.Contains(line, " ok ") && !strings.Contains(line, " unsupported: ") {
			t.Errorf("console has no %q line saying ok or unsupported:\n%s", want, m.Console())
		}
		t.Logf("%s", line)
	}
	e := m.E1000E
	if err := e.SetMode("tso", 0); err != nil {
		t.Fatalf("%v\nconsole:\n%s", err, m.Console())
	}
	el, err := e.Receive(n, 2*time.Minute)
	if err != nil {
		t.Fatalf("guest->host over the e1000e: %v\nconsole:\n%s", err, m.Console())
	}
	r, err := e.Send(n, 2*time.Minute)
	if err != nil || r.Bytes != n {
		t.Fatalf("host->guest over the e1000e: %+v %v\nconsole:\n%s", r, err, m.Console())
	}
	t.Logf("e1000e tso: guest->host %.1f Mbit/s, host->guest %.1f Mbit/s (wall)",
		float64(n*8)/el.Seconds()/1e6, float64(n*8)/r.Wall.Seconds()/1e6)
	s, err := e.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if last, _ := s["last_sink"].(map[string]any); last["sha256"] != PatternSHA256(n) {
		t.Fatalf("host->guest: guest received data with SHA-256 %v", last["sha256"])
	}
	if s["tx_mode"] != "tso" {
		t.Fatalf("/stats says mode %v", s["tx_mode"])
	}
	// As on ENET1: with only the closed connections' TCP timers pending
	// the guest sleeps in WFI, not spins.
	s0 := s
	time.Sleep(time.Second)
	if s, err = e.Stats(); err != nil {
		t.Fatal(err)
	}
	up, idle := num(s, "uptime_ns")-num(s0, "uptime_ns"), num(s, "idle_ns")-num(s0, "idle_ns")
	t.Logf("idle with TCP timers pending: %.1f%% of %.0f ms", 100*idle/up, up/1e6)
	if idle < up/2 {
		t.Errorf("guest idle only %.0f of %.0f ms with only timers pending: the idle governor spins", idle/1e6, up/1e6)
	}
	for _, size := range []int{1, 100, 1472, 1473, 4000, 8192} {
		d := bytes.Repeat([]byte{byte(size)}, size)
		got, err := e.Echo(d, 5*time.Second)
		if err != nil || !bytes.Equal(got, d) {
			t.Fatalf("UDP echo of %d bytes over the e1000e: %d bytes back, %v", size, len(got), err)
		}
	}
	s, err = e.Stats()
	if err != nil {
		t.Fatal(err)
	}
	// What the boot self-test moved is the driver's, not the stack's
	// (nic.selftest.counts).
	self := func(k string) float64 { return num(s, "nic", "selftest", "counts", k) }
	drvTx := func(k string) float64 {
		return num(s, "nic", "driver", "Tx", k) - map[string]float64{"Frames": self("tx_frames"),
			"GSOPackets": self("tx_gso_packets"), "GSOSegs": self("tx_gso_segs")}[k]
	}
	drvRx := func(k string) float64 {
		return num(s, "nic", "driver", "Rx", k) - map[string]float64{"Frames": self("rx_frames"), "Bytes": self("rx_bytes"),
			"CsumBad": self("rx_csum_bad"), "Errors": self("rx_errors")}[k]
	}
	ep := func(k string) float64 { return num(s, "nic", "endpoint", k) }
	hw := func(k string) float64 { return num(s, "nic", "hw", k) }
	if num(s, "nic", "selftest", "failures") != 0 {
		t.Errorf("e1000e self-test failures: %v", s["nic"].(map[string]any)["selftest"])
	}
	t.Logf("e1000e driver tx %v rx %v", s["nic"].(map[string]any)["driver"], s["nic"].(map[string]any)["hw"])
	if drvTx("Frames") != ep("TxPackets") || drvTx("GSOPackets") != ep("TxGSOPackets") {
		t.Errorf("TX counters disagree: driver %v frames (%v GSO), endpoint %v packets (%v GSO)",
			drvTx("Frames"), drvTx("GSOPackets"), ep("TxPackets"), ep("TxGSOPackets"))
	}
	// The 82574L hands every frame up (no drop in place): the endpoint's
	// ACK filter is part of the driver's frame count.
	if drvRx("Frames") != ep("RxPackets")+ep("RxUnknownType")+ep("RxRunts")+ep("RxBadCsum")+ep("RxFragDrops")+ep("RxACKsFiltered") {
		t.Errorf("RX counters disagree: driver %v frames, endpoint %+v", drvRx("Frames"), s["nic"].(map[string]any)["endpoint"])
	}
	if ep("RxACKsFiltered") == 0 {
		t.Errorf("no ACK filtered in %v received frames", drvRx("Frames"))
	}
	// Hardware TSO carried the data: GSO packets of several segments each.
	if drvTx("GSOSegs") < 2*drvTx("GSOPackets") || drvTx("GSOPackets") == 0 {
		t.Errorf("TSO: %v GSO packets became %v segments", drvTx("GSOPackets"), drvTx("GSOSegs"))
	}
	// n bytes moved each way once (ENET1's 3n is n per TX mode, three
	// modes); the statistics registers count them too.
	if drvRx("Bytes") < float64(n) || drvTx("Bytes") < float64(n) || hw("GoodRxOctets") < float64(n) || hw("GoodTxOctets") < float64(n) {
		t.Errorf("byte counters too small: rx %v tx %v, hw %v", drvRx("Bytes"), drvTx("Bytes"), s["nic"].(map[string]any)["hw"])
	}
	for _, k := range []string{"Errors", "Multi", "NoBuffer", "CsumBad"} {
		if drvRx(k) != 0 {
			t.Errorf("driver RX %s = %v", k, drvRx(k))
		}
	}
	for _, k := range []string{"CRCErrors", "AlignErrors", "RxErrors", "LengthErrors"} {
		if hw(k) != 0 {
			t.Errorf("82574L %s = %v", k, hw(k))
		}
	}
	if drvTx("Errors") != 0 || ep("TxErrors") != 0 {
		t.Errorf("TX errors: %v", s["nic"])
	}
	if up, idle := num(s, "uptime_ns"), num(s, "idle_ns"); idle <= 0 || idle >= up {
		t.Errorf("idle %v of uptime %v", idle, up)
	}
	if drvRx("CsumL4") == 0 {
		t.Errorf("no TCP/UDP checksum verified by the e1000e: %v", s["nic"])
	}
	if num(s, "nic", "irqs") == 0 {
		t.Errorf("no e1000e interrupt serviced")
	}
	// ENET1's /stats reports the e1000e too.
	s1, err := m.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if num(s1, "nic", "e1000e", "driver", "Tx", "Frames") < drvTx("Frames") {
		t.Errorf("ENET1 /stats nic.e1000e: %v", s1["nic"].(map[string]any)["e1000e"])
	}
	if strings.Contains(m.Console(), "PANIC") {
		t.Fatalf("guest panicked:\n%s", m.Console())
	}
}

// TestE1000ENetdevNeedsE1000E: a netdev for the e1000e without the
// e1000e is refused before anything starts (it was silently dropped).
func TestE1000ENetdevNeedsE1000E(t *testing.T) {
	if _, err := Boot(context.Background(), Options{Board: "mcimx7d", E1000ENetdev: "socket,udp=127.0.0.1:1,localaddr=127.0.0.1:2"}); err == nil || !strings.Contains(err.Error(), "E1000ENetdev without E1000E") {
		t.Fatalf("Boot: %v", err)
	}
}
