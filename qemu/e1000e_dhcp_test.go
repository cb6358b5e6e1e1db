package qemu

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestE1000EDHCPUnderQEMU: the i.MX7D's default image takes the e1000e's
// address by DHCP from its own user network (slirp's second DHCP server,
// 10.0.2.0/24), with its own client beside ENET1's: the console has both
// bind lines, the e1000e's /stats shows its lease, ENET1's lists it under
// ipv4.interfaces, and the services answer on it.
func TestE1000EDHCPUnderQEMU(t *testing.T) {
	elf := firmware(t, "mcimx7d")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	m, err := Boot(ctx, Options{ELF: elf, Board: "mcimx7d", E1000E: true})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Stop()
	c := m.Console()
	if !strings.Contains(c, "dhcp: bound 10.0.0.1/24 gateway 10.0.0.2") ||
		!strings.Contains(c, "NIC 2: dhcp: bound "+E1000EGuest+"/24 gateway "+E1000EHost) ||
		!strings.Contains(c, "E1000E ip="+E1000EGuest+"/24") {
		t.Fatalf("console has not both leases and the E1000E line:\n%s", c)
	}
	e := m.E1000E
	s, err := e.Stats()
	if err != nil {
		t.Fatal(err)
	}
	v, _ := s["ipv4"].(map[string]any)
	d, _ := v["dhcp"].(map[string]any)
	if v["mode"] != "dhcp" || v["address"] != E1000EGuest+"/24" || num(v, "nic") != 2 || d == nil ||
		d["state"] != "bound" || d["server"] != E1000EHost || num(d, "lease_s") != 86400 {
		t.Fatalf("e1000e /stats ipv4 %v", v)
	}
	v1 := ipv4Stats(t, m)
	ifs, _ := v1["interfaces"].([]any)
	if v1["address"] != "10.0.0.1/24" || len(ifs) != 1 {
		t.Fatalf("ENET1 /stats ipv4 %v", v1)
	}
	if i, _ := ifs[0].(map[string]any); i["address"] != E1000EGuest+"/24" || i["mode"] != "dhcp" {
		t.Fatalf("ENET1 /stats ipv4.interfaces %v", ifs)
	}
	if got, err := e.Echo([]byte("e1000e dhcp"), 10*time.Second); err != nil || string(got) != "e1000e dhcp" {
		t.Fatalf("echo over the e1000e: %q %v", got, err)
	}
	if _, err := e.Receive(1<<20, time.Minute); err != nil {
		t.Fatalf("guest->host over the e1000e: %v\nconsole:\n%s", err, m.Console())
	}
}
