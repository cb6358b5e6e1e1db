// Package mmio is the one door through which the project's drivers touch
// device registers.
//
// Drivers hold a Regs and never dereference addresses themselves, so the same
// driver runs on silicon (Block, built only for GOOS=tamago) and on the host
// against a device model that implements Regs.
package mmio

// Regs is a block of 32-bit memory-mapped registers addressed by byte offset
// from the block's base. Every access is a single 32-bit load or store, as the
// i.MX peripherals require.
type Regs interface {
	// Read32 returns the register at byte offset off.
	Read32(off uint32) uint32
	// Write32 stores v into the register at byte offset off.
	Write32(off uint32, v uint32)
}

// Recorder wraps a Regs and logs every access, for tests that assert on the
// register sequence a driver produces.
type Recorder struct {
	Regs Regs
	Log  []Access
}

// Access is one recorded register access.
type Access struct {
	Write bool
	Off   uint32
	Val   uint32
}

// Read32 reads through to the wrapped Regs and records the access.
func (r *Recorder) Read32(off uint32) uint32 {
	v := r.Regs.Read32(off)
	r.Log = append(r.Log, Access{Off: off, Val: v})
	return v
}

// Write32 writes through to the wrapped Regs and records the access.
func (r *Recorder) Write32(off, v uint32) {
	r.Regs.Write32(off, v)
	r.Log = append(r.Log, Access{Write: true, Off: off, Val: v})
}
