package fec

import (
	"fmt"
	"strings"
)

// Quirk is a capability or erratum of one ENET integration. The driver
// branches on quirks, never on SoC names.
type Quirk uint32

// Quirks (after Linux's FEC_QUIRK_* set for the same parts).
const (
	// QuirkEnhancedBD: 32-byte enhanced descriptors (ECR.EN1588) with
	// per-descriptor checksum and interrupt control.
	QuirkEnhancedBD Quirk = 1 << iota
	// QuirkCsum: TX checksum insertion (PINS/IINS) and RX checksum
	// verdicts (ICE/PCR) for IPv4 and IPv6 TCP/UDP.
	QuirkCsum
	// QuirkGbit: 1000 Mb/s over RGMII.
	QuirkGbit
	// QuirkRACC: ENETx_RACC exists (SHIFT16, checksum discard).
	QuirkRACC
	// QuirkCoalesce: interrupt coalescing registers (left off).
	QuirkCoalesce
	// QuirkMultiQueue: three TX/RX rings and AVB (only ring 0 is used).
	QuirkMultiQueue
	// QuirkClearSetupMII: write MMFR=0 before the first MSCR write or a
	// spurious MII event may be raised.
	QuirkClearSetupMII
	// QuirkERR007885 (i.MX6SX, 6UL/ULL, 7D): writing TDAR in the cycles in
	// which the uDMA clears it can hang the TX state machine. Workaround:
	// read TDAR up to four times and write it only if a read returns 0.
	QuirkERR007885
)

var quirkNames = []string{"enhanced-bd", "csum", "gbit", "racc", "coalesce", "multi-queue",
	"clear-setup-mii", "ERR007885"}

func (q Quirk) String() string {
	var s []string
	for i, n := range quirkNames {
		if q&(1<<i) != 0 {
			s = append(s, n)
		}
	}
	return strings.Join(s, "|")
}

// Caps describes one ENET integration.
type Caps struct {
	Name   string
	Quirks Quirk
	// TxAlign is the start alignment TX buffers need; RxAlign that of RX
	// buffers. Linux enforces 16 on i.MX6Q/DL/UL and none (TX) / 64 (RX)
	// on the multi-queue parts (i.MX6SX, i.MX7D).
	TxAlign, RxAlign int
	// RingAlign is the alignment of descriptor rings (the hardware masks the
	// low 3 bits; 64 keeps each enhanced descriptor in one cache line).
	RingAlign int
	// MaxFrame is the longest frame (without FCS) the driver configures:
	// RCR.MAX_FL and the RX buffer size follow from it. 1984 is Linux's
	// PKT_MAXBUF_SIZE for these parts; none of them does jumbo frames in
	// Linux.
	MaxFrame int
	// Has100Only is set on parts whose MAC is 10/100 only.
	Has100Only bool
}

// Has reports whether all quirks in q are set.
func (c Caps) Has(q Quirk) bool { return c.Quirks&q == q }

// SoC names an i.MX part with an ENET.
type SoC int

// Supported SoCs.
const (
	IMX6UL SoC = iota + 1
	IMX6ULL
	IMX6Q // also i.MX6DL and 6QP
	IMX6SX
	IMX7D
)

func (s SoC) String() string {
	if c, err := CapsFor(s); err == nil {
		return c.Name
	}
	return fmt.Sprintf("SoC(%d)", int(s))
}

// CapsFor returns the capability table entry of soc.
func CapsFor(soc SoC) (Caps, error) {
	common := QuirkEnhancedBD | QuirkCsum | QuirkRACC | QuirkClearSetupMII
	switch soc {
	case IMX6UL, IMX6ULL:
		name := "i.MX6UL"
		if soc == IMX6ULL {
			name = "i.MX6ULL"
		}
		// Linux flags HAS_GBIT here, but the 6UL ENET is 10/100 only.
		return Caps{Name: name, Quirks: common | QuirkCoalesce | QuirkERR007885,
			TxAlign: 16, RxAlign: 64, RingAlign: 64, MaxFrame: 1984, Has100Only: true}, nil
	case IMX6Q:
		return Caps{Name: "i.MX6Q/DL", Quirks: common | QuirkGbit,
			TxAlign: 16, RxAlign: 64, RingAlign: 64, MaxFrame: 1984}, nil
	case IMX6SX, IMX7D:
		name := "i.MX6SX"
		if soc == IMX7D {
			name = "i.MX7D"
		}
		return Caps{Name: name, Quirks: common | QuirkGbit | QuirkCoalesce | QuirkMultiQueue | QuirkERR007885,
			TxAlign: 1, RxAlign: 64, RingAlign: 64, MaxFrame: 1984}, nil
	}
	return Caps{}, fmt.Errorf("fec: no capability table for SoC %d", soc)
}

// AllSoCs lists every SoC CapsFor knows.
var AllSoCs = []SoC{IMX6UL, IMX6ULL, IMX6Q, IMX6SX, IMX7D}
