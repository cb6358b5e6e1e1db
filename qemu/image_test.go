package qemu

import (
	"bytes"
	"context"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"
)

// maxImage is the largest .bin the README and docs/boards.md promise (issue 29: the images
// had carried Go's 32 MiB FIPS entropy buffer as zeros).
const maxImage = 12 << 20

// TestFlatImageZeroesItsBSS boots the mx6ullevk's .bin as a boot ROM would
// load it, with every byte of the .bss and .noptrbss the image leaves out
// set to 0xa5 (DDR holds no zeros at power-on, and a boot loader may have
// used it): the firmware must zero them itself (internal/boot) and serve.
// Built without the linkcpuinit tag, the runtime reads the pattern as its
// globals and never prints READY.
func TestFlatImageZeroesItsBSS(t *testing.T) {
	elfPath := firmware(t, "mx6ullevk")
	dir := t.TempDir()
	out := filepath.Join(dir, "fw")
	cmd := exec.Command("go", "run", "./qemu/cmd/tamanic-image", "-o", out, elfPath)
	cmd.Dir = ".."
	msg, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("tamanic-image: %v\n%s", err, msg)
	}
	t.Logf("%s", bytes.TrimSpace(msg))
	if !regexp.MustCompile(`zeroed at reset`).Match(msg) {
		t.Fatalf("tamanic-image kept .bss in the image: the firmware was not linked with internal/boot's zeroing")
	}
	f, err := elf.Open(elfPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	addr := map[string]uint64{}
	for _, s := range syms {
		addr[s.Name] = s.Value
	}
	bss, end := addr["runtime.bss"], addr["runtime.enoptrbss"]
	base := uint64(1<<64 - 1)
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Memsz > 0 {
			base = min(base, p.Paddr)
		}
	}
	fi, err := os.Stat(out + ".bin")
	if err != nil {
		t.Fatal(err)
	}
	if uint64(fi.Size()) != bss-base {
		t.Fatalf(".bin is %d bytes; want %d (up to runtime.bss at %#x)", fi.Size(), bss-base, bss)
	}
	if fi.Size() > maxImage {
		t.Errorf(".bin is %d bytes, over the %d promised", fi.Size(), maxImage)
	}
	fill := filepath.Join(dir, "fill.bin")
	if err := os.WriteFile(fill, bytes.Repeat([]byte{0xa5}, int(end-bss)), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var console bytes.Buffer
	m, err := Boot(ctx, Options{Board: "mx6ullevk", Console: &console, Image: &FlatImage{
		Bin: out + ".bin", Base: base, Entry: f.Entry, Fill: fill, FillAt: bss,
	}})
	if err != nil {
		t.Fatalf("%v\nconsole:\n%s", err, console.String())
	}
	defer m.Stop()
	t.Logf("booted from a %d-byte .bin with %d bytes of 0xa5 where .bss was: %s", fi.Size(), end-bss, m.Ready)
	const n = 4 << 20
	if _, err := m.Receive(n, time.Minute); err != nil {
		t.Fatalf("guest->host: %v\nconsole:\n%s", err, m.Console())
	}
	if r, err := m.Send(n, time.Minute); err != nil || r.Bytes != n {
		t.Fatalf("host->guest: %+v %v\nconsole:\n%s", r, err, m.Console())
	}
}
