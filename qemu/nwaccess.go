package qemu

import (
	_ "embed" // AccessPluginSource
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/tamanic/tamanic/tee/teemap"
	"github.com/tamanic/tamanic/tee/tzplan"
)

// AccessPluginSource is the nwaccess TCG plugin (cmd/tamanic-cost/plugin/
// nwaccess.c): every load and store of the instructions in given code
// ranges, checked by physical address against denied ranges. QEMU 7.2
// enforces neither the i.MX6UL/ULL's CSU nor its TZASC; this is what
// shows a Normal World access silicon would refuse.
//
//go:embed cmd/tamanic-cost/plugin/nwaccess.c
var AccessPluginSource []byte

// CodeRange is guest code whose accesses the plugin checks: instructions
// at virtual addresses [Lo, Hi), reported under World.
type CodeRange struct {
	World  string
	Lo, Hi uint64
}

// DeniedRange is a physical range refusing reads, writes or both, to the
// code of World ("": every CodeRange). Name has no comma, @ or white
// space.
type DeniedRange struct {
	Name        string
	Lo, Hi      uint64
	Read, Write bool
	World       string
}

// CSUDeniedRanges returns what the TrustZone plan (tzplan.ClosedSlots)
// refuses the Normal World on the i.MX6ULL: each closed slot's ranges
// (tzplan.SlotRanges) with the directions its level denies
// (tzplan.NormalDenies), named "SLOT:BLOCK", for every watched world (so
// that Secure World code watched as a control shows its own, legitimate,
// device accesses); and DDR outside the Normal World's region (teemap:
// the EVK's 512 MiB from 0x8000_0000 less TZASC region 1), which TZASC
// region 0 keeps Secure, named "TZASC:DDR", for the world named normal
// only (the rest of DDR is the Secure World's own memory).
func CSUDeniedRanges(normal string) ([]DeniedRange, error) {
	table := tzplan.SlotRanges()
	var ds []DeniedRange
	for _, c := range tzplan.ClosedSlots() {
		rs := table[c.Block]
		if len(rs) == 0 {
			return nil, fmt.Errorf("qemu: closed slot %s has no address ranges in tzplan.SlotRanges", c.Block)
		}
		r, w := tzplan.NormalDenies(c.Level)
		for _, x := range rs {
			ds = append(ds, DeniedRange{Name: c.Block + ":" + strings.ReplaceAll(x.Block, " ", "_"),
				Lo: uint64(x.Base), Hi: x.End(), Read: r, Write: w})
		}
	}
	// The DDR window runs to the top of the address space (IMX6ULLRM 2.2:
	// MMDC 0x8000_0000-0xFFFF_FFFF): TZASC region 0 refuses the Normal
	// World all of it but its own 128 MiB, and the controller aliases
	// the EVK's 512 MiB above it (a review found the range stopping at
	// 512 MiB).
	const ddrEnd = 1 << 32
	ds = append(ds, DeniedRange{Name: "TZASC:DDR", Lo: teemap.NormalStart + teemap.NormalSize, Hi: ddrEnd, Read: true, Write: true, World: normal})
	return ds, nil
}

// AccessPlugin drives the nwaccess plugin for one boot.
type AccessPlugin struct {
	so, out string
	args    []string
}

// NewAccessPlugin compiles the plugin (with $CC, default cc) into dir and
// prepares its arguments.
func NewAccessPlugin(dir string, code []CodeRange, deny []DeniedRange) (*AccessPlugin, error) {
	if len(code) == 0 || len(deny) == 0 {
		return nil, errors.New("qemu: the access plugin needs code and denied ranges")
	}
	p := &AccessPlugin{so: filepath.Join(dir, "nwaccess.so"), out: filepath.Join(dir, "nwaccess.out")}
	src := filepath.Join(dir, "nwaccess.c")
	if err := os.WriteFile(src, AccessPluginSource, 0o644); err != nil {
		return nil, err
	}
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "cc"
	}
	if out, err := exec.Command(cc, "-O2", "-shared", "-fPIC", "-o", p.so, src, "-lpthread").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("qemu: compiling the access plugin: %v\n%s", err, out)
	}
	p.args = []string{"out=" + p.out}
	for _, c := range code {
		p.args = append(p.args, fmt.Sprintf("code=%s:%#x-%#x", c.World, c.Lo, c.Hi))
	}
	for _, d := range deny {
		if strings.ContainsAny(d.Name, ",@ \t\n") || d.Name == "" {
			return nil, fmt.Errorf("qemu: access plugin range name %q", d.Name)
		}
		mode := map[[2]bool]string{{true, false}: "r", {false, true}: "w", {true, true}: "rw"}[[2]bool{d.Read, d.Write}]
		if mode == "" {
			continue // denies nothing
		}
		arg := fmt.Sprintf("deny=%s:%#x-%#x:%s", mode, d.Lo, d.Hi, d.Name)
		if d.World != "" {
			arg += "@" + d.World
		}
		p.args = append(p.args, arg)
	}
	return p, nil
}

// QEMUArgs are the arguments loading the plugin.
func (p *AccessPlugin) QEMUArgs() []string {
	return []string{"-plugin", strings.Join(append([]string{p.so}, p.args...), ",")}
}

// Access is one distinct (world, pc, range, direction, word address) the plugin
// recorded: the first access's physical address, size and device, and how
// many accesses there were.
type Access struct {
	World, Range string
	PC, PA       uint64
	Write, IO    bool
	Size         int
	Device       string
	Count        uint64
	// Via are the world's last branch-and-link sites before the first
	// access, most recent first: the calls that led to it (a trail, not a
	// stack: see nwaccess.c).
	Via []uint64
}

// AccessTotals are one world's counters.
type AccessTotals struct {
	Loads, Stores, IOLoads, IOStores, Violations, NoHWAddr, PAMismatch uint64
	// The first access whose hwaddr physical address differed from its
	// virtual address (see nwaccess.c: QEMU 7.2's phys_addr is wrong for
	// RAM blocks other than the first).
	MismatchPC, MismatchVA, MismatchPA uint64
}

// AccessReport is a plugin dump.
type AccessReport struct {
	Accesses []Access
	Totals   map[string]AccessTotals
	// Distinct records kept, and those past the plugin's table (their
	// accesses are still counted in Totals' Violations).
	Records, Dropped uint64
}

// Report asks the plugin for its records now.
func (p *AccessPlugin) Report() (AccessReport, error) {
	if err := RequestPluginDump(p.out); err != nil {
		return AccessReport{}, fmt.Errorf("qemu: the access plugin: %w", err)
	}
	b, err := os.ReadFile(p.out)
	if err != nil {
		return AccessReport{}, err
	}
	return ParseAccessReport(string(b))
}

// ParseAccessReport reads the plugin's report (nwaccess.c's format).
func ParseAccessReport(s string) (AccessReport, error) {
	r := AccessReport{Totals: map[string]AccessTotals{}}
	for _, line := range strings.Split(s, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		kv := map[string]string{}
		for _, x := range f[1:] {
			k, v, ok := strings.Cut(x, "=")
			if !ok {
				return r, fmt.Errorf("qemu: access report line %q", line)
			}
			kv[k] = v
		}
		var bad error
		u := func(k string) uint64 {
			v, err := strconv.ParseUint(kv[k], 0, 64)
			if err != nil && bad == nil {
				bad = fmt.Errorf("qemu: access report line %q: %s: %w", line, k, err)
			}
			return v
		}
		switch f[0] {
		case "V":
			a := Access{World: kv["world"], Range: kv["range"], PC: u("pc"), PA: u("pa"),
				Write: kv["dir"] == "w", IO: kv["io"] == "1", Size: int(u("size")), Device: kv["dev"], Count: u("count")}
			if v := kv["via"]; v != "-" && v != "" {
				for _, x := range strings.Split(v, ",") {
					pc, err := strconv.ParseUint(x, 0, 64)
					if err != nil {
						return r, fmt.Errorf("qemu: access report line %q: via: %w", line, err)
					}
					a.Via = append(a.Via, pc)
				}
			}
			r.Accesses = append(r.Accesses, a)
		case "T":
			r.Totals[kv["world"]] = AccessTotals{Loads: u("loads"), Stores: u("stores"), IOLoads: u("io_loads"),
				IOStores: u("io_stores"), Violations: u("violations"), NoHWAddr: u("no_hwaddr"), PAMismatch: u("pa_mismatch"),
				MismatchPC: u("mismatch_pc"), MismatchVA: u("mismatch_va"), MismatchPA: u("mismatch_pa")}
		case "E":
			r.Records, r.Dropped = u("records"), u("dropped")
		default:
			return r, fmt.Errorf("qemu: access report line %q", line)
		}
		if bad != nil {
			return r, bad
		}
	}
	sort.Slice(r.Accesses, func(i, j int) bool {
		a, b := r.Accesses[i], r.Accesses[j]
		if a.World != b.World {
			return a.World < b.World
		}
		if a.Range != b.Range {
			return a.Range < b.Range
		}
		return a.PC < b.PC
	})
	return r, nil
}

// Of returns the accesses of world.
func (r AccessReport) Of(world string) []Access {
	var as []Access
	for _, a := range r.Accesses {
		if a.World == world {
			as = append(as, a)
		}
	}
	return as
}

// Symbolizer names code addresses from an ELF's function symbols.
type Symbolizer struct {
	starts []uint64
	ends   []uint64
	names  []string
}

// NewSymbolizer reads elfPath's sized symbols.
func NewSymbolizer(elfPath string) (*Symbolizer, error) {
	syms, err := elfSymbols(elfPath)
	if err != nil {
		return nil, err
	}
	type sym struct {
		name   string
		lo, hi uint64
	}
	var ss []sym
	for n, r := range syms {
		ss = append(ss, sym{n, r[0], r[1]})
	}
	sort.Slice(ss, func(i, j int) bool { return ss[i].lo < ss[j].lo || ss[i].lo == ss[j].lo && ss[i].name < ss[j].name })
	s := &Symbolizer{}
	for _, x := range ss {
		s.starts, s.ends, s.names = append(s.starts, x.lo), append(s.ends, x.hi), append(s.names, x.name)
	}
	return s, nil
}

// Name returns "symbol+0xoff" for pc, or "?" when no symbol holds it.
func (s *Symbolizer) Name(pc uint64) string {
	i := sort.Search(len(s.starts), func(i int) bool { return s.starts[i] > pc }) - 1
	for ; i >= 0; i-- { // the nearest symbol at or below pc that holds it
		if pc < s.ends[i] {
			return fmt.Sprintf("%s+%#x", s.names[i], pc-s.starts[i])
		}
		if pc-s.starts[i] > 1<<20 {
			break
		}
	}
	return "?"
}
