package connectx_test

import (
	"testing"

	"github.com/tamanic/tamanic/connectx/connectxtest"
	"github.com/tamanic/tamanic/internal/loopframe"
)

// TestModelSelfLoopbackBlocked: the model's rule, without the driver's
// self-test: with the vport's local loopback on (a firmware that does not
// let the driver turn it off at bring-up), a frame to the NIC's own
// address is kept out by the TIR (self_lb_block 0, as created) and does
// not reach the wire; with it off, it goes to the wire and does not come
// back.
func TestModelSelfLoopbackBlocked(t *testing.T) {
	for _, on := range []bool{true, false} {
		r := connectxtest.NewRig(t, connectxtest.RigOptions{Model: func(o *connectxtest.Options) { o.NoLocalLBCap = on }})
		var wire int
		r.Model.SetPeer(func([]byte) { wire++ })
		f := make([]byte, 100)
		loopframe.UDP(f, r.NIC.MAC(), 0, 0)
		if err := r.NIC.Transmit([][]byte{f}, true, nil); err != nil {
			t.Fatal(err)
		}
		r.NIC.Poll()
		if fr, err := r.NIC.Receive(); fr != nil || err != nil {
			t.Errorf("local loopback %v: received %v %v", on, fr, err)
		}
		st := r.Model.Stats()
		want := connectxtest.Stats{}
		if on {
			want.TxLoopback, want.RxSelfLBBlocked = 1, 1
		} else {
			want.TxFrames = 1
		}
		if st.TxLoopback != want.TxLoopback || st.RxSelfLBBlocked != want.RxSelfLBBlocked || st.TxFrames != want.TxFrames || wire != want.TxFrames {
			t.Errorf("local loopback %v: model %+v, wire %d", on, st, wire)
		}
	}
}
