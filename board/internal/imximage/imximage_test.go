package imximage

import (
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	c, err := Parse(strings.NewReader(`
IMAGE_VERSION 2 # comment
BOOT_FROM	sd
CSF 0x2000
DATA 4, 0x020c4068, 0xffffffff
DATA 2 0x020e0000 0x10 # halfword
CHECK_BITS_SET 4 0x307900c4 0x1
DATA 4 0x021b0000 0x831a0000
`))
	if err != nil {
		t.Fatal(err)
	}
	if c.Version != 2 || c.BootFrom != "sd" || c.CSF != 0x2000 {
		t.Errorf("header = %d %q %#x", c.Version, c.BootFrom, c.CSF)
	}
	want := []Cmd{
		{5, Data, 4, 0x020c4068, 0xffffffff},
		{6, Data, 2, 0x020e0000, 0x10},
		{7, CheckBitsSet, 4, 0x307900c4, 1},
		{8, Data, 4, 0x021b0000, 0x831a0000},
	}
	if len(c.DCD) != len(want) {
		t.Fatalf("DCD = %+v", c.DCD)
	}
	for i := range want {
		if c.DCD[i] != want[i] {
			t.Errorf("DCD[%d] = %+v, want %+v", i, c.DCD[i], want[i])
		}
	}
	// Header, then four commands each with its own command header.
	if got := c.DCDSize(); got != 4+4*(4+8) {
		t.Errorf("DCDSize = %d", got)
	}
	if v, ok := c.Last(0x021b0000); !ok || v != 0x831a0000 {
		t.Errorf("Last = %#x %v", v, ok)
	}
	if _, ok := c.Last(0x307900c4); ok {
		t.Error("Last found a CHECK as a write")
	}
}

func TestParseErrors(t *testing.T) {
	for _, in := range []string{
		"DATA 3 0x0 0x0",          // width
		"DATA 4 0x2 0x0",          // alignment
		"DATA 4 0x0",              // missing value
		"DATA 4 0x100000000 0x0",  // address beyond 32 bits
		"DATA 4 0x0 zz",           // value
		"IMAGE_VERSION two",       // version
		"BOOT_FROM",               // device
		"WRITE 4 0x0 0x0",         // unknown command
		"CSF",                     // size
		"IMAGE_VERSION 2\nDATA 4", // line 2
	} {
		if _, err := Parse(strings.NewReader(in)); err == nil {
			t.Errorf("%q: no error", in)
		} else if !strings.Contains(err.Error(), "line ") {
			t.Errorf("%q: error %q names no line", in, err)
		}
	}
}

// TestDCDSizeMatchesMkimage builds an image from each board's DCD with
// U-Boot's mkimage and compares the DCD length mkimage wrote (the DCD
// header's big-endian length, RM "DCD header") with DCDSize.
func TestDCDSizeMatchesMkimage(t *testing.T) {
	if _, err := exec.LookPath("mkimage"); err != nil {
		t.Skip("mkimage (package u-boot-tools) not installed")
	}
	cfgs, _ := filepath.Glob("../../*/imximage.cfg")
	if len(cfgs) < 2 {
		t.Fatalf("board DCDs: %v", cfgs)
	}
	dir := t.TempDir()
	payload := filepath.Join(dir, "payload.bin")
	if err := os.WriteFile(payload, make([]byte, 8192), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, cfg := range cfgs {
		c, err := ParseFile(cfg)
		if err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(dir, "out.imx")
		if b, err := exec.Command("mkimage", "-n", cfg, "-T", "imximage", "-e", "0x80010000", "-d", payload, out).CombinedOutput(); err != nil {
			t.Fatalf("%s: mkimage: %v\n%s", cfg, err, b)
		}
		img, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		// IVT (offset 0 of the file): header, entry, reserved, DCD pointer,
		// boot data pointer, self.
		dcdPtr := binary.LittleEndian.Uint32(img[12:])
		self := binary.LittleEndian.Uint32(img[20:])
		off := dcdPtr - self
		if img[off] != 0xd2 {
			t.Fatalf("%s: DCD tag %#x, want 0xd2", cfg, img[off])
		}
		if got, want := int(binary.BigEndian.Uint16(img[off+1:])), c.DCDSize(); got != want {
			t.Errorf("%s: mkimage's DCD is %d bytes, DCDSize %d", cfg, got, want)
		}
		if c.DCDSize() > MaxDCDSize {
			t.Errorf("%s: DCD %d bytes > %d", cfg, c.DCDSize(), MaxDCDSize)
		}
	}
}
