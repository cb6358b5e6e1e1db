package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/tamanic/tamanic/firmware/app"
	"github.com/tamanic/tamanic/qemu"
)

// testWire is a Wire with no socket or stack: enough for craft.
func testWire() *Wire {
	return &Wire{link: e1000eLink, guestMAC: tcpip.LinkAddress([]byte{0xe, 0x32, 0xd6, 0x88, 0xdd, 0xb9})}
}

// TestCraftChecksums: a crafted frame carries valid IPv4 and UDP
// checksums, its lengths, the id and sequence, at every size.
func TestCraftChecksums(t *testing.T) {
	w := testWire()
	buf := make([]byte, frameHeader+app.PPSMaxSize)
	for _, size := range append([]int{app.PPSHeader}, sizes...) {
		f := w.craft(buf, size, 0x1122334455667788, 42)
		if len(f) != frameHeader+size {
			t.Fatalf("%d B: frame of %d", size, len(f))
		}
		ip := header.IPv4(f[header.EthernetMinimumSize:])
		if !ip.IsValid(len(ip)) || !ip.IsChecksumValid() {
			t.Fatalf("%d B: IPv4 header invalid", size)
		}
		if ip.SourceAddress() != tcpip.AddrFrom4(e1000eLink.peer.As4()) || ip.DestinationAddress() != tcpip.AddrFrom4(e1000eLink.guest.As4()) {
			t.Fatalf("%d B: %v -> %v, want the wire's peer -> guest", size, ip.SourceAddress(), ip.DestinationAddress())
		}
		u := header.UDP(ip.Payload())
		if int(u.Length()) != header.UDPMinimumSize+size || u.DestinationPort() != app.PPSPort || u.SourcePort() != benchPort {
			t.Fatalf("%d B: UDP %d -> %d length %d", size, u.SourcePort(), u.DestinationPort(), u.Length())
		}
		if !u.IsChecksumValid(ip.SourceAddress(), ip.DestinationAddress(), checksum.Checksum(u.Payload(), 0)) {
			t.Fatalf("%d B: UDP checksum invalid", size)
		}
		if p := u.Payload(); binary.BigEndian.Uint64(p) != 0x1122334455667788 || binary.BigEndian.Uint64(p[8:]) != 42 {
			t.Fatalf("%d B: payload %x", size, p[:16])
		}
	}
}

// fromGuest is a frame as the guest's source sends it: from PPSPort to
// benchPort, payload p.
func fromGuest(p []byte, sport, dport uint16) []byte {
	f := make([]byte, frameHeader+len(p))
	header.Ethernet(f).Encode(&header.EthernetFields{SrcAddr: tcpip.LinkAddress([]byte{0xe, 0, 0, 0, 0, 1}), DstAddr: peerMAC, Type: header.IPv4ProtocolNumber})
	ip := header.IPv4(f[header.EthernetMinimumSize:])
	ip.Encode(&header.IPv4Fields{TotalLength: uint16(header.IPv4MinimumSize + header.UDPMinimumSize + len(p)), TTL: 64,
		Protocol: uint8(header.UDPProtocolNumber), SrcAddr: tcpip.AddrFrom4(enetLink.guest.As4()), DstAddr: tcpip.AddrFrom4(enetLink.peer.As4())})
	ip.SetChecksum(^ip.CalculateChecksum())
	u := header.UDP(ip[header.IPv4MinimumSize:])
	u.Encode(&header.UDPFields{SrcPort: sport, DstPort: dport, Length: uint16(header.UDPMinimumSize + len(p))})
	copy(u[header.UDPMinimumSize:], p)
	return f
}

// TestBenchPayload: the wire takes the source's datagrams (and nothing
// else) off the stack's path; a frame whose lengths do not hold is not
// taken.
func TestBenchPayload(t *testing.T) {
	p := make([]byte, 64)
	binary.BigEndian.PutUint64(p, 7)
	if got, ok, sumOK := benchPayload(fromGuest(p, app.PPSPort, benchPort)); !ok || !sumOK || len(got) != 64 {
		t.Fatalf("the source's datagram (no UDP checksum): %v %v, %d bytes", ok, sumOK, len(got))
	}
	// With its UDP checksum, then with either checksum broken (review,
	// class 5: counted as received, a peer would have dropped it).
	withSum := func() []byte {
		f := fromGuest(p, app.PPSPort, benchPort)
		ip := header.IPv4(f[header.EthernetMinimumSize:])
		u := header.UDP(ip.Payload())
		xsum := header.PseudoHeaderChecksum(header.UDPProtocolNumber, ip.SourceAddress(), ip.DestinationAddress(), u.Length())
		u.SetChecksum(^u.CalculateChecksum(checksum.Checksum(u.Payload(), xsum)))
		return f
	}
	if _, ok, sumOK := benchPayload(withSum()); !ok || !sumOK {
		t.Fatalf("the source's datagram with its UDP checksum: %v %v", ok, sumOK)
	}
	for name, f := range map[string][]byte{
		"bad IPv4 checksum": func() []byte { f := withSum(); f[header.EthernetMinimumSize+10] ^= 1; return f }(),
		"bad UDP checksum":  func() []byte { f := withSum(); f[frameHeader-1] ^= 1; return f }(),
		"payload changed":   func() []byte { f := withSum(); f[len(f)-1] ^= 0x40; return f }(),
	} {
		if _, ok, sumOK := benchPayload(f); !ok || sumOK {
			t.Errorf("%s: taken %v, checksums held %v; want taken, not held", name, ok, sumOK)
		}
	}
	for name, f := range map[string][]byte{
		"other source port":  fromGuest(p, app.HTTPPort, benchPort),
		"other dest port":    fromGuest(p, app.PPSPort, benchPort+1),
		"truncated":          fromGuest(p, app.PPSPort, benchPort)[:frameHeader-1],
		"crafted to guest":   testWire().craft(make([]byte, 2048), 64, 7, 0),
		"UDP length > frame": func() []byte { f := fromGuest(p, app.PPSPort, benchPort); return f[:len(f)-10] }(),
		"fragment": func() []byte {
			f := fromGuest(p, app.PPSPort, benchPort)
			ip := header.IPv4(f[header.EthernetMinimumSize:])
			ip.SetFlagsFragmentOffset(header.IPv4FlagMoreFragments, 0)
			return f
		}(),
	} {
		if _, ok, _ := benchPayload(f); ok {
			t.Errorf("%s: taken as the benchmark's", name)
		}
	}
}

// FuzzBenchPayload: any frame is parsed without a panic, and a payload
// taken lies within the frame.
func FuzzBenchPayload(f *testing.F) {
	f.Add(fromGuest(make([]byte, 18), app.PPSPort, benchPort))
	f.Add(testWire().craft(make([]byte, 2048), 64, 1, 2))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, ok, _ := benchPayload(b)
		if ok && len(p) > len(b)-frameHeader {
			t.Fatalf("payload of %d from a frame of %d", len(p), len(b))
		}
		c := newSeqCounter(1, 100)
		c.add(p)
	})
}

// TestSeqCounterHostile: a sequence out of the session's range (the
// largest uint64 among them) is not counted and indexes nothing; a
// repeat counts once; another id, or a short payload, is another's.
func TestSeqCounterHostile(t *testing.T) {
	c := newSeqCounter(9, 100)
	d := func(id, seq uint64) []byte {
		b := make([]byte, 18)
		binary.BigEndian.PutUint64(b, id)
		binary.BigEndian.PutUint64(b[8:], seq)
		return b
	}
	for _, p := range [][]byte{d(9, 0), d(9, 99), d(9, 99), d(9, 100), d(9, 1<<63), d(9, ^uint64(0)), d(8, 1), d(9, 1)[:15]} {
		c.add(p)
	}
	if n, other := c.counts(); n != 2 || other != 6 {
		t.Fatalf("counted %d, others %d; want 2 and 6", n, other)
	}
	// A count past the service's own bound is clamped: no huge bitmap.
	if c := newSeqCounter(1, 1<<40); c.count != app.PPSMaxCount || len(c.seen) != app.PPSMaxCount/64 {
		t.Fatalf("clamped to %d, bitmap %d words", c.count, len(c.seen))
	}
}

func TestParseFlags(t *testing.T) {
	if _, err := parseSizes("18,64,1472"); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"15", "1473", "x", "18,,64"} {
		if _, err := parseSizes(bad); err == nil {
			t.Errorf("-sizes %q accepted", bad)
		}
	}
	c, err := parseConfigs("rx:tso:off,tx:sg:512")
	if err != nil || len(c) != 2 || c[0] != (config{"rx", "tso", -1}) || c[1] != (config{"tx", "sg", 512}) {
		t.Fatalf("%v %v", c, err)
	}
	for _, bad := range []string{"rx:tso", "up:tso:512", "rx:gso:512", "rx:tso:-5", "rx:tso:x"} {
		if _, err := parseConfigs(bad); err == nil {
			t.Errorf("-cfg %q accepted", bad)
		}
	}
}

// TestTrialVerdict: a trial passes only with nothing lost, no send
// error and (send) the source within 5% of the rate.
func TestTrialVerdict(t *testing.T) {
	for _, c := range []struct {
		t    trial
		dir  string
		want bool
	}{
		{trial{rate: 1000}, "tx", true},
		{trial{rate: 940}, "tx", false},
		{trial{rate: 940}, "rx", true},
		{trial{rate: 1000, lost: 1}, "rx", false},
		{trial{rate: 1000, errs: 1}, "tx", false},
	} {
		if got := c.t.ok(c.dir, 1000); got != c.want {
			t.Errorf("%+v %s: %v", c.t, c.dir, got)
		}
	}
}

// TestSmokeQEMU boots the firmware on the socket wire and runs one
// receive and one send trial of 64-byte datagrams at 500/s: every
// datagram is counted by sequence (a repeat fails a receive trial,
// sinkCounts; received+lost adds up by construction in both directions,
// lost being count less received), and one of three tries of each
// loses nothing (the shared host can drop a burst
// at QEMU's socket). The mx6ullevk's ENET1, the i.MX7D's ENET1 and its
// 82574L (its wire on its own subnet, its own control server), in
// parallel. Skipped
// in one line without QEMU and the TamaGo toolchain.
func TestSmokeQEMU(t *testing.T) {
	if why := qemu.Missing(); why != "" {
		t.Skipf("skipping the QEMU smoke test: %s", why)
	}
	if testing.Short() {
		t.Skip("skipping the QEMU smoke test in -short mode")
	}
	for _, c := range []struct{ board, nic string }{{"mx6ullevk", "enet"}, {"mcimx7d", "enet"}, {"mcimx7d", "e1000e"}} {
		t.Run(c.board+"-"+c.nic, func(t *testing.T) {
			t.Parallel()
			smoke(t, c.board, c.nic)
		})
	}
}

func smoke(t *testing.T, board, nic string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	root, _ := filepath.Abs("../../..")
	dir := t.TempDir()
	elf, err := qemu.BuildWith(ctx, root, dir, board, firmwareOptions(board))
	if err != nil {
		t.Fatal(err)
	}
	b, err := boot(ctx, elf, board, nic, "plain")
	if err != nil {
		t.Fatal(err)
	}
	defer b.close()
	var before hwCounts
	if nic == "e1000e" {
		before = e1000eHW(t, b)
	}
	tries := map[string]uint64{}
	for _, dir := range []string{"rx", "tx"} {
		var last trial
		ok := false
		for try := 0; try < 3 && !ok; try++ {
			tries[dir]++
			if dir == "rx" {
				last, err = b.rxTrial(64, 500, 200, nil, nil)
			} else {
				last, err = b.txTrial(64, 500, 200, 50*time.Millisecond, nil, nil)
			}
			if err != nil {
				t.Fatalf("%s: %v\n%s", dir, err, b.m.Console())
			}
			if last.received+last.lost != 200 {
				t.Fatalf("%s: received %d lost %d of 200", dir, last.received, last.lost)
			}
			ok = last.ok(dir, 500)
		}
		if !ok {
			t.Fatalf("%s: three trials at 500/s lost datagrams; last %+v", dir, last)
		}
		t.Logf("%s: 200 of 200 at %.0f/s (%+v)", dir, last.rate, last.st)
	}
	if n := b.w.stray.Load(); n != 0 {
		t.Fatalf("%d benchmark datagrams arrived outside a session", n)
	}
	if nic == "e1000e" {
		// The trials went through the 82574L: QEMU's model counted them
		// in its statistics registers (GPRC, GPTC), as the driver reads
		// them into /stats nic.hw; between before and now, at least the
		// trials' datagrams each way (the control traffic adds some).
		after := e1000eHW(t, b)
		if rx, tx := after.GoodRx-before.GoodRx, after.GoodTx-before.GoodTx; rx < 200*tries["rx"] || tx < 200*tries["tx"] {
			t.Fatalf("the 82574L's statistics counted %d good frames in and %d out over the trials, want at least %d and %d (200 datagrams a trial)", rx, tx, 200*tries["rx"], 200*tries["tx"])
		}
	}
}

// TestSinkCounts (review, class 5): a receive trial's counts are taken
// only when they add up and nothing was repeated. The sink's received and
// lost add up to its count whatever arrived (lost is count less
// received), so that check alone passed every trial; a repeat on this
// wire means the wire or the guest duplicated a datagram.
func TestSinkCounts(t *testing.T) {
	for _, c := range []struct {
		st   app.PPSStats
		want bool
	}{
		{app.PPSStats{ID: 1, Count: 10, Received: 10}, true},
		{app.PPSStats{ID: 1, Count: 10, Received: 9, Lost: 1}, true},
		{app.PPSStats{ID: 1, Count: 10, Received: 9, Lost: 1, Duplicates: 1}, false},
		{app.PPSStats{ID: 1, Count: 10, Received: 9, Lost: 0}, false},
		{app.PPSStats{ID: 2, Count: 10, Received: 10}, false},
	} {
		if err := sinkCounts(c.st, 1, 10); (err == nil) != c.want {
			t.Errorf("%+v: %v", c.st, err)
		}
	}
}

// TestParseBoard: the mcimx7d measures the NICs asked for, each once,
// and has no baseline; the mx6ullevk measures its ENET1; other boards
// are refused.
func TestParseBoard(t *testing.T) {
	for _, c := range []struct {
		board, nics string
		want        string // the NICs, or "error"
		baseline    bool
	}{
		{"mx6ullevk", "enet,e1000e", "enet", true},
		{"mcimx7d", "enet,e1000e", "enet,e1000e", false},
		{"mcimx7d", "e1000e", "e1000e", false},
		{"mcimx7d", "e1000e,e1000e", "error", false},
		{"mcimx7d", "cx", "error", false},
		{"sabrelite", "enet", "error", true},
	} {
		o := options{board: c.board, baseline: true}
		got, err := parseBoard(&o, c.nics)
		s := strings.Join(got, ",")
		if err != nil {
			s = "error"
		}
		if s != c.want || (err == nil && o.baseline != c.baseline) {
			t.Errorf("%s %q: %q baseline %v (%v), want %q baseline %v", c.board, c.nics, s, o.baseline, err, c.want, c.baseline)
		}
	}
	if _, err := parseE1000EConfigs("rx:tso,tx:sg"); err != nil {
		t.Error(err)
	}
	for _, bad := range []string{"rx:bounce", "rx:tso:512", "up:tso"} {
		if _, err := parseE1000EConfigs(bad); err == nil {
			t.Errorf("-e1000e-cfg %q accepted", bad)
		}
	}
}

// TestReportNICs: the i.MX7D's table gives each NIC its own line,
// labelled, and no copybreak for the 82574L (its driver has none).
func TestReportNICs(t *testing.T) {
	var rows []Row
	for _, nic := range []string{"enet", "e1000e"} {
		for _, boot := range []string{"plain", "icount"} {
			rows = append(rows, Row{Firmware: "tamanic", Board: "mcimx7d", NIC: nic, Boot: boot, Dir: "rx", Mode: "tso", Copybreak: -1, Size: 64, PPS: 1000, InstrPerPkt: 50000})
		}
	}
	var b strings.Builder
	report(&b, rows, "cmd", options{board: "mcimx7d", runs: 1, plain: true}, time.Second)
	out := b.String()
	for _, want := range []string{"| tamanic | i.MX7D ENET1 | rx | tso | off |", "| tamanic | i.MX7D 82574L (e1000e, PCIe) | rx | tso | n/a |", "Small datagrams on the mcimx7d"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
}

// TestPlotFiles: the plot draws the rows of the JSON files given, one
// line per setting, notes itself in the report beside it, and refuses
// files with nothing to draw.
func TestPlotFiles(t *testing.T) {
	dir := t.TempDir()
	var rows []Row
	for _, boot := range []string{"plain", "icount"} {
		for _, dir := range []string{"rx", "tx"} {
			for _, size := range []int{18, 1472} {
				rows = append(rows, Row{Firmware: "tamanic", Board: "mcimx7d", NIC: "e1000e", Boot: boot, Dir: dir, Mode: "tso", Copybreak: -1, Size: size, PPS: 4000, InstrPerPkt: 60000})
			}
		}
	}
	js, _ := json.Marshal(rows)
	in := filepath.Join(dir, "pps-mcimx7d.json")
	os.WriteFile(in, js, 0o644)
	os.WriteFile(filepath.Join(dir, "report.md"), []byte("# report\n"), 0o644)
	png := filepath.Join(dir, "pps.png")
	if err := plotFiles(png, []string{in}); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(png); err != nil || len(b) < 1000 || string(b[1:4]) != "PNG" {
		t.Fatalf("pps.png: %d bytes, %v", len(b), err)
	}
	if rep, _ := os.ReadFile(filepath.Join(dir, "report.md")); !strings.Contains(string(rep), "Plot: pps.png") || !strings.Contains(string(rep), "from 8 rows") {
		t.Fatalf("report: %s", rep)
	}
	os.WriteFile(in, []byte("[]"), 0o644)
	if err := plotFiles(png, []string{in}); err == nil {
		t.Fatal("an empty file plotted")
	}
}

// hwCounts are the 82574L's good frames received and sent, from its
// statistics registers (/stats nic.hw on its own server).
type hwCounts struct{ GoodRx, GoodTx uint64 }

func e1000eHW(t *testing.T, b *bench) hwCounts {
	t.Helper()
	body, err := b.do(http.MethodGet, "/stats")
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		NIC struct {
			HW *hwCounts `json:"hw"`
		} `json:"nic"`
	}
	if err := json.Unmarshal(body, &st); err != nil {
		t.Fatal(err)
	}
	if st.NIC.HW == nil {
		t.Fatalf("/stats on the 82574L's address has no nic.hw: not its server?\n%.300s", body)
	}
	return *st.NIC.HW
}

// TestReportNoRatePassed: a search in which no rate passed is reported
// as below the lowest rate that failed, not as 0 datagrams/s; an
// icount-only table has no rate in its cells.
func TestReportNoRatePassed(t *testing.T) {
	rows := []Row{{Firmware: "tamanic", Board: "mx6ullevk", NIC: "enet", Boot: "plain", Dir: "tx", Mode: "sg", Copybreak: 512, Size: 64, FailPPS: 1000}}
	var b strings.Builder
	report(&b, rows, "cmd", options{board: "mx6ullevk", runs: 1, plain: true}, time.Second)
	if !strings.Contains(b.String(), "| < 1000 (none passed) |") {
		t.Errorf("report:\n%s", b.String())
	}
	rows = []Row{{Firmware: "tamanic", Board: "mx6ullevk", NIC: "enet", Boot: "icount", Dir: "rx", Mode: "tso", Copybreak: 128, Size: 64, InstrPerPkt: 58000}}
	b.Reset()
	report(&b, rows, "cmd", options{board: "mx6ullevk", icountRuns: 1}, time.Second)
	if out := b.String(); !strings.Contains(out, "| 58.0 k instr [58.0–58.0] |") || strings.Contains(out, "<br>") || strings.Contains(out, "packets/s, the highest") {
		t.Errorf("icount-only report:\n%s", out)
	}
}
