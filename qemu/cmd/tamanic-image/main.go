// Command tamanic-image turns a firmware ELF into a flat binary and a
// bootable i.MX image (.imx: the board's DCD from TamaGo's imximage.cfg,
// packed by U-Boot's mkimage), for SD card or USB serial download.
//
//	tamanic-image -dcd imximage.cfg -o build/tamanic-mx6ullevk build/tamanic-mx6ullevk.elf
//
// The image holds the ELF's loadable segments from the lowest address up.
// It ends where .bss starts when the firmware zeroes .bss and .noptrbss
// itself (package internal/boot, linked with the linkcpuinit tag): Go 1.26's
// 32 MiB FIPS entropy buffer lives in .noptrbss, and carrying the zeroed
// sections would put 32 MiB of zeros in every image. An ELF without
// internal/boot's zeroing keeps them in the image, zero-filled, as objcopy
// does with --set-section-flags .bss=alloc,load,contents.
package main

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"sort"
)

// zeroBSSSymbol is the routine of internal/boot that zeroes runtime.bss up
// to runtime.enoptrbss before the runtime starts.
const zeroBSSSymbol = "github.com/tamanic/tamanic/internal/boot.zeroBSS"

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

// segment is a loadable segment: Filesz bytes from the file at Paddr, then
// zeros up to Memsz.
type segment struct{ Paddr, Filesz, Memsz uint64 }

// zeroing is the range the firmware zeroes at reset, [Start, End), when
// Present.
type zeroing struct {
	Present    bool
	Start, End uint64
}

// extent returns the image's first address and its length: every
// segment's contents, and its zero fill unless z covers that fill. It fails
// when z is present but would leave a fill unzeroed or would zero contents.
func extent(segs []segment, z zeroing) (base, length uint64, err error) {
	if len(segs) == 0 {
		return 0, 0, errors.New("no loadable segment")
	}
	base = segs[0].Paddr
	var fileEnd, memEnd uint64
	for _, s := range segs {
		if s.Filesz > s.Memsz {
			return 0, 0, fmt.Errorf("segment at %#x: %d bytes in the file, %d in memory", s.Paddr, s.Filesz, s.Memsz)
		}
		base = min(base, s.Paddr)
		fileEnd = max(fileEnd, s.Paddr+s.Filesz)
		memEnd = max(memEnd, s.Paddr+s.Memsz)
	}
	if !z.Present {
		return base, memEnd - base, nil
	}
	switch {
	case z.Start%4 != 0 || z.End%4 != 0 || z.End < z.Start:
		return 0, 0, fmt.Errorf("zeroed range %#x-%#x is not whole words", z.Start, z.End)
	case z.Start < base:
		return 0, 0, fmt.Errorf(".bss at %#x starts below the image at %#x", z.Start, base)
	case fileEnd > z.Start:
		return 0, 0, fmt.Errorf("contents up to %#x run past the start of .bss at %#x", fileEnd, z.Start)
	case memEnd > z.End:
		return 0, 0, fmt.Errorf("zero fill up to %#x runs past the zeroed range's end %#x", memEnd, z.End)
	}
	// Up to .bss: any padding between the last contents and .bss stays in
	// the image as zeros.
	return base, z.Start - base, nil
}

func symbols(f *elf.File) map[string]uint64 {
	syms, _ := f.Symbols()
	m := make(map[string]uint64, 3)
	for _, s := range syms {
		switch s.Name {
		case zeroBSSSymbol, "runtime.bss", "runtime.enoptrbss":
			m[s.Name] = s.Value
		}
	}
	return m
}

func run(in, dcd, out string) error {
	f, err := elf.Open(in)
	if err != nil {
		return err
	}
	defer f.Close()
	var progs []*elf.Prog
	var segs []segment
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Memsz > 0 {
			progs = append(progs, p)
			segs = append(segs, segment{p.Paddr, p.Filesz, p.Memsz})
		}
	}
	sort.Slice(segs, func(i, j int) bool { return segs[i].Paddr < segs[j].Paddr })
	var z zeroing
	syms := symbols(f)
	if _, ok := syms[zeroBSSSymbol]; ok {
		start, ok1 := syms["runtime.bss"]
		end, ok2 := syms["runtime.enoptrbss"]
		if !ok1 || !ok2 {
			return fmt.Errorf("%s has %s but no runtime.bss/runtime.enoptrbss symbols", in, zeroBSSSymbol)
		}
		z = zeroing{true, start, end}
	}
	base, length, err := extent(segs, z)
	if err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	img := make([]byte, length)
	for _, p := range progs {
		if _, err := p.ReadAt(img[p.Paddr-base:p.Paddr-base+p.Filesz], 0); err != nil {
			return fmt.Errorf("segment at %#x: %w", p.Paddr, err)
		}
	}
	bin := out + ".bin"
	if err := os.WriteFile(bin, img, 0o644); err != nil {
		return err
	}
	if z.Present {
		fmt.Printf("%s: %d bytes at %#x, entry %#x (.bss and .noptrbss, %d bytes, zeroed at reset)\n", bin, len(img), base, f.Entry, z.End-z.Start)
	} else {
		fmt.Printf("%s: %d bytes at %#x, entry %#x (zeroed sections included)\n", bin, len(img), base, f.Entry)
	}
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
