// Package worldloop runs the Normal World from the Trusted OS: GoTEE's
// ExecCtx.Run, with IRQs masked immediately before every world switch.
//
// GoTEE's Schedule installs the monitor vector table (which TamaGo also
// makes the Secure World's vector table) before it calls ExecCtx.MMU, and
// Run yields to other goroutines (runtime.Gosched) between switches. A
// goroutine that unmasks IRQs (TamaGo's arm.ServiceInterrupts re-enables
// them from a goroutine of its own) can run in that yield, and an IRQ taken
// between the vector install and the switch enters GoTEE's monitor IRQ
// handler on the Secure World's state: it overwrites the Secure SP_irq,
// saves Secure registers and VFP state into the Normal World's context and
// resumes from a stale stack. So the loop masks IRQs as the last thing
// before each Schedule, after any yield (a review of issue 32's world
// switch found the race).
package worldloop

// World is the part of GoTEE's monitor.ExecCtx the loop drives (an
// interface so the order can be tested on the host).
type World interface {
	// Schedule runs the world until it takes an exception.
	Schedule() error
	// Handle serves that exception (the ExecCtx's Handler).
	Handle() error
	// Resume prepares the return into the world after an interrupt
	// (GoTEE's Run steps R15 back by 4 for IRQ and FIQ).
	Resume()
}

// Run switches into w until Handle fails, Schedule fails or stop reports
// true, masking IRQs with mask immediately before each switch and yielding
// with yield after each exception is handled.
func Run(w World, mask func(), yield func(), stop func() bool) error {
	for !stop() {
		mask()
		if err := w.Schedule(); err != nil {
			return err
		}
		if err := w.Handle(); err != nil {
			return err
		}
		w.Resume()
		yield()
	}
	return nil
}
