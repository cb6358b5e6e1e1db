package qemu

import (
	_ "embed" // CachePluginSource
	"encoding/json"
	"fmt"
	"go/ast"
	"go/constant"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"path/filepath"

	"github.com/tamanic/tamanic/pcie"
)

// CostRun is one transfer measured by tamanic-cost (its -json output): the
// guest's instructions per MiB under -icount shift=0, split by the
// firmware's stage timers, for the firmware as built (stock gVisor, or
// gVisor with the patches in docs/gvisor-patches/ that GVisorPatches
// names, applied by scripts/gvisor-patched.sh).
type CostRun struct {
	Board         string   `json:"board"`
	Dir           string   `json:"dir"` // tx (guest to host) or rx (host to guest)
	Mode          string   `json:"mode"`
	Copybreak     int      `json:"copybreak"`
	Run           int      `json:"run"`
	Bytes         int64    `json:"bytes"`
	GVisorPatches []string `json:"gvisor_patches"`
	// Instructions per MiB: busy (all but the idle loop), the NIC
	// interrupt handler, the endpoint's receive passes and its transmit
	// calls; the rest is gVisor's TCP, the application and the scheduler.
	Busy float64 `json:"busy_per_mib"`
	IRQ  float64 `json:"irq_per_mib"`
	RX   float64 `json:"endpoint_rx_per_mib"`
	TX   float64 `json:"endpoint_tx_per_mib"`
	// With tamanic-cost -cache: the cache model's counters per MiB
	// (CacheCounts), the SoC modelled and the estimated cycles per MiB
	// (SoCCosts[SoC].Cycles).
	Cache  CacheCounts `json:"cache_per_mib,omitempty"`
	SoC    string      `json:"soc,omitempty"`
	Cycles float64     `json:"cycles_per_mib,omitempty"`
}

// ReadCostRuns reads a tamanic-cost -json file.
func ReadCostRuns(path string) ([]CostRun, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("qemu: reading cost runs: %w", err)
	}
	var rs []CostRun
	if err := json.Unmarshal(b, &rs); err != nil {
		return nil, fmt.Errorf("qemu: decoding cost runs %s: %w", path, err)
	}
	return rs, nil
}

// CachePluginSource is the cachemodel TCG plugin (cmd/tamanic-cost/plugin/
// cachemodel.c): every guest load and store through a model of the SoC's
// data caches, the by-MVA and PL310 maintenance acting on it.
//
//go:embed cmd/tamanic-cost/plugin/cachemodel.c
var CachePluginSource []byte

// CacheLevel is one data cache: size, associativity, line and replacement
// policy (lru, random or rr) as the plugin's l1=/l2= arguments take them.
type CacheLevel struct {
	Size, Ways, Line int
	Policy           string
}

func (l CacheLevel) arg() string {
	return fmt.Sprintf("%d:%d:%d:%s", l.Size, l.Ways, l.Line, l.Policy)
}

// CacheSoC is the data side of one SoC's memory system as the plugin
// models it.
type CacheSoC struct {
	Name   string
	L1, L2 CacheLevel
	// Outer: the L2 is a PL310 outside the core, which the CP15 by-MVA
	// operations do not reach; its own registers at PL310Base maintain it.
	Outer     bool
	PL310Base uint64
	// DeviceWindows are physical ranges counted as device accesses
	// even where QEMU backs them with RAM: the PCIe outbound memory
	// window, where the ConnectX co-simulation's BAR is an ivshmem-plain
	// RAM BAR but on silicon is the device's memory space behind the
	// root complex.
	DeviceWindows [][2]uint64
	// WriteAllocate: whether a store miss allocates. TamaGo maps RAM
	// (and the boards remap the DMA buffers) with TEX=000 C=1 B=1:
	// "Outer and Inner Write-Back, no Write-Allocate" (ARM Architecture
	// Reference Manual ARMv7-A/R, B3.8.2, Table B3-10).
	WriteAllocate bool
}

// CacheSoCs are the modelled SoCs.
//
// i.MX6ULL (and i.MX6UL): one Cortex-A7 with a 32 KB L1 data cache and a
// 128 KB unified L2 (i.MX 6ULL Applications Processor Reference Manual
// rev. 1, 1.4 "Features"). The Cortex-A7's L1 data cache is 4-way with
// 64-byte lines (Cortex-A7 MPCore TRM r0p5, DDI 0464F, 6.6.1: 4-way, set
// index bits [S+5:6]); its L2 has 64-byte lines and is 8-way (TRM 7.1;
// Linux d12a384a1b26 "ARM: dts: r8a7794: Add L2 cache-controller node":
// a Cortex-A7 L2 "organized as 64 KiB x 8 ways").
// The replacement policy modelled for both is LRU: UNCONFIRMED, the TRM
// text on the policy could not be read this session; the checked
// microbenchmarks (streaming and cyclic walks) give the same counts under
// any policy that keeps the most recently filled lines.
//
// i.MX6Q: Cortex-A9 with a 32 KB 4-way L1 data cache with 32-byte lines
// and pseudo-random replacement (Cortex-A9 TRM r4p1, DDI 0388I, 7.1 "About
// the L1 memory system": "Both caches are 4-way set-associative", line
// "eight words", "Data cache replacement policy is pseudo random"), and a
// PL310 (L2C-310) of 1 MiB, 16 ways, 32-byte lines at 0x00A02000 (i.MX 6Dual/
// 6Quad RM rev. 6, 2.2 "ARM platform memory map"; L2C-310 TRM r3p3 2.1:
// 32-byte lines; board/sabrelite/l2.go checks AUX_CTRL's 16-way bit). Its
// replacement is round-robin, the AUX_CTRL bit 25 reset value (L2C-310 TRM
// 3.3.4; UNCONFIRMED this session), which the board does not change.
//
// i.MX7D: two Cortex-A7 with 32 KB L1 data caches and a shared 512 KB L2
// (i.MX 7Dual Applications Processor Reference Manual rev. 1, 1.2
// "Features", and its data sheet IMX7DCEC; the text was not re-read this
// session; the Cortex-A7 MPCore's L2 is configurable 128 KB to 1 MB,
// TRM r0p5 1.3 "Configurable options"); the L1 and L2 geometry and policy
// are the Cortex-A7's as for the i.MX6ULL. One core runs the firmware, so
// the model has one L1.
var CacheSoCs = map[string]CacheSoC{
	"imx6ull": {Name: "i.MX6ULL (Cortex-A7, L2 128 KiB)",
		L1: CacheLevel{32 << 10, 4, 64, "lru"}, L2: CacheLevel{128 << 10, 8, 64, "lru"}},
	"imx7d": {Name: "i.MX7D (Cortex-A7, L2 512 KiB)",
		L1: CacheLevel{32 << 10, 4, 64, "lru"}, L2: CacheLevel{512 << 10, 8, 64, "lru"},
		DeviceWindows: [][2]uint64{{pcie.IMX7D.MemBase, pcie.IMX7D.MemBase + pcie.IMX7D.MemSize}}},
	"imx6q": {Name: "i.MX6Q (Cortex-A9, PL310 1 MiB)",
		L1: CacheLevel{32 << 10, 4, 32, "random"}, L2: CacheLevel{1 << 20, 16, 32, "rr"},
		Outer: true, PL310Base: 0x00A02000},
}

// BoardSoC returns the CacheSoCs key of a firmware board.
func BoardSoC(board string) (string, error) {
	switch board {
	case "mx6ullevk", "usbarmory":
		return "imx6ull", nil
	case "sabrelite":
		return "imx6q", nil
	case "mcimx7d":
		return "imx7d", nil
	}
	return "", fmt.Errorf("qemu: no cache model for board %q", board)
}

// MemoryMap is a board's RAM layout (its board package's constants): the
// Go runtime's RAM and the buffer part of the DMA region are Write-Back
// cacheable; the DMA region's first CoherentSize bytes (descriptor rings)
// stay strongly ordered.
type MemoryMap struct {
	RAMStart, GoRAMSize, DMAStart, DMASize, CoherentSize uint64
}

// Cacheable returns the Write-Back ranges, [lo, hi) pairs.
func (m MemoryMap) Cacheable() [][2]uint64 {
	return [][2]uint64{{m.RAMStart, m.RAMStart + m.GoRAMSize}, {m.DMAStart + m.CoherentSize, m.DMAStart + m.DMASize}}
}

// boardMapFiles are the files declaring each board's memory constants.
var boardMapFiles = map[string]string{
	"mx6ullevk": "board/internal/imx6ulboard/imx6ulboard.go",
	"usbarmory": "board/internal/imx6ulboard/imx6ulboard.go",
	"sabrelite": "board/sabrelite/memmap.go",
	"mcimx7d":   "board/mcimx7d/memmap.go",
}

// BoardMemoryMap reads board's memory layout from its board package's
// source under root (the package builds only for TamaGo, so its constants
// are evaluated from the file with go/types rather than imported): the
// plugin's map is the firmware's, not a copy.
func BoardMemoryMap(root, board string) (MemoryMap, error) {
	file, ok := boardMapFiles[board]
	if !ok {
		return MemoryMap{}, fmt.Errorf("qemu: no memory map for board %q", board)
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, filepath.Join(root, file), nil, 0)
	if err != nil {
		return MemoryMap{}, fmt.Errorf("qemu: memory map of %s: %w", board, err)
	}
	// The imports (TamaGo, the project's drivers) are not resolved: only
	// the constant declarations, which use none of them, are needed.
	conf := types.Config{Importer: noImporter{}, Error: func(error) {}}
	pkg, _ := conf.Check(f.Name.Name, fset, []*ast.File{f}, nil)
	var m MemoryMap
	for name, dst := range map[string]*uint64{"RAMStart": &m.RAMStart, "GoRAMSize": &m.GoRAMSize, "DMAStart": &m.DMAStart,
		"DMASize": &m.DMASize, "CoherentSize": &m.CoherentSize} {
		c, ok := pkg.Scope().Lookup(name).(*types.Const)
		if !ok {
			return MemoryMap{}, fmt.Errorf("qemu: memory map of %s: no constant %s in %s", board, name, file)
		}
		v, exact := constant.Uint64Val(c.Val())
		if !exact {
			return MemoryMap{}, fmt.Errorf("qemu: memory map of %s: %s = %v is not a uint64", board, name, c.Val())
		}
		*dst = v
	}
	return m, nil
}

type noImporter struct{}

func (noImporter) Import(path string) (*types.Package, error) {
	return nil, fmt.Errorf("not resolved: %s", path)
}

// maintenanceRoutines are the firmware's by-MVA maintenance routines
// (dma/cache_arm.s) and how the plugin derives their lines.
var maintenanceRoutines = map[string]string{
	"github.com/tamanic/tamanic/dma.dcacheClean":           "clean",
	"github.com/tamanic/tamanic/dma.dcacheInvalidate":      "inv",
	"github.com/tamanic/tamanic/dma.dcacheCleanInvalidate": "cleaninv",
	"github.com/tamanic/tamanic/dma.dcacheInvalidateRange": "invrange",
}
