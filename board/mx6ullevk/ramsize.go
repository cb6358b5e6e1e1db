//go:build tamago && arm && !tamanic_tee

package mx6ullevk

import _ "unsafe"

// ramSize gives the Go runtime its RAM (GoRAMSize). The TrustZone
// partition's Trusted OS (firmware/mx6ullevk-tee, built with the
// tamanic_tee tag) places its runtime itself (package tee/teemap) and
// leaves this out.
//
//go:linkname ramSize runtime/goos.RamSize
var ramSize uint32 = GoRAMSize
