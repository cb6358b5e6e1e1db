//go:build tamago && arm

// Package smc is the Normal World's way into the Trusted OS: a secure
// monitor call (SMC #0) with the operation in r0 and its arguments in
// r1-r3, answered in r0 (status) and r1 (value), as GoTEE's monitor
// presents them to the Trusted OS's handler (ExecCtx.R0-R3).
package smc

import "github.com/tamanic/tamanic/tee/netcall"

// call is in smc_arm.s.
func call(op, r1, r2, r3 uint32) (s, v uint32)

// Caller is a netcall.Caller making real world calls.
type Caller struct{}

// Call implements netcall.Caller.
func (Caller) Call(op netcall.Op, r1, r2, r3 uint32) (netcall.Status, uint32) {
	s, v := call(uint32(op), r1, r2, r3)
	return netcall.Status(s), v
}

// Write sends c to the Trusted OS's console (GoTEE's SYS_WRITE, 1).
func Write(c byte) { call(1, uint32(c), 0, 0) }

// Exit ends the Normal World through GoTEE's SYS_EXIT (call 0), which the
// Trusted OS serves by stopping; it does not return.
func Exit(code uint32) {
	call(0, code, 0, 0)
	for {
	}
}
