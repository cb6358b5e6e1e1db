package netstack_test

import (
	"os"
	"testing"

	"gvisor.dev/gvisor/pkg/refs"
)

// TestMain turns on gVisor's reference leak checking: a PacketBuffer the
// endpoint failed to release (or released twice) fails the run.
func TestMain(m *testing.M) {
	refs.SetLeakMode(refs.LeaksPanic)
	code := m.Run()
	refs.DoLeakCheck()
	os.Exit(code)
}
