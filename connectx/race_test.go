//go:build race

package connectx_test

const raceEnabled = true
