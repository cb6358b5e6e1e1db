package connectx_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/tamanic/tamanic/connectx"
	"github.com/tamanic/tamanic/connectx/connectxtest"
)

// TestJumboNeedsPortMTU: the port's MAC applies the port MTU (PMTU),
// whatever the vport context says, so an MTU beyond the port's reset
// value works only because the driver writes PMTU admin_mtu as Linux and
// Snabb do: a 4000-byte IP packet crosses whole. A port whose max_mtu is
// too small for the configured MTU fails Open with an error saying so.
func TestJumboNeedsPortMTU(t *testing.T) {
	jumbo := func(c *connectx.Config) { c.MTU, c.RxBufSize = 4000, 4096 }
	a, _, w := pairRigs(t, connectxtest.RigOptions{Config: jumbo})
	var got [][]byte
	w.SetTap(func(_ int, f []byte) { got = append(got, append([]byte(nil), f...)) })
	f := udp4(bytes.Repeat([]byte{0x5A}, 4000-28), true)
	if err := a.NIC.Transmit([][]byte{f[:100], f[100:]}, false, "jumbo"); err != nil {
		t.Fatal(err)
	}
	a.NIC.Poll()
	if d := a.Completions(); len(d) != 1 || d[0].Err != nil {
		t.Fatalf("completions %+v", d)
	}
	if len(got) != 1 || !bytes.Equal(got[0], f) {
		t.Fatalf("%d frames on the wire", len(got))
	}

	n, err, m, mem := open(t, func(o *connectxtest.Options) { o.PortMaxMTU = 1600 }, connectxtest.Faults{}, jumbo)
	if n != nil || err == nil || !strings.Contains(err.Error(), "port takes 1600") {
		if n != nil {
			n.Close()
		}
		t.Fatalf("Open with a port max_mtu of 1600 and MTU 4000: %v", err)
	}
	clean(t, m, mem)
}
