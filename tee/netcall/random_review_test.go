package netcall_test

import (
	"errors"
	"testing"

	"github.com/tamanic/tamanic/tee/netcall"
)

// TestReadRandomFailureNeedsNoRuntime: the Normal World's
// goos.GetRandomData (firmware/mx6ullevk-tee/normal/board.go) calls
// ReadRandom from the runtime's randinit, inside schedinit: before
// procresize gives the bootstrap M a P, with globalRand.lock held and the
// MMU off (runtime/proc.go schedinit, runtime/rand.go randinit). Its
// failure path must therefore be as register-only as its success path
// (the package doc's "in registers"): fmt.Errorf takes fmt's printer from
// a sync.Pool, whose pin reads m.p.ptr().id with m.p nil (address 0,
// which with the MMU off is the boot ROM, not a fault), and allocates.
// The failure path must not allocate; the status must still be
// recognisable (errors.Is StatusClosed).
func TestReadRandomFailureNeedsNoRuntime(t *testing.T) {
	closed := fakeSecure(func(netcall.Op, uint32, uint32, uint32) (netcall.Status, uint32) {
		return netcall.StatusClosed, 0
	})
	b := make([]byte, 32)
	var err error
	allocs := testing.AllocsPerRun(100, func() { err = netcall.ReadRandom(closed, b) })
	if !errors.Is(err, netcall.StatusClosed) {
		t.Fatalf("failing source: %v, want closed", err)
	}
	if allocs != 0 {
		t.Errorf("ReadRandom's failure path allocates %v times (fmt.Errorf): not safe in randinit, before the runtime has a P", allocs)
	}
}
