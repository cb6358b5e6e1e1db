package connectx_test

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/tamanic/tamanic/connectx/connectxtest"
)

// TestInlineModeFromCaps: the vport's min_wqe_inline_mode counts only
// when the Ethernet caps' wqe_inline_mode is 1 ("from the vport
// context"); for 0 the card wants L2 inline and for 2 nothing, and the SQ
// context's min_wqe_inline_mode is then left 0 (Linux
// mlx5_query_min_inline, mlx5e_create_sq). With a vport saying TCP/UDP
// (3) behind caps saying L2 or none, the driver opens, reports the mode
// the card applies, and frames go out.
func TestInlineModeFromCaps(t *testing.T) {
	for _, c := range []struct{ caps, want int }{{connectxtest.WQEInlineL2, 1}, {1, 3}, {2, 0}} {
		t.Run(fmt.Sprint(c.caps), func(t *testing.T) {
			a, _, w := pairRigs(t, connectxtest.RigOptions{Model: func(o *connectxtest.Options) {
				o.WQEInlineMode, o.MinInlineMode = c.caps, 3
			}})
			if got := a.NIC.Caps().MinInlineMode; got != c.want {
				t.Fatalf("MinInlineMode %d, want %d", got, c.want)
			}
			var got [][]byte
			w.SetTap(func(_ int, f []byte) { got = append(got, append([]byte(nil), f...)) })
			f := udp4(bytes.Repeat([]byte{7}, 300), true)
			if err := a.NIC.Transmit([][]byte{f[:20], f[20:]}, false, 1); err != nil {
				t.Fatal(err)
			}
			a.NIC.Poll()
			if d := a.Completions(); len(d) != 1 || d[0].Err != nil || len(got) != 1 || !bytes.Equal(got[0], f) {
				t.Fatalf("completions %+v, %d frames", d, len(got))
			}
		})
	}
}
