package connectx_test

import (
	"errors"
	"testing"

	"github.com/tamanic/tamanic/connectx"
	"github.com/tamanic/tamanic/connectx/connectxtest"
	"github.com/tamanic/tamanic/tso"
)

// TestLSOSegmentBeyondMTUIsRefused: an LSO request whose segments (headers +
// MSS) exceed the frame the port takes (MTU+18) is bad input: it must be
// refused at TransmitGSO with ErrBadPacket and counted, as an oversized
// plain frame is, not handed to the card, where the segment fails with an
// error CQE, moves the SQ to ERR and has every other queued send flushed.
func TestLSOSegmentBeyondMTUIsRefused(t *testing.T) {
	a, _, _ := pairRigs(t, connectxtest.RigOptions{})
	hdr := tcpHeaders(t, false, 6000, 0x08, true)
	err := a.NIC.TransmitGSO(hdr, [][]byte{make([]byte, 6000)}, tso.Options{Type: tso.TCP, MSS: 3000}, "big")
	a.NIC.Poll()
	if !errors.Is(err, connectx.ErrBadPacket) {
		t.Errorf("TransmitGSO with MSS 3000 on a 1500-byte MTU: %v, want ErrBadPacket", err)
	}
	if d := a.Completions(); len(d) != 0 || a.NIC.Stats().SQRecoveries != 0 {
		t.Errorf("completions %+v, SQ recoveries %d", d, a.NIC.Stats().SQRecoveries)
	}
}
