//go:build tamago && arm

package banked

// Save stores the current exception-mode banked registers in r.
//
//go:noescape
func Save(r *Regs)

// Load sets the exception-mode banked registers from r.
//
//go:noescape
func Load(r *Regs)
