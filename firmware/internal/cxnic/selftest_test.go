package cxnic

import (
	"strings"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/tamanic/tamanic/connectx"
	"github.com/tamanic/tamanic/connectx/connectxtest"
	"github.com/tamanic/tamanic/internal/stacktest"
	"github.com/tamanic/tamanic/netstack"
)

// TestRunTimeSelfTest: POST /selftest's path (Controls.SelfTest) with
// the endpoint attached to a stack and receiving: the gate keeps the
// endpoint off the NIC, so every test frame comes back to the test, the
// console lines are the boot's, the report counts no failure, and the
// test's send completions never reach the endpoint.
func TestRunTimeSelfTest(t *testing.T) {
	rig := connectxtest.NewRig(t, connectxtest.RigOptions{NoDone: true})
	dev := &Device{NIC: rig.NIC}
	ep, err := netstack.New(netstack.Options{Device: dev, TSO: true, PollInterval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	s := stack.New(stack.Options{NetworkProtocols: []stack.NetworkProtocolFactory{ipv4.NewProtocol}})
	if err := s.CreateNIC(1, ep); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(); s.Wait() })
	stop := stacktest.Serve(rig.Model.Activity(), dev.Poll)
	t.Cleanup(stop)
	var con logBuf
	st := &selfTests{console: &con}
	for k := 0; k < 3; k++ {
		res, counts, err := dev.SelfTest(connectx.SelfTestOptions{})
		r := st.record(res, counts, err, "run time")
		if r.Failures != 0 || r.Error != "" || len(r.Results) != 2 {
			t.Fatalf("run %d: %+v\nconsole:\n%s", k, r, con.String())
		}
	}
	if n := strings.Count(con.String(), "SELFTEST cx0 mode="); n != 6 || strings.Count(con.String(), " ok ") != 6 {
		t.Errorf("console:\n%s", con.String())
	}
	if got := st.snapshot(); got.When != "run time" || len(got.Results) != 2 {
		t.Errorf("snapshot %+v", got)
	}
	if es := ep.Stats(); es.RxPackets != 0 {
		t.Errorf("the endpoint received %d frames during the self-tests", es.RxPackets)
	}
}

// TestSelfTestReportCountsMissingFrames: a mode whose frames did not all
// come back counts a failure in the report even with no check failed,
// and an error is one too.
func TestSelfTestReportCountsMissingFrames(t *testing.T) {
	var con logBuf
	st := &selfTests{console: &con}
	r := st.record([]connectx.SelfTestResult{{Mode: "sg", Sent: 19, Returned: 18}}, connectx.SelfTestCounts{}, errString("x"), "boot")
	if r.Failures != 2 || !strings.Contains(con.String(), "SELFTEST cx0 mode=sg frames=19 FAIL") || !strings.Contains(con.String(), `SELFTEST cx0 error="x"`) {
		t.Errorf("%+v\n%s", r, con.String())
	}
}

type errString string

func (e errString) Error() string { return string(e) }
