package banked

import (
	"testing"
	"unsafe"
)

// TestLayout: the assembly reads and writes Regs at fixed offsets.
func TestLayout(t *testing.T) {
	var r Regs
	for _, c := range []struct {
		name      string
		got, want uintptr
	}{
		{"IRQ", unsafe.Offsetof(r.IRQ), offIRQ},
		{"FIQ", unsafe.Offsetof(r.FIQ), offFIQ},
		{"ABT", unsafe.Offsetof(r.ABT), offABT},
		{"UND", unsafe.Offsetof(r.UND), offUND},
		{"SVC", unsafe.Offsetof(r.SVC), offSVC},
		{"FIQR8", unsafe.Offsetof(r.FIQR8), offFIQR8},
		{"size", unsafe.Sizeof(r), size},
		{"Mode.LR", unsafe.Offsetof(r.IRQ.LR), 4},
		{"Mode.SPSR", unsafe.Offsetof(r.IRQ.SPSR), 8},
	} {
		if c.got != c.want {
			t.Errorf("%s at %d, the assembly expects %d", c.name, c.got, c.want)
		}
	}
}
