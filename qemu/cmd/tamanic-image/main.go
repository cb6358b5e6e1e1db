// Command tamanic-image turns a firmware ELF into a flat binary and a
// bootable i.MX image (.imx: the board's DCD from TamaGo's imximage.cfg,
// packed by U-Boot's mkimage), for SD card or USB serial download.
//
//	tamanic-image -dcd imximage.cfg -o build/tamanic-mx6ullevk build/tamanic-mx6ullevk.elf
package main

import (
	"debug/elf"
	"encoding/binary"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"sort"
)

func main() {
	dcd := flag.String("dcd", "", "imximage.cfg with the board's DCD (required for .imx)")
	out := flag.String("o", "", "output path without extension")
	flag.Parse()
	if flag.NArg() != 1 || *out == "" {
		fmt.Fprintln(os.Stderr, "usage: tamanic-image -dcd imximage.cfg -o OUT firmware.elf")
		os.Exit(2)
	}
	if err := run(flag.Arg(0), *dcd, *out); err != nil {
		fmt.Fprintln(os.Stderr, "tamanic-image:", err)
		os.Exit(1)
	}
}

func run(in, dcd, out string) error {
	f, err := elf.Open(in)
	if err != nil {
		return err
	}
	defer f.Close()
	var segs []*elf.Prog
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Memsz > 0 {
			segs = append(segs, p)
		}
	}
	if len(segs) == 0 {
		return fmt.Errorf("%s has no loadable segment", in)
	}
	sort.Slice(segs, func(i, j int) bool { return segs[i].Paddr < segs[j].Paddr })
	base := segs[0].Paddr
	end := uint64(0)
	for _, p := range segs {
		end = max(end, p.Paddr+p.Memsz)
	}
	// BSS included (zeroed), as objcopy with --set-section-flags does.
	img := make([]byte, end-base)
	for _, p := range segs {
		if _, err := p.ReadAt(img[p.Paddr-base:p.Paddr-base+p.Filesz], 0); err != nil {
			return fmt.Errorf("segment at %#x: %w", p.Paddr, err)
		}
	}
	bin := out + ".bin"
	if err := os.WriteFile(bin, img, 0o644); err != nil {
		return err
	}
	fmt.Printf("%s: %d bytes at %#x, entry %#x\n", bin, len(img), base, f.Entry)
	if dcd == "" {
		return nil
	}
	imx := out + ".imx"
	cmd := exec.Command("mkimage", "-n", dcd, "-T", "imximage", "-e", fmt.Sprintf("%#x", base), "-d", bin, imx)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("mkimage (package u-boot-tools): %w", err)
	}
	// The IVT's entry field (offset 4) must be the ELF entry point, not the
	// load address mkimage assumed.
	b, err := os.ReadFile(imx)
	if err != nil {
		return err
	}
	binary.LittleEndian.PutUint32(b[4:], uint32(f.Entry))
	return os.WriteFile(imx, b, 0o644)
}
