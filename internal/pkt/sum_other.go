//go:build !arm

package pkt

func sum32(sum uint32, b []byte) uint32 { return sumGeneric(sum, b) }
