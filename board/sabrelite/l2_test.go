package sabrelite

import (
	"testing"

	"github.com/tamanic/tamanic/dma/dmatest"
)

// EnableL2 against the dma/dmatest PL310 model, which refuses (SLVERR)
// configuration writes with the L2 on, requires an invalidate of all ways
// before the enable, and reports erratum 752271 (double linefill on the
// i.MX6D/Q's r3p1-50rel0).
func TestEnableL2OnPL310Model(t *testing.T) {
	h := dmatest.NewHierarchy(0x10000000, 4096)
	r := h.PL310()
	if on, err := EnableL2(r, 10); !on || err != nil {
		t.Fatalf("on=%v err=%v", on, err)
	}
	if v := h.Take(); len(v) != 0 {
		t.Fatalf("violations: %v", v)
	}
	if r.Read32(L2_CTRL)&L2_CTRL_EN == 0 || r.Read32(L2_AUX_CTRL)&L2_AUX_SHARED_OVERRIDE == 0 ||
		r.Read32(L2_TAG_LATENCY) != 0x132 || r.Read32(L2_DATA_LATENCY) != 0x132 {
		t.Errorf("CTRL %#x AUX %#x latencies %#x %#x", r.Read32(L2_CTRL), r.Read32(L2_AUX_CTRL),
			r.Read32(L2_TAG_LATENCY), r.Read32(L2_DATA_LATENCY))
	}
	// Already on: nothing is rewritten (a rewrite would be a SLVERR).
	if on, err := EnableL2(r, 10); !on || err != nil {
		t.Fatalf("again: on=%v err=%v", on, err)
	}
	if v := h.Take(); len(v) != 0 {
		t.Fatalf("violations on a second call: %v", v)
	}
}

// A boot loader that left double linefill on with the L2 off: EnableL2
// clears it on r3p1 before enabling, and leaves it on r3p2 (fixed there).
func TestEnableL2Erratum752271(t *testing.T) {
	for _, c := range []struct {
		id   uint32
		want uint32
	}{{dmatest.PL310CacheIDIMX6Q, 0}, {0x410000C8, L2_PREFETCH_DBL_LINEFILL}} {
		h := dmatest.NewHierarchy(0x10000000, 4096)
		h.SetPL310ID(c.id)
		r := h.PL310()
		r.Write32(L2_PREFETCH_CTRL, L2_PREFETCH_DBL_LINEFILL)
		if on, err := EnableL2(r, 10); !on || err != nil {
			t.Fatalf("CACHE_ID %#x: on=%v err=%v", c.id, on, err)
		}
		if v := h.Take(); len(v) != 0 {
			t.Errorf("CACHE_ID %#x: violations %v", c.id, v)
		}
		if got := r.Read32(L2_PREFETCH_CTRL) & L2_PREFETCH_DBL_LINEFILL; got != c.want {
			t.Errorf("CACHE_ID %#x: double linefill %#x, want %#x", c.id, got, c.want)
		}
	}
}
