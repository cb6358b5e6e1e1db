package qemu

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

var staticFW struct {
	once sync.Once
	elf  string
	err  error
}

// staticFirmware builds the mx6ullevk image with a static address, as
// make firmware IP=10.0.0.1/24 GATEWAY=10.0.0.2 does, once per test binary.
func staticFirmware(t *testing.T) string {
	t.Helper()
	if why := Missing(); why != "" {
		t.Skipf("skipping QEMU tests: %s", why)
	}
	staticFW.once.Do(func() {
		dir, err := os.MkdirTemp("", "tamanic-fw")
		if err != nil {
			staticFW.err = err
			return
		}
		root, _ := filepath.Abs("..")
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		staticFW.elf, staticFW.err = BuildWith(ctx, root, dir, "mx6ullevk", BuildOptions{IP: "10.0.0.1/24", Gateway: "10.0.0.2"})
	})
	if staticFW.err != nil {
		t.Fatal(staticFW.err)
	}
	return staticFW.elf
}

// smallTransfers checks the services on the address the firmware took:
// 1 MiB each way through the sink and source, and an echo.
func smallTransfers(t *testing.T, m *Machine) {
	t.Helper()
	const n = 1 << 20
	if _, err := m.Receive(n, time.Minute); err != nil {
		t.Fatalf("guest->host: %v\nconsole:\n%s", err, m.Console())
	}
	if r, err := m.Send(n, time.Minute); err != nil || r.Bytes != n {
		t.Fatalf("host->guest: %+v %v\nconsole:\n%s", r, err, m.Console())
	}
	if got, err := m.Echo([]byte("dhcp"), 10*time.Second); err != nil || string(got) != "dhcp" {
		t.Fatalf("echo: %q %v", got, err)
	}
}

func ipv4Stats(t *testing.T, m *Machine) map[string]any {
	t.Helper()
	s, err := m.Stats()
	if err != nil {
		t.Fatal(err)
	}
	v, ok := s["ipv4"].(map[string]any)
	if !ok {
		t.Fatalf("/stats has no ipv4 member: %v", s)
	}
	return v
}

// TestDHCPUnderQEMU boots the default image (DHCP, as make firmware
// builds it) on QEMU's user network, whose DHCP server hands out 10.0.0.1
// (dhcpstart), and checks the lease in /stats against what slirp serves
// (router 10.0.0.2, DNS 10.0.0.3, 24 h leases) and that the services
// work on the leased address.
func TestDHCPUnderQEMU(t *testing.T) {
	elf := firmware(t, "mx6ullevk")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var console bytes.Buffer
	m, err := Boot(ctx, Options{ELF: elf, Board: "mx6ullevk", Console: &console})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Stop()
	t.Logf("booted in %v: %s", m.Boot.Round(time.Millisecond), m.Ready)
	if !strings.Contains(m.Ready, "ip=10.0.0.1/24 ") {
		t.Errorf("READY %q: want the leased 10.0.0.1/24", m.Ready)
	}
	if c := m.Console(); !strings.Contains(c, "dhcp: bound 10.0.0.1/24 gateway 10.0.0.2") {
		t.Errorf("console has no bind line:\n%s", c)
	}
	v := ipv4Stats(t, m)
	d, _ := v["dhcp"].(map[string]any)
	if v["mode"] != "dhcp" || v["address"] != "10.0.0.1/24" || v["gateway"] != "10.0.0.2" || d == nil {
		t.Fatalf("/stats ipv4 %v", v)
	}
	dns, _ := d["dns"].([]any)
	if d["state"] != "bound" || d["server"] != "10.0.0.2" || len(dns) != 1 || dns[0] != "10.0.0.3" ||
		num(d, "lease_s") != 86400 || num(d, "t1_s") != 43200 || num(d, "t2_s") != 75600 || num(d, "stats", "leases") != 1 {
		t.Errorf("/stats ipv4.dhcp %v", d)
	}
	smallTransfers(t, m)
}

// TestStaticImageUnderQEMU boots an image built with a static address:
// no DHCP client runs and the services answer on the built-in address.
func TestStaticImageUnderQEMU(t *testing.T) {
	elf := staticFirmware(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	m, err := Boot(ctx, Options{ELF: elf, Board: "mx6ullevk"})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Stop()
	if !strings.Contains(m.Ready, "ip=10.0.0.1/24 ") {
		t.Errorf("READY %q", m.Ready)
	}
	if c := m.Console(); strings.Contains(c, "dhcp:") {
		t.Errorf("a static image ran DHCP:\n%s", c)
	}
	v := ipv4Stats(t, m)
	if v["mode"] != "static" || v["address"] != "10.0.0.1/24" || v["gateway"] != "10.0.0.2" || v["dhcp"] != nil {
		t.Errorf("/stats ipv4 %v", v)
	}
	smallTransfers(t, m)
}
