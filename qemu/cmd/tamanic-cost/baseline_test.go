package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tamanic/tamanic/qemu"
)

// TestCacheModelBaselineMap builds the baseline firmware and checks the
// memory map the plugin takes from its image: TamaGo's RAM
// (runtime/goos.RamStart and RamSize: the board's 512 MiB at 0x80000000,
// tamago board/nxp/mx6ullevk mem.go) Write-Back, nothing else (its DMA
// region in OCRAM strongly ordered), no maintenance routines.
func TestCacheModelBaselineMap(t *testing.T) {
	if why := qemu.Missing(); why != "" {
		t.Skipf("skipping: %s", why)
	}
	root, _ := filepath.Abs("../../..")
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	elf, err := buildBaseline(ctx, root, dir, "mx6ullevk")
	if err != nil {
		t.Fatal(err)
	}
	p, err := qemu.NewBaselineCachePlugin(dir, elf, "mx6ullevk")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	args := strings.Join(p.PluginArgs(), " ")
	var wb []string
	for _, a := range strings.Split(args, ",") {
		if strings.HasPrefix(a, "wb=") {
			wb = append(wb, a)
		}
		if strings.HasPrefix(a, "mva=") {
			t.Errorf("a maintenance routine in the baseline: %s", a)
		}
	}
	if len(wb) != 1 || wb[0] != "wb=0x80000000-0xa0000000" {
		t.Errorf("write-back ranges %v, want TamaGo's RAM [0x80000000, 0xa0000000) alone", wb)
	}
	if _, err := buildBaseline(ctx, root, dir, "sabrelite"); err == nil {
		t.Error("a baseline for the sabrelite, which has none")
	}
}
