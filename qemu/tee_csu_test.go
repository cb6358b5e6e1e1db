package qemu

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/tamanic/tamanic/tee/teemap"
)

// TestTEENormalWorldCSU boots the TrustZone-partitioned image (as
// TestTEEEndToEnd does) under the nwaccess plugin and fails listing every
// access the Normal World's instructions (those in its memory,
// teemap.NormalStart + NormalSize) make that the CSU plan refuses
// (tzplan.ClosedSlots with tzplan.SlotRanges: Secure-only slots read or
// written, read-only slots written) or that reaches DDR outside its TZASC
// region. QEMU 7.2 enforces neither the CSU nor the TZASC; on silicon each
// such access is refused (a bus error, or ignored), most likely stopping
// the Normal World at boot.
//
// The Secure World's instructions are watched too, as the control: it
// drives ENET1 (Secure only), so its ENET1 writes must be recorded, or the
// plugin sees nothing and the Normal World's clean record proves nothing.
// They are not violations.
//
// What it cannot see: paths this run does not take (the hostile image,
// traffic beyond its 256 KiB each way; the Normal World no longer links
// TamaGo's imx6ul, whose native-only paths this run could not have
// taken), Normal World code executing outside its RAM (an exception before
// its vectors are set), DMA (the CSU_SA and TZASC settings govern that)
// and the MMU's table walks (into the Normal World's own RAM).
func TestTEENormalWorldCSU(t *testing.T) {
	elf := teeFirmware(t, false)
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "cc"
	}
	if _, err := exec.LookPath(cc); err != nil {
		t.Skip("skipping the Normal World access test: no C compiler (cc) for its QEMU plugin")
	}
	normalELF := strings.TrimSuffix(elf, ".elf") + "-normal.elf"
	nwSyms, err := NewSymbolizer(normalELF)
	if err != nil {
		t.Fatal(err)
	}
	swSyms, err := NewSymbolizer(elf)
	if err != nil {
		t.Fatal(err)
	}
	deny, err := CSUDeniedRanges("nw")
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewAccessPlugin(t.TempDir(), []CodeRange{
		{"nw", teemap.NormalStart, teemap.NormalStart + teemap.NormalSize},
		{"sw", teemap.SecureStart, teemap.SecureStart + teemap.SecureRAMSize},
	}, deny)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	m := bootTEE(t, false, p.QEMUArgs()...)
	// A little traffic through every path the Normal World has: TCP each
	// way, UDP echo, the HTTP control port.
	const n = 256 << 10
	if _, err := m.Receive(n, time.Minute); err != nil {
		t.Fatalf("guest->host: %v\nconsole:\n%s", err, m.Console())
	}
	if r, err := m.Send(n, time.Minute); err != nil || r.Bytes != n {
		t.Fatalf("host->guest: %+v %v\nconsole:\n%s", r, err, m.Console())
	}
	d := bytes.Repeat([]byte{0x5a}, 1000)
	if got, err := m.Echo(d, 5*time.Second); err != nil || !bytes.Equal(got, d) {
		t.Fatalf("echo: %d bytes back, %v", len(got), err)
	}
	if _, err := m.Stats(); err != nil {
		t.Fatal(err)
	}
	r, err := p.Report()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("boot, traffic and report in %v", time.Since(start).Round(time.Millisecond))
	for _, w := range []string{"nw", "sw"} {
		x := r.Totals[w]
		t.Logf("%s: %d loads (%d device), %d stores (%d device), %d refused accesses, %d without hwaddr, %d with hwaddr PA != VA (first pc %#x va %#x pa %#x)",
			w, x.Loads, x.IOLoads, x.Stores, x.IOStores, x.Violations, x.NoHWAddr, x.PAMismatch, x.MismatchPC, x.MismatchVA, x.MismatchPA)
	}
	// The control.
	sw := r.Totals["sw"]
	enet1Writes := 0
	for _, a := range r.Of("sw") {
		if a.Range == "ENET:ENET1" && a.Write {
			enet1Writes++
		}
	}
	if enet1Writes == 0 || sw.IOStores == 0 {
		t.Errorf("control: no Secure World write to ENET1 recorded (%d device stores seen): the plugin is not watching", sw.IOStores)
	}
	nw := r.Totals["nw"]
	if nw.Loads == 0 || nw.Stores == 0 || nw.IOStores == 0 {
		t.Errorf("the Normal World's accesses were not seen: %+v", nw)
	}
	if r.Dropped != 0 {
		t.Errorf("%d distinct records dropped (table full)", r.Dropped)
	}
	var lines []string
	for _, a := range r.Of("nw") {
		l := fmt.Sprintf("  pc %#x %s: %s %s at %#x (%d bytes, %s) x%d",
			a.PC, nwSyms.Name(a.PC), a.Range, map[bool]string{false: "read", true: "write"}[a.Write], a.PA, a.Size, a.Device, a.Count)
		for _, v := range a.Via {
			l += fmt.Sprintf("\n      after the call at %#x %s", v, nwSyms.Name(v))
		}
		lines = append(lines, l)
	}
	if len(lines) > 0 {
		t.Errorf("the Normal World made %d accesses (%d distinct) that the CSU/TZASC plan refuses:\n%s",
			nw.Violations, len(lines), strings.Join(lines, "\n"))
	}
	if testing.Verbose() {
		for _, a := range r.Of("sw") {
			t.Logf("control: sw pc %#x %s: %s %s at %#x x%d", a.PC, swSyms.Name(a.PC), a.Range,
				map[bool]string{false: "read", true: "write"}[a.Write], a.PA, a.Count)
		}
	}
}
