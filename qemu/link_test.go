package qemu

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestLinkFollowsCable: on every board, pulling the NIC's cable in QEMU
// (the monitor's set_link, which QEMU's imx.enet reports in its PHY's
// link status) takes the firmware's link down, putting it back brings it
// up again, counted once each way, and the services answer afterwards.
// A board whose ENET reaches no PHY under this QEMU says so on its
// console and is reported, not failed.
func TestLinkFollowsCable(t *testing.T) {
	for _, b := range boards {
		t.Run(b.name, func(t *testing.T) {
			elf := firmware(t, b.name)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			m, err := Boot(ctx, Options{ELF: elf, Board: b.name, Devices: b.devices, Monitor: true})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Stop()
			if strings.Contains(m.Console(), "link not managed") {
				t.Skipf("no PHY reached under this QEMU; console:\n%s", tail(m.Console(), 10))
			}
			// The cable is out of reach of the network, so the firmware's
			// console, where each link change is written, tells when the
			// watch has seen it.
			upLine := regexp.MustCompile(`: link [0-9]+ Mb/s`)
			count := func() (downs, ups int) {
				c := m.Console()
				return strings.Count(c, ": link down"), len(upLine.FindAllString(c, -1))
			}
			wait := func(what string, ok func(downs, ups int) bool) {
				t.Helper()
				for end := time.Now().Add(30 * time.Second); !ok(count()); time.Sleep(50 * time.Millisecond) {
					if time.Now().After(end) {
						t.Fatalf("no %s on the console:\n%s", what, tail(m.Console(), 20))
					}
				}
			}
			d0, u0 := count()
			s0, err := m.Stats()
			if err != nil {
				t.Fatal(err)
			}
			if err := m.SetLink(false); err != nil {
				t.Fatal(err)
			}
			wait("link down", func(d, _ int) bool { return d == d0+1 })
			if err := m.SetLink(true); err != nil {
				t.Fatal(err)
			}
			wait("link up", func(_, u int) bool { return u == u0+1 })
			s1, err := m.Stats()
			if err != nil {
				t.Fatal(err)
			}
			up, _ := get(s1, "nic", "driver", "Link", "Up").(bool)
			downs := num(s1, "nic", "driver", "LinkDowns") - num(s0, "nic", "driver", "LinkDowns")
			ups := num(s1, "nic", "driver", "LinkUps") - num(s0, "nic", "driver", "LinkUps")
			if !up || downs != 1 || ups != 1 {
				t.Errorf("after the flap: link up %v, %v downs and %v ups counted, want one each", up, downs, ups)
			}
			if err := probe(m.Ports); err != nil {
				t.Fatalf("after the flap: %v\nconsole:\n%s", err, tail(m.Console(), 20))
			}
			t.Logf("cable out and back: the watch saw it go down and come up (console: %q), services answer", strings.TrimSpace(tail(m.Console(), 2)))
		})
	}
}

// get walks nested maps.
func get(m map[string]any, path ...string) any {
	var v any = m
	for _, p := range path {
		mm, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = mm[p]
	}
	return v
}
