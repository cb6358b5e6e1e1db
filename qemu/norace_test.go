//go:build !race

package qemu

const raceEnabled = false
