// Package boot holds the first instructions the firmware runs, in place of
// TamaGo's arm package start-up, when built with the linkcpuinit tag (as
// make firmware and the QEMU harness build every board).
//
// The images (qemu/cmd/tamanic-image) leave .bss and .noptrbss out: Go 1.26
// puts a 32 MiB entropy scratch buffer (crypto/internal/fips140/drbg's
// memory) in .noptrbss, so carrying the zeroed sections would make every
// .bin 42 MB, 32 MiB of it zeros. Nothing then guarantees those sections
// read zero at reset (DDR holds whatever it held, and a boot loader may
// have used it), so cpuinit zeroes them before any Go code runs: the Go
// runtime's first stores (g0 and m0, in .bss) come right after it.
//
// After zeroing, cpuinit sets up the processor as TamaGo's start-up does:
// the stack pointer at goos.RamStart+RamSize-RamStackOffset, HYP mode left
// for SVC, then System mode with IRQ and FIQ masked, and a branch to the
// runtime's entry (_rt0_tamago_start).
//
// tamanic-image drops the sections only from an ELF that has zeroBSS (this
// package, linked), so an image built without the tag still carries them.
package boot

// zeroBSS zeroes the runtime's .bss and .noptrbss (runtime.bss up to
// runtime.enoptrbss), 32 bytes a store, and returns. It uses R0-R9 and R12
// and no stack; it is called by cpuinit before the stack is set up, and
// must never be called from Go once the runtime runs.
func zeroBSS()
