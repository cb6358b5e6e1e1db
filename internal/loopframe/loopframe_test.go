package loopframe

import (
	"bytes"
	"testing"

	"github.com/tamanic/tamanic/internal/pkttest"
)

// TestSet: every frame's fragments make up the frame, the good frames'
// checksums verify with an independent decoder (gopacket), the two bad
// ones' do not, IP IDs are the frames' indices, and Is knows the NIC's
// frames from another's.
func TestSet(t *testing.T) {
	mac := [6]byte{2, 0, 0, 0, 0, 7}
	set := Set(mac)
	if len(set) != len(Sizes)+2 {
		t.Fatalf("%d frames", len(set))
	}
	for i, f := range set {
		if got := bytes.Join(f.Frags, nil); !bytes.Equal(got, f.Want) {
			t.Errorf("frame %d: fragments make %d bytes, not the frame", i, len(got))
		}
		if id := int(f.Want[18])<<8 | int(f.Want[19]); id != i {
			t.Errorf("frame %d: IP ID %d", i, id)
		}
		err := pkttest.Checksums(f.Want)
		if f.Bad != (err != nil) {
			t.Errorf("frame %d (bad %v): checksums: %v", i, f.Bad, err)
		}
		if !Is(f.Want, mac) || Is(f.Want, [6]byte{2, 0, 0, 0, 0, 8}) {
			t.Errorf("frame %d: Is", i)
		}
	}
	if FirstDiff([]byte{1, 2, 3}, []byte{1, 2, 4}) != 2 || FirstDiff([]byte{1}, []byte{1}) != -1 {
		t.Error("FirstDiff")
	}
}
