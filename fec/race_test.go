//go:build race

package fec_test

const raceEnabled = true
