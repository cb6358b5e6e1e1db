package main

import (
	"strings"
	"testing"
)

func TestExtent(t *testing.T) {
	// A Go firmware's layout: text, rodata, then data with .bss and
	// .noptrbss as its zero fill.
	text := segment{0x80010000, 0x300000, 0x300000}
	ro := segment{0x80310000, 0x200000, 0x200000}
	data := segment{0x80510000, 0x20000, 0x20000 + 0x2100000}
	bss, end := uint64(0x80530000), uint64(0x80530000+0x2100000)
	for _, tc := range []struct {
		name     string
		segs     []segment
		z        zeroing
		wantBase uint64
		wantLen  uint64
		wantErr  string
	}{
		{"no zeroing keeps the fill", []segment{text, ro, data}, zeroing{}, 0x80010000, end - 0x80010000, ""},
		{"zeroing drops the fill", []segment{text, ro, data}, zeroing{true, bss, end}, 0x80010000, bss - 0x80010000, ""},
		{"padding before .bss stays", []segment{text, ro, data}, zeroing{true, bss + 0x20, end}, 0x80010000, bss + 0x20 - 0x80010000, ""},
		{"contents past .bss", []segment{text, ro, data, {end, 0x10, 0x10}}, zeroing{true, bss, end}, 0, 0, "run past the start of .bss"},
		{"fill past the zeroed range", []segment{text, ro, data}, zeroing{true, bss, end - 8}, 0, 0, "runs past the zeroed range"},
		{"partial words", []segment{text, ro, data}, zeroing{true, bss + 2, end}, 0, 0, "not whole words"},
		{"bss below the image", []segment{data}, zeroing{true, 0x80000000, end}, 0, 0, "starts below the image"},
		{"file larger than memory", []segment{{0x80010000, 8, 4}}, zeroing{}, 0, 0, "bytes in the file"},
		{"nothing to load", nil, zeroing{}, 0, 0, "no loadable segment"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base, n, err := extent(tc.segs, tc.z)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want one saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || base != tc.wantBase || n != tc.wantLen {
				t.Fatalf("extent = %#x+%#x, %v; want %#x+%#x", base, n, err, tc.wantBase, tc.wantLen)
			}
		})
	}
}
