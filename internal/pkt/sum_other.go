//go:build !arm

package pkt

func sum32(sum uint32, b []byte) uint32 { return sumGeneric(sum, b) }

func copySum(dst, src []byte) uint32 {
	copy(dst[:len(src)], src)
	return sumGeneric(0, src)
}
