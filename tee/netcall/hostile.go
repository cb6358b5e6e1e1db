package netcall

import (
	"fmt"
	"math"
)

// HostileCall is one malformed world call and the status the Secure World
// must answer it with. The table (HostileCalls) is run by the host tests
// and by the Normal World firmware's hostile-call mode alike.
type HostileCall struct {
	Name string
	// Prepare writes what the call points at into the region (nil: the
	// call is registers only).
	Prepare    func(region []byte)
	Op         Op
	R1, R2, R3 uint32
	Want       Status
}

// HostileScratch is where in the region HostileCalls puts its descriptors
// and data: past the Normal World device's areas, so the calls can run
// while the device serves traffic.
const HostileScratch = miscOff + miscSize

// hostileDesc returns a Prepare writing the descriptor d at
// HostileScratch and, after it, a frame-sized run of data (a minimal TCP
// header when tcp), so that only the field under test is wrong.
func hostileDesc(d TxDesc, raw func(b []byte)) func([]byte) {
	return func(r []byte) {
		b := r[HostileScratch:]
		clear(b[:4096])
		d.Encode(b)
		if raw != nil {
			raw(b)
		}
	}
}

// dataOff is where hostile descriptors' data sits.
const dataOff = HostileScratch + 512

// HostileCalls returns the table of malformed calls: every check the
// Secure World makes is hit at least once, with offsets and lengths at the
// region's edge, past it, and wrapping 32 bits.
func HostileCalls() []HostileCall {
	R := uint32(RegionSize)
	frame := func(n uint32) TxDesc { return TxDesc{Kind: KindFrame, Extents: []Extent{{dataOff, n}}} }
	gso := func(hl, pl uint32, mss uint16) TxDesc {
		return TxDesc{Kind: KindGSO, GSOType: GSOTCP, MSS: mss, CsumOffset: 16, Extents: []Extent{{dataOff, hl}, {dataOff + hl, pl}}}
	}
	one := func(d TxDesc) uint32 { return uint32(d.Size()) }
	calls := []HostileCall{
		// 0 and 1 are GoTEE's exit and write, which the Trusted OS serves
		// before the server; 2-5 (nanotime, getrandom, RPC) it does not
		// serve the Normal World.
		{Name: "op GoTEE nanotime", Op: 2, Want: StatusBadOp},
		{Name: "op GoTEE RPC response", Op: 5, Want: StatusBadOp},
		{Name: "op all ones", Op: math.MaxUint32, Want: StatusBadOp},
		{Name: "op next to the real ones", Op: OpRandom + 1, Want: StatusBadOp},
		{Name: "random r1 set", Op: OpRandom, R1: 4, Want: StatusBadField},
		{Name: "random r3 set", Op: OpRandom, R3: math.MaxUint32, Want: StatusBadField},
		{Name: "mode unknown strategy", Op: OpMode, R1: 2, Want: StatusBadField},
		{Name: "mode r3 set", Op: OpMode, R1: ModeSG, R3: 1, Want: StatusBadField},
		{Name: "wait past the limit", Op: OpWait, R1: MaxWaitMicros + 1, Want: StatusBadField},
		{Name: "wait all ones", Op: OpWait, R1: math.MaxUint32, Want: StatusBadField},
		{Name: "wait r2 set", Op: OpWait, R1: 0, R2: 1, Want: StatusBadField},
		{Name: "info past the end", Op: OpInfo, R1: R - 8, R2: InfoSize, Want: StatusBadRange},
		{Name: "info offset wraps", Op: OpInfo, R1: math.MaxUint32 - 3, R2: InfoSize, Want: StatusBadRange},
		{Name: "info too short", Op: OpInfo, R1: 0, R2: InfoSize - 1, Want: StatusBadLength},
		{Name: "stats past the end", Op: OpStats, R1: R - 16, R2: 4096, Want: StatusBadRange},
		{Name: "stats offset wraps", Op: OpStats, R1: math.MaxUint32, R2: 2, Want: StatusBadRange},
		{Name: "stats too short", Op: OpStats, R1: HostileScratch, R2: 8, Want: StatusBadLength},
		{Name: "receive count zero", Op: OpReceive, R1: HostileScratch, R2: 8192, R3: 0, Want: StatusBadCount},
		{Name: "receive count past the batch", Op: OpReceive, R1: HostileScratch, R2: 8192, R3: MaxRxBatch + 1, Want: StatusBadCount},
		{Name: "receive count all ones", Op: OpReceive, R1: HostileScratch, R2: 8192, R3: math.MaxUint32, Want: StatusBadCount},
		{Name: "receive area holds no frame", Op: OpReceive, R1: HostileScratch, R2: 64, R3: 1, Want: StatusBadLength},
		{Name: "receive area past the end", Op: OpReceive, R1: R - 1024, R2: 8192, R3: 4, Want: StatusBadRange},
		{Name: "receive area wraps", Op: OpReceive, R1: math.MaxUint32 - 4095, R2: 8192, R3: 4, Want: StatusBadRange},
		{Name: "receive area the size of memory", Op: OpReceive, R1: 0, R2: math.MaxUint32, R3: 4, Want: StatusBadRange},
		{Name: "transmit descriptor empty", Op: OpTransmit, R1: HostileScratch, R2: 0, Want: StatusBadLength},
		{Name: "transmit descriptor huge", Op: OpTransmit, R1: HostileScratch, R2: math.MaxUint32, Want: StatusBadLength},
		{Name: "transmit descriptor past the end", Prepare: hostileDesc(frame(60), nil), Op: OpTransmit, R1: R - 8, R2: one(frame(60)), Want: StatusBadRange},
		{Name: "transmit descriptor wraps", Op: OpTransmit, R1: math.MaxUint32 - 7, R2: 24, Want: StatusBadRange},
		{Name: "transmit r3 set", Prepare: hostileDesc(frame(60), nil), Op: OpTransmit, R1: HostileScratch, R2: one(frame(60)), R3: 1, Want: StatusBadField},
		{Name: "transmit no extents", Prepare: hostileDesc(frame(60), func(b []byte) { b[3] = 0 }), Op: OpTransmit, R1: HostileScratch, R2: TxDescHeader, Want: StatusBadCount},
		{Name: "transmit extents past the limit", Prepare: hostileDesc(frame(60), func(b []byte) { b[3] = MaxExtents + 1 }), Op: OpTransmit, R1: HostileScratch,
			R2: TxDescHeader + TxExtentSize*MaxExtents, Want: StatusBadCount},
		{Name: "transmit extent count 255", Prepare: hostileDesc(frame(60), func(b []byte) { b[3] = 255 }), Op: OpTransmit, R1: HostileScratch, R2: one(frame(60)), Want: StatusBadCount},
		{Name: "transmit length disagrees with the count", Prepare: hostileDesc(frame(60), func(b []byte) { b[3] = 2 }), Op: OpTransmit, R1: HostileScratch, R2: one(frame(60)), Want: StatusBadLength},
		{Name: "transmit reserved word set", Prepare: hostileDesc(frame(60), func(b []byte) { b[9] = 1 }), Op: OpTransmit, R1: HostileScratch, R2: one(frame(60)), Want: StatusBadField},
		{Name: "transmit unknown flag", Prepare: hostileDesc(frame(60), func(b []byte) { b[1] = 0x80 }), Op: OpTransmit, R1: HostileScratch, R2: one(frame(60)), Want: StatusBadField},
		{Name: "transmit unknown kind", Prepare: hostileDesc(frame(60), func(b []byte) { b[0] = 7 }), Op: OpTransmit, R1: HostileScratch, R2: one(frame(60)), Want: StatusBadField},
		{Name: "transmit extent past the end", Prepare: hostileDesc(TxDesc{Kind: KindFrame, Extents: []Extent{{R - 30, 60}}}, nil), Op: OpTransmit, R1: HostileScratch, R2: one(frame(60)), Want: StatusBadRange},
		{Name: "transmit extent wraps", Prepare: hostileDesc(TxDesc{Kind: KindFrame, Extents: []Extent{{math.MaxUint32 - 15, 60}}}, nil), Op: OpTransmit, R1: HostileScratch, R2: one(frame(60)), Want: StatusBadRange},
		{Name: "transmit extent outside, second of two", Prepare: hostileDesc(TxDesc{Kind: KindFrame, Extents: []Extent{{dataOff, 30}, {0x10000000, 30}}}, nil), Op: OpTransmit, R1: HostileScratch, R2: TxDescHeader + 2*TxExtentSize, Want: StatusBadRange},
		{Name: "transmit extent empty", Prepare: hostileDesc(frame(0), nil), Op: OpTransmit, R1: HostileScratch, R2: one(frame(0)), Want: StatusBadLength},
		{Name: "transmit frame too long", Prepare: hostileDesc(frame(4000), nil), Op: OpTransmit, R1: HostileScratch, R2: one(frame(4000)), Want: StatusBadLength},
		{Name: "transmit frame runt", Prepare: hostileDesc(frame(10), nil), Op: OpTransmit, R1: HostileScratch, R2: one(frame(10)), Want: StatusBadLength},
		{Name: "transmit frame with an MSS", Prepare: hostileDesc(TxDesc{Kind: KindFrame, MSS: 1000, Extents: []Extent{{dataOff, 60}}}, nil), Op: OpTransmit, R1: HostileScratch, R2: one(frame(60)), Want: StatusBadField},
		{Name: "transmit GSO unknown type", Prepare: hostileDesc(gso(54, 3000, 1448), func(b []byte) { b[2] = 9 }), Op: OpTransmit, R1: HostileScratch, R2: one(gso(54, 3000, 1448)), Want: StatusBadField},
		{Name: "transmit GSO header too short", Prepare: hostileDesc(gso(20, 3000, 1448), nil), Op: OpTransmit, R1: HostileScratch, R2: one(gso(20, 3000, 1448)), Want: StatusBadLength},
		{Name: "transmit GSO header too long", Prepare: hostileDesc(gso(MaxHeader+1, 3000, 1448), nil), Op: OpTransmit, R1: HostileScratch, R2: one(gso(MaxHeader+1, 3000, 1448)), Want: StatusBadLength},
		{Name: "transmit GSO payload too long", Prepare: hostileDesc(TxDesc{Kind: KindGSO, GSOType: GSOTCP, MSS: 1448, Extents: []Extent{{dataOff, 54}, {0, 40000}, {0, 40000}}}, nil), Op: OpTransmit, R1: HostileScratch,
			R2: TxDescHeader + 3*TxExtentSize, Want: StatusBadLength},
		{Name: "transmit GSO MSS zero", Prepare: hostileDesc(gso(54, 3000, 0), nil), Op: OpTransmit, R1: HostileScratch, R2: one(gso(54, 3000, 0)), Want: StatusBadField},
		{Name: "transmit GSO MSS beyond the frame", Prepare: hostileDesc(gso(54, 3000, 9000), nil), Op: OpTransmit, R1: HostileScratch, R2: one(gso(54, 3000, 9000)), Want: StatusBadField},
		// Every range is right; the header is zeros (no IPv4, no TCP):
		// the driver refuses to segment it.
		{Name: "transmit GSO header the driver cannot parse", Prepare: hostileDesc(gso(54, 3000, 1448), nil), Op: OpTransmit, R1: HostileScratch, R2: one(gso(54, 3000, 1448)), Want: StatusRefused},
	}
	for i := range calls {
		calls[i].Name = fmt.Sprintf("%02d %s", i, calls[i].Name)
	}
	return calls
}
