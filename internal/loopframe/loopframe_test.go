package loopframe

import (
	"bytes"
	"strings"
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

// TestReturns: a frame back as sent passes; a byte changed is named with
// its offset; a second copy, a short frame, an unknown ID, a bad checksum
// claimed verified each fail; and the frames that never came back are
// named.
func TestReturns(t *testing.T) {
	mac := [6]byte{2, 0, 0, 0, 0, 7}
	set := Set(mac)
	r := NewReturns(set)
	if id, bad := r.Frame(set[3].Want, true); id != 3 || bad != "" {
		t.Fatalf("frame 3 as sent: %d %q", id, bad)
	}
	if _, bad := r.Frame(set[3].Want, true); !strings.Contains(bad, "twice") {
		t.Errorf("a second copy: %q", bad)
	}
	f := bytes.Clone(set[4].Want)
	f[50] ^= 1
	if _, bad := r.Frame(f, true); !strings.Contains(bad, "byte 50") {
		t.Errorf("a changed byte: %q", bad)
	}
	if _, bad := r.Frame(set[5].Want[:40], true); !strings.Contains(bad, "came back with 40 bytes") {
		t.Errorf("a short frame: %q", bad)
	}
	last := len(set) - 1
	if _, bad := r.Frame(set[last].Want, true); !strings.Contains(bad, "claimed verified") {
		t.Errorf("a bad checksum claimed: %q", bad)
	}
	g := bytes.Clone(set[0].Want)
	g[18], g[19] = 0xff, 0xff
	if id, bad := r.Frame(g, false); id != -1 || !strings.Contains(bad, "none was sent") {
		t.Errorf("an unknown ID: %d %q", id, bad)
	}
	if m := r.Missing(); !strings.HasPrefix(m, "frame 0 ") {
		t.Errorf("missing: %q", m)
	}
}
