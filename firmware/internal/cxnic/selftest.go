package cxnic

import (
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/tamanic/tamanic/connectx"
	"github.com/tamanic/tamanic/netstack"
	"github.com/tamanic/tamanic/tso"
)

// SelfTestReport is the ConnectX's /stats "nic.connectx.selftest"
// member: its loopback self-test (connectx.NIC.SelfTest) at boot, or the
// last run since (POST /selftest).
type SelfTestReport struct {
	// When is "boot" or "run time". Skipped: built with SELFTEST=off
	// (and none run since). Error: the test could not run, or the
	// loopback could not be restored.
	When    string                    `json:"when,omitempty"`
	Skipped bool                      `json:"skipped,omitempty"`
	Error   string                    `json:"error,omitempty"`
	Results []connectx.SelfTestResult `json:"results,omitempty"`
	// Counts is what the test added to the driver's counters.
	Counts connectx.SelfTestCounts `json:"counts"`
	// Failures counts the failed checks of every mode (a mode whose
	// frames did not all come back counts at least one): never hidden.
	Failures int `json:"failures"`
}

// selfTests keeps the last report and prints the console lines.
type selfTests struct {
	mu      sync.Mutex
	r       SelfTestReport
	console io.Writer
}

// record makes the report of one run, prints one line per mode
// ("SELFTEST cx0 mode=sg frames=19 ok 1.2ms", "... FAIL ..." or
// "... unsupported: ...") and the error, if any, and keeps it.
func (s *selfTests) record(res []connectx.SelfTestResult, counts connectx.SelfTestCounts, err error, when string) SelfTestReport {
	r := SelfTestReport{When: when, Results: res, Counts: counts}
	for _, x := range res {
		r.Failures += x.Failures
		if !x.OK() && !x.Unsupported && x.Failures == 0 {
			r.Failures++
		}
		fmt.Fprintf(s.console, "SELFTEST cx0 %s\n", x)
	}
	if err != nil {
		r.Error = err.Error()
		r.Failures++
		fmt.Fprintf(s.console, "SELFTEST cx0 error=%q\n", err.Error())
	}
	s.mu.Lock()
	s.r = r
	s.mu.Unlock()
	return r
}

// skip records a self-test skipped by the build.
func (s *selfTests) skip() {
	fmt.Fprintln(s.console, "SELFTEST cx0 skipped (SELFTEST=off)")
	s.mu.Lock()
	s.r = SelfTestReport{When: "boot", Skipped: true}
	s.mu.Unlock()
}

// snapshot returns a copy of the last report.
func (s *selfTests) snapshot() *SelfTestReport {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.r
	r.Results = append([]connectx.SelfTestResult(nil), r.Results...)
	return &r
}

// Device is the ConnectX as the endpoint's netstack.Device, with a gate
// that takes the NIC off the endpoint while its self-test runs (as
// fecdev.Device does for the ENET, as Linux's `ethtool -t ... offline`
// takes the interface down): transmits are refused as a full ring,
// receives and polls find nothing, and the test's own send completions
// (nil cookies) never reach the endpoint.
type Device struct {
	*connectx.NIC
	offline sync.RWMutex
}

// errOffline is a transmit refused while the self-test has the NIC.
var errOffline = fmt.Errorf("cxnic: ConnectX offline for its self-test: %w", connectx.ErrRingFull)

// SelfTest runs the NIC's self-test with the endpoint kept off it. It
// waits for endpoint calls in progress to return first.
func (d *Device) SelfTest(o connectx.SelfTestOptions) ([]connectx.SelfTestResult, connectx.SelfTestCounts, error) {
	d.offline.Lock()
	res, c, err := d.NIC.SelfTestCounted(o)
	d.offline.Unlock()
	d.NIC.Poll()
	return res, c, err
}

// SetTxDone implements netstack.Device: completions with a cookie (the
// endpoint's sends) reach f; the self-test's carry none.
func (d *Device) SetTxDone(f func(any, error)) {
	d.NIC.SetTxDone(func(c any, err error) {
		if c != nil && f != nil {
			f(c, err)
		}
	})
}

// Transmit implements netstack.Device.
func (d *Device) Transmit(frags [][]byte, csum bool, cookie any) error {
	if !d.offline.TryRLock() {
		return errOffline
	}
	defer d.offline.RUnlock()
	return d.NIC.Transmit(frags, csum, cookie)
}

// TransmitGSO implements netstack.Device.
func (d *Device) TransmitGSO(hdr []byte, payload [][]byte, o tso.Options, cookie any) error {
	if !d.offline.TryRLock() {
		return errOffline
	}
	defer d.offline.RUnlock()
	return d.NIC.TransmitGSO(hdr, payload, o, cookie)
}

// Full implements netstack.Device.
func (d *Device) Full(err error) bool { return errors.Is(err, connectx.ErrRingFull) }

// Poll implements netstack.Device.
func (d *Device) Poll() {
	if !d.offline.TryRLock() {
		return
	}
	defer d.offline.RUnlock()
	d.NIC.Poll()
}

// BeginRx implements netstack.RxGate: no receive while the self-test
// has the NIC.
func (d *Device) BeginRx() bool { return d.offline.TryRLock() }

// EndRx implements netstack.RxGate.
func (d *Device) EndRx() { d.offline.RUnlock() }

var (
	_ netstack.Device = (*Device)(nil)
	_ netstack.RxGate = (*Device)(nil)
)
