package fectest

import (
	"github.com/tamanic/tamanic/fec"
)

func (m *Model) mibAdd(name string, v uint32) {
	if m.opts.NoMIB {
		return
	}
	off, ok := fec.MIBRegisterOffset(name)
	if !ok {
		panic("fectest: unknown MIB counter " + name)
	}
	m.mibAt(off, v)
}

func (m *Model) mibAt(off, v uint32) {
	if m.get(fec.ENETx_MIBC)&fec.MIBC_DIS == 0 {
		m.regs[off/4] += v
	}
}

// mibDir holds the offsets of the per-frame counters of one direction.
type mibDir struct {
	packets, octets, frameOK, octetsOK, bc, mc uint32
	buckets                                    [7]uint32 // 64, 65-127, ..., 1024-2047, >=2048
}

func mibOffsets(d string) mibDir {
	o := func(n string) uint32 {
		off, ok := fec.MIBRegisterOffset(n)
		if !ok {
			panic("fectest: unknown MIB counter " + n)
		}
		return off
	}
	r := mibDir{packets: o("RMON_" + d + "_PACKETS"), octets: o("RMON_" + d + "_OCTETS"),
		frameOK: o("IEEE_" + d + "_FRAME_OK"), octetsOK: o("IEEE_" + d + "_OCTETS_OK"),
		bc: o("RMON_" + d + "_BC_PKT"), mc: o("RMON_" + d + "_MC_PKT")}
	for i, b := range []string{"P64", "P65TO127", "P128TO255", "P256TO511", "P512TO1023", "P1024TO2047", "P_GTE2048"} {
		r.buckets[i] = o("RMON_" + d + "_" + b)
	}
	return r
}

var mibTx, mibRx = mibOffsets("T"), mibOffsets("R")

// mibFrame counts one good frame of direction d.
func (m *Model) mibFrame(d *mibDir, f []byte) {
	if m.opts.NoMIB {
		return
	}
	n := len(f) + 4
	m.mibAt(d.packets, 1)
	m.mibAt(d.octets, uint32(n))
	m.mibAt(d.frameOK, 1)
	m.mibAt(d.octetsOK, uint32(n))
	if f[0]&1 != 0 {
		if f[0] == 0xFF && f[1] == 0xFF {
			m.mibAt(d.bc, 1)
		} else {
			m.mibAt(d.mc, 1)
		}
	}
	b := 6
	for i, lim := range []int{64, 127, 255, 511, 1023, 2047} {
		if n <= lim {
			b = i
			break
		}
	}
	m.mibAt(d.buckets[b], 1)
}
