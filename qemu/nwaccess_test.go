package qemu

import (
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// ARM (A32) encodings for the plugin's test guest (ARM ARM A8.8: MOVW
// A8.8.102 A2, MOVT A8.8.106, LDR/STR immediate A8.8.63/A8.8.204 A1, B
// A8.8.18, SUBS immediate A8.8.222, MOV immediate A8.8.102 A1).
func armMovw(rd, imm uint32) uint32 { return 0xE3000000 | imm>>12<<16 | rd<<12 | imm&0xfff }
func armMovt(rd, imm uint32) uint32 { return 0xE3400000 | imm>>12<<16 | rd<<12 | imm&0xfff }
func armLdr(rt, rn, off uint32) uint32 {
	return 0xE5900000 | rn<<16 | rt<<12 | off
}
func armStr(rt, rn, off uint32) uint32 {
	return 0xE5800000 | rn<<16 | rt<<12 | off
}
func armB(cond uint32, from, to uint32) uint32 {
	return cond<<28 | 0x0A000000 | (to-from-8)>>2&0xffffff
}

// armLoad32 is MOVW+MOVT of v into rd.
func armLoad32(rd, v uint32) []uint32 { return []uint32{armMovw(rd, v&0xffff), armMovt(rd, v>>16)} }

// TestAccessPluginRecords boots a hand-assembled guest under the nwaccess
// plugin, with the CSU plan's denied ranges: code in the "nw" range runs
// five times a read of CCM_CCGR0 (allowed: the slot is Normal World
// read-only), a write of it (denied), a read of ENET1 (denied: Secure
// only), a write of OCRAM (denied) and a read of UART1 (allowed); then
// code in the "sw" range writes CCM_CCGR0 once, and code in no range
// writes it again. The plugin must record exactly the three denied
// accesses five times each under nw, the one under sw, and nothing else:
// it does record a denied write, by the instruction that made it, and
// only for the code it watches.
func TestAccessPluginRecords(t *testing.T) {
	if _, err := exec.LookPath("qemu-system-arm"); err != nil {
		t.Skip("skipping the access plugin test: qemu-system-arm is not installed")
	}
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "cc"
	}
	if _, err := exec.LookPath(cc); err != nil {
		t.Skip("skipping the access plugin test: no C compiler (cc) for its QEMU plugin")
	}
	const (
		base     = 0x80000000
		swBlock  = base + 0x2000
		offBlock = base + 0x4000
		ccgr0    = 0x020c4068
		enet1    = 0x02188000
		ocram    = 0x00900000
		uart1    = 0x02020000
	)
	img := make([]uint32, 0x5000/4)
	at := func(addr uint32, code ...uint32) {
		copy(img[(addr-base)/4:], code)
	}
	var nw []uint32
	nw = append(nw, 0xE3A08005) // mov r8, #5
	loop := uint32(base + 4*len(nw))
	nw = append(nw, armLoad32(0, ccgr0)...)
	nw = append(nw, armLdr(1, 0, 0)) // read CCM: allowed
	strCCM := uint32(base + 4*len(nw))
	nw = append(nw, armStr(1, 0, 0)) // write CCM: denied
	nw = append(nw, armLoad32(3, enet1)...)
	ldrENET := uint32(base + 4*len(nw))
	nw = append(nw, armLdr(4, 3, 4)) // read ENET1 EIR: denied
	nw = append(nw, armLoad32(5, ocram)...)
	strOCRAM := uint32(base + 4*len(nw))
	nw = append(nw, armStr(4, 5, 0)) // write OCRAM: denied
	nw = append(nw, armLoad32(6, uart1)...)
	nw = append(nw, armLdr(7, 6, 0x80)) // read UART1 UCR1: allowed
	nw = append(nw, 0xE2588001)         // subs r8, r8, #1
	nw = append(nw, armB(0x1, uint32(base+4*len(nw)), loop))
	nw = append(nw, armB(0xE, uint32(base+4*len(nw)), swBlock))
	at(base, nw...)
	sw := append(armLoad32(0, ccgr0), armStr(1, 0, 0))
	sw = append(sw, armB(0xE, swBlock+uint32(4*len(sw)), offBlock))
	at(swBlock, sw...)
	off := append(armLoad32(0, ccgr0), armStr(1, 0, 0), 0xEAFFFFFE) // write CCM, then b .
	at(offBlock, off...)

	dir := t.TempDir()
	bin := filepath.Join(dir, "guest.bin")
	b := make([]byte, 4*len(img))
	for i, w := range img {
		binary.LittleEndian.PutUint32(b[4*i:], w)
	}
	if err := os.WriteFile(bin, b, 0o644); err != nil {
		t.Fatal(err)
	}
	deny, err := CSUDeniedRanges("nw")
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewAccessPlugin(dir, []CodeRange{{"nw", base, base + 0x1000}, {"sw", swBlock, swBlock + 0x1000}}, deny)
	if err != nil {
		t.Fatal(err)
	}
	args := append(append([]string{}, Boards["mx6ullevk"]...), "-nographic", "-monitor", "none", "-serial", "null",
		"-device", "loader,file="+bin+",addr=0x80000000,force-raw=on", "-device", "loader,addr=0x80000000,cpu-num=0")
	cmd := exec.Command("qemu-system-arm", append(args, p.QEMUArgs()...)...)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	var r AccessReport
	for deadline := time.Now().Add(20 * time.Second); ; {
		if r, err = p.Report(); err != nil {
			t.Fatalf("%v\nQEMU: %s", err, out.String())
		}
		if len(r.Of("sw")) > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // the guest is in its final loop: nothing more comes
	if r, err = p.Report(); err != nil {
		t.Fatal(err)
	}
	for _, a := range r.Accesses {
		t.Logf("%s pc=%#x %s %s pa=%#x size=%d io=%v dev=%s count=%d", a.World, a.PC, a.Range, map[bool]string{false: "read", true: "write"}[a.Write], a.PA, a.Size, a.IO, a.Device, a.Count)
	}
	for w, x := range r.Totals {
		t.Logf("%s: %+v", w, x)
	}
	type key struct {
		world, rng string
		pc         uint64
		write      bool
	}
	want := map[key]uint64{
		{"nw", "CCM/SNVS_HP/SRC/GPC:CCM", uint64(strCCM), true}: 5,
		{"nw", "ENET:ENET1", uint64(ldrENET), false}:            5,
		{"nw", "OCRAM:OCRAM", uint64(strOCRAM), true}:           5,
		{"sw", "CCM/SNVS_HP/SRC/GPC:CCM", swBlock + 8, true}:    1,
	}
	got := map[key]uint64{}
	for _, a := range r.Accesses {
		got[key{a.World, a.Range, a.PC, a.Write}] += a.Count
	}
	for k, n := range want {
		if got[k] != n {
			t.Errorf("%+v recorded %d times, want %d", k, got[k], n)
		}
	}
	for k, n := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("unexpected record %+v (%d)", k, n)
		}
	}
	nwT := r.Totals["nw"]
	if nwT.Loads != 15 || nwT.Stores != 10 || nwT.IOLoads != 15 || nwT.IOStores != 5 || nwT.Violations != 15 {
		t.Errorf("nw totals %+v, want 15 loads (all device), 10 stores (5 device), 15 violations", nwT)
	}
	// QEMU 7.2's phys_addr is wrong for OCRAM (a RAM block after the
	// DDR's): the plugin counts the mismatch and checks the virtual
	// address too, so the OCRAM write above is recorded all the same.
	if nwT.PAMismatch != 0 && (nwT.PAMismatch != 5 || nwT.MismatchVA != ocram) {
		t.Errorf("nw: %d hwaddr physical addresses differ from the virtual ones, first %#x for %#x: only the OCRAM store's may",
			nwT.PAMismatch, nwT.MismatchPA, nwT.MismatchVA)
	}
	if r.Dropped != 0 || nwT.NoHWAddr != 0 {
		t.Errorf("dropped %d records, %d accesses without a hwaddr", r.Dropped, nwT.NoHWAddr)
	}
}
