package fec

// TxStats are the driver's TX counters.
type TxStats struct {
	Frames, Bytes uint64
	// Descs counts descriptors used; Descs/Frames is descriptors per frame.
	Descs uint64
	// Copied counts caller bytes copied into slots or bounce buffers
	// (padding included); HeaderBytes counts TSO segment headers built in
	// slots (not copies of caller memory); Cleaned counts bytes cleaned
	// from the data cache, rounded out to cache lines.
	Copied, HeaderBytes, Cleaned uint64
	// Direct counts frames sent without copying a byte; Bounced frames sent
	// from a full-frame bounce buffer.
	Direct, Bounced uint64
	// Rejected frames (not queued; the caller keeps them).
	RingFull, TooLong, TooShort, MapErrors, CsumErrors uint64
	// Completed with an error reported by the MAC.
	Errors, Underflow, LateCollision, ExcessCollision, FrameError uint64
	// GSOPackets were segmented in software into GSOSegments frames (each
	// also counted in Frames); GSOErrors were refused or cut short.
	GSOPackets, GSOSegments, GSOErrors uint64
	// Rekicks counts ERR006358 re-kicks; KicksSkipped counts TDAR writes
	// skipped by the ERR007885 rule because the uDMA was still active.
	Rekicks, KicksSkipped uint64
}

// RxStats are the driver's RX counters.
type RxStats struct {
	Frames, Bytes uint64
	// Copybreak frames were copied (Copied bytes); ZeroCopy frames were
	// handed up in their ring buffer.
	Copybreak, ZeroCopy, Copied uint64
	// Invalidated counts bytes invalidated in the data cache.
	Invalidated uint64
	// Dropped frames, by cause.
	CRC, Overrun, TooLong, Truncated, NonOctet, MACError, MultiBuffer, Runt, NoBuffer uint64
	// CsumFlagged counts IP frames delivered with ICE or PCR set: bad
	// checksums, fragments, short or unknown payloads. They are not dropped;
	// nothing is claimed verified and the stack checks them.
	CsumFlagged uint64
	// DoubleRelease counts Packet.Release calls on a released packet.
	DoubleRelease uint64
	// BDUPending counts polls that found a descriptor with E clear but BDU
	// not yet set (the frame was taken on a later poll).
	BDUPending uint64
	// Skipped counts good frames the caller dropped in place (Peek, then
	// DropNext) instead of taking them.
	Skipped uint64
}

func (s *RxStats) count(k RxErrorKind) {
	switch k {
	case RxCRC:
		s.CRC++
	case RxOverrun:
		s.Overrun++
	case RxTooLong:
		s.TooLong++
	case RxTruncated:
		s.Truncated++
	case RxNonOctet:
		s.NonOctet++
	case RxMACError:
		s.MACError++
	case RxMultiBuffer:
		s.MultiBuffer++
	case RxRunt:
		s.Runt++
	}
}

// Dropped returns the total of frames dropped on receive.
func (s RxStats) Dropped() uint64 {
	return s.CRC + s.Overrun + s.TooLong + s.Truncated + s.NonOctet + s.MACError + s.MultiBuffer + s.Runt + s.NoBuffer
}

type evStats struct {
	busErrors, restarts, mdioTimeouts  uint64
	resetTimeouts                      uint64
	linkUps, linkDowns, linkUnresolved uint64
}

// Stats is a snapshot of all driver counters.
type Stats struct {
	Tx TxStats
	Rx RxStats
	// BusErrors counts EBERR events; Restarts counts MAC restarts (init,
	// link changes and bus-error recovery).
	BusErrors, Restarts, MDIOTimeouts uint64
	// ResetTimeouts counts restarts whose MAC reset did not complete
	// (ErrResetTimeout).
	ResetTimeouts uint64
	// Link is the link the MAC runs (Up false while the PHY reports none).
	Link Link
	// LinkUps and LinkDowns count link transitions seen by StartLink and
	// PollLink (LinkDowns counts flaps); LinkUnresolved counts links the
	// PHY reported up without a mode both ends advertise.
	LinkUps, LinkDowns, LinkUnresolved uint64
}

// Stats returns a consistent snapshot of the counters.
func (n *NIC) Stats() Stats {
	n.ctl.Lock()
	defer n.ctl.Unlock()
	n.tx.mu.Lock()
	tx := n.tx.stats
	n.tx.mu.Unlock()
	n.rx.mu.Lock()
	rx := n.rx.stats
	n.rx.mu.Unlock()
	return Stats{Tx: tx, Rx: rx, BusErrors: n.ev.busErrors, Restarts: n.ev.restarts, MDIOTimeouts: n.ev.mdioTimeouts,
		ResetTimeouts: n.ev.resetTimeouts,
		Link:          n.link, LinkUps: n.ev.linkUps, LinkDowns: n.ev.linkDowns, LinkUnresolved: n.ev.linkUnresolved}
}

// MIB counter registers (22.5.36 onward, "MIB block counters", IMX6ULLRM).
// The hardware counts from reset; Init records a baseline and MIB reports
// the difference, so no reserved location is ever written.
var mibTable = [...]struct {
	name string
	off  uint32
}{
	{"RMON_T_DROP", 0x200}, {"RMON_T_PACKETS", 0x204}, {"RMON_T_BC_PKT", 0x208}, {"RMON_T_MC_PKT", 0x20C},
	{"RMON_T_CRC_ALIGN", 0x210}, {"RMON_T_UNDERSIZE", 0x214}, {"RMON_T_OVERSIZE", 0x218}, {"RMON_T_FRAG", 0x21C},
	{"RMON_T_JAB", 0x220}, {"RMON_T_COL", 0x224}, {"RMON_T_P64", 0x228}, {"RMON_T_P65TO127", 0x22C},
	{"RMON_T_P128TO255", 0x230}, {"RMON_T_P256TO511", 0x234}, {"RMON_T_P512TO1023", 0x238},
	{"RMON_T_P1024TO2047", 0x23C}, {"RMON_T_P_GTE2048", 0x240}, {"RMON_T_OCTETS", 0x244},
	{"IEEE_T_DROP", 0x248}, {"IEEE_T_FRAME_OK", 0x24C}, {"IEEE_T_1COL", 0x250}, {"IEEE_T_MCOL", 0x254},
	{"IEEE_T_DEF", 0x258}, {"IEEE_T_LCOL", 0x25C}, {"IEEE_T_EXCOL", 0x260}, {"IEEE_T_MACERR", 0x264},
	{"IEEE_T_CSERR", 0x268}, {"IEEE_T_SQE", 0x26C}, {"IEEE_T_FDXFC", 0x270}, {"IEEE_T_OCTETS_OK", 0x274},
	{"RMON_R_PACKETS", 0x284}, {"RMON_R_BC_PKT", 0x288}, {"RMON_R_MC_PKT", 0x28C}, {"RMON_R_CRC_ALIGN", 0x290},
	{"RMON_R_UNDERSIZE", 0x294}, {"RMON_R_OVERSIZE", 0x298}, {"RMON_R_FRAG", 0x29C}, {"RMON_R_JAB", 0x2A0},
	{"RMON_R_P64", 0x2A8}, {"RMON_R_P65TO127", 0x2AC}, {"RMON_R_P128TO255", 0x2B0}, {"RMON_R_P256TO511", 0x2B4},
	{"RMON_R_P512TO1023", 0x2B8}, {"RMON_R_P1024TO2047", 0x2BC}, {"RMON_R_P_GTE2048", 0x2C0},
	{"RMON_R_OCTETS", 0x2C4}, {"IEEE_R_DROP", 0x2C8}, {"IEEE_R_FRAME_OK", 0x2CC}, {"IEEE_R_CRC", 0x2D0},
	{"IEEE_R_ALIGN", 0x2D4}, {"IEEE_R_MACERR", 0x2D8}, {"IEEE_R_FDXFC", 0x2DC}, {"IEEE_R_OCTETS_OK", 0x2E0},
}

const mibCount = len(mibTable)

// MIBCounter is one named hardware counter.
type MIBCounter struct {
	Name   string
	Offset uint32
	Value  uint32
}

// MIB reads the hardware MIB counters (since the last restart). QEMU does
// not implement them: there every value reads 0.
func (n *NIC) MIB() []MIBCounter {
	n.ctl.Lock()
	defer n.ctl.Unlock()
	out := make([]MIBCounter, mibCount)
	for i, c := range mibTable {
		out[i] = MIBCounter{Name: c.name, Offset: c.off, Value: n.regs.Read32(c.off) - n.mib0[i]}
	}
	return out
}

// MIBRegisterOffset returns the offset of the MIB counter called name, for
// device models.
func MIBRegisterOffset(name string) (uint32, bool) {
	for _, c := range mibTable {
		if c.name == name {
			return c.off, true
		}
	}
	return 0, false
}
