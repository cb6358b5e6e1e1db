package qemu

import (
	"fmt"
	"net"
	"strings"
)

// NICLabel names a board's interface in the benchmark reports as the
// hardware calls it: "i.MX6ULL ENET1", "i.MX7D ENET1", "i.MX7D 82574L"
// (ENET1 where the board's firmware serves on ENET1); another board and
// NIC as given, "" for neither.
func NICLabel(board, nic string) string {
	switch board + "/" + nic {
	case "/":
		return ""
	case "mx6ullevk/enet":
		return "i.MX6ULL ENET1"
	case "mcimx7d/enet":
		return "i.MX7D ENET1"
	case "mcimx7d/e1000e":
		return "i.MX7D 82574L"
	}
	return strings.TrimSpace(board + " " + nic)
}

// E1000EAddr returns the MAC address of the mcimx7d firmware's
// "E1000E ip=... mac=..." console line (printed before READY), and an
// error unless the 82574L came up at prefix (e.g. "10.0.2.1/24"): a build
// whose -X setting missed its variable, or a lease not given, shows here
// rather than as requests that time out.
func E1000EAddr(console, prefix string) (net.HardwareAddr, error) {
	for _, line := range strings.Split(console, "\n") {
		if !strings.HasPrefix(line, "E1000E ip=") {
			continue
		}
		f := strings.Fields(line)
		if f[1] != "ip="+prefix {
			return nil, fmt.Errorf("qemu: the 82574L came up as %q, want ip=%s", line, prefix)
		}
		for _, x := range f[2:] {
			if v, ok := strings.CutPrefix(x, "mac="); ok {
				return net.ParseMAC(v)
			}
		}
		return nil, fmt.Errorf("qemu: no mac= in %q", line)
	}
	return nil, fmt.Errorf("qemu: no \"E1000E ip=\" line on the console: the 82574L did not come up")
}
