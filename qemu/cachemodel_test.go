package qemu

import (
	"path/filepath"
	"testing"
)

// TestCacheModelMemoryMap checks that the plugin's map is read from the
// board packages' constants.
func TestCacheModelMemoryMap(t *testing.T) {
	root, _ := filepath.Abs("..")
	m, err := BoardMemoryMap(root, "mx6ullevk")
	if err != nil {
		t.Fatal(err)
	}
	if m.RAMStart != 0x80000000 || m.GoRAMSize != 480<<20 || m.DMAStart != 0x9E000000 || m.DMASize != 32<<20 || m.CoherentSize != 1<<20 {
		t.Errorf("mx6ullevk: %+v", m)
	}
	s, err := BoardMemoryMap(root, "sabrelite")
	if err != nil {
		t.Fatal(err)
	}
	if s.RAMStart != 0x10000000 || s.DMAStart != 0x10000000+480<<20 || s.DMASize != 96<<20 {
		t.Errorf("sabrelite: %+v", s)
	}
	if _, err := BoardMemoryMap(root, "nosuchboard"); err == nil {
		t.Error("an unknown board has a memory map")
	}
}
