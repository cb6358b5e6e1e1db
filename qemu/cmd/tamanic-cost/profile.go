package main

import (
	"bufio"
	"debug/elf"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/tamanic/tamanic/qemu"
)

// profiler drives the icprof plugin: it asks for a dump of the counters
// (by creating dump.req, which the plugin removes once dump is written)
// and symbolizes them.
type profiler struct {
	so, dump string
	syms     []symbol
	entries  []string // "entry=lo-hi" ranges of the -callers functions
}

type symbol struct {
	lo, hi uint64
	name   string
}

func newProfiler(dir, elfPath, callers string) (*profiler, error) {
	so, err := buildPlugin(dir)
	if err != nil {
		return nil, err
	}
	syms, err := loadSymbols(elfPath)
	if err != nil {
		return nil, err
	}
	p := &profiler{so: so, dump: filepath.Join(dir, "icprof.dump"), syms: syms}
	os.Remove(p.dump)
	os.Remove(p.dump + ".req")
	for _, name := range strings.Split(callers, ",") {
		if name == "" {
			continue
		}
		found := false
		for _, s := range syms {
			if s.name == name {
				p.entries = append(p.entries, fmt.Sprintf("entry=%#x-%#x", s.lo, s.hi))
				found = true
			}
		}
		if !found {
			return nil, fmt.Errorf("-callers: no function %q in %s", name, elfPath)
		}
	}
	return p, nil
}

func (p *profiler) qemuArgs() []string {
	return []string{"-plugin", strings.Join(append([]string{p.so, "out=" + p.dump}, p.entries...), ",")}
}

func loadSymbols(path string) ([]symbol, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	ss, err := f.Symbols()
	if err != nil {
		return nil, err
	}
	var out []symbol
	for _, s := range ss {
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC || s.Size > 0 && s.Section > 0 && s.Section < elf.SHN_LORESERVE &&
			int(s.Section) < len(f.Sections) && f.Sections[s.Section].Flags&elf.SHF_EXECINSTR != 0 {
			out = append(out, symbol{s.Value, s.Value + s.Size, s.Name})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].lo < out[j].lo })
	return out, nil
}

func (p *profiler) lookup(pc uint64) string {
	i := sort.Search(len(p.syms), func(i int) bool { return p.syms[i].lo > pc }) - 1
	if i >= 0 && pc < p.syms[i].hi {
		return p.syms[i].name
	}
	return fmt.Sprintf("?%#x", pc)
}

// edgeTag marks caller->callee counts in a snapshot (the plugin's
// keys are caller<<32 | callee, guest addresses below 2^31 after the tag
// is taken off: the firmware runs at 0x8xxxxxxx).
const edgeTag = 1 << 62

// snapshot asks the plugin for its counters: instructions by translation
// block start, and (with -callers) calls by caller and callee.
func (p *profiler) snapshot() (map[uint64]uint64, error) {
	if err := qemu.RequestPluginDump(p.dump); err != nil {
		return nil, err
	}
	f, err := os.Open(p.dump)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	m := map[uint64]uint64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		edge := len(fs) == 3 && fs[0] == "E"
		if edge {
			fs = fs[1:]
		}
		if len(fs) != 2 {
			continue
		}
		k, err1 := strconv.ParseUint(fs[0], 16, 64)
		c, err2 := strconv.ParseUint(fs[1], 10, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		if edge {
			k ^= edgeTag
		}
		m[k] = c
	}
	return m, sc.Err()
}

type share struct {
	name string
	n    float64
}

func sorted(m map[string]float64) []share {
	var s []share
	for k, v := range m {
		s = append(s, share{k, v})
	}
	sort.Slice(s, func(i, j int) bool { return s[i].n > s[j].n || s[i].n == s[j].n && s[i].name < s[j].name })
	return s
}

// report prints the instructions executed between two snapshots, per MiB:
// by stage, by function (the top n), and the calls counted by caller.
func (p *profiler) report(w io.Writer, a, b map[uint64]uint64, mib float64, n int) {
	fn, st, calls := map[string]float64{}, map[string]float64{}, map[string]float64{}
	total := 0.0
	for k, c := range b {
		d := float64(c - a[k])
		if d <= 0 {
			continue
		}
		if k&edgeTag != 0 {
			caller, callee := (k>>32)&^(edgeTag>>32)|0x80000000, k&0xFFFFFFFF
			calls[p.lookup(callee)+" <- "+p.lookup(caller)] += d
			continue
		}
		name := p.lookup(k)
		fn[name] += d
		st[qemu.Stage(name)] += d
		total += d
	}
	fmt.Fprintf(w, "  instructions counted: %.3f M per MiB\n", total/mib/1e6)
	for _, s := range sorted(st) {
		fmt.Fprintf(w, "    %8.3f M %5.1f%%  %s\n", s.n/mib/1e6, 100*s.n/total, s.name)
	}
	for i, s := range sorted(fn) {
		if i == n {
			break
		}
		fmt.Fprintf(w, "    %8.0f k %5.1f%%  %s\n", s.n/mib/1e3, 100*s.n/total, s.name)
	}
	for i, s := range sorted(calls) {
		if i == n {
			break
		}
		fmt.Fprintf(w, "    %8.0f calls per MiB  %s\n", s.n/mib, s.name)
	}
}
