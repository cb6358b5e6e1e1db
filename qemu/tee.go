package qemu

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// BuildTEE compiles the TrustZone-partitioned image (make firmware
// BOARD=mx6ullevk TEE=1) into dir and returns the Trusted OS's ELF, which
// boots on the mx6ullevk machine (Boot with Board "mx6ullevk"): the Normal
// World OS (firmware/mx6ullevk-tee/normal) is built first and embedded
// through a build overlay, so the source tree is not written. hostile
// builds the Normal World's hostile-call mode (main.Hostile). The Normal
// World accepts POST /mode with ControlToken and takes its address by
// DHCP, as Build's images do.
func BuildTEE(ctx context.Context, root, dir string, hostile bool) (string, error) {
	tool, err := exec.CommandContext(ctx, "go", "tool", "-n", "tamago").Output()
	if err != nil {
		return "", fmt.Errorf("qemu: locating the tamago tool: %w", err)
	}
	build := func(tags, ldflags, out, pkg string, extra ...string) error {
		args := append([]string{"build", "-tags", tags, "-ldflags", ldflags, "-o", out}, extra...)
		cmd := exec.CommandContext(ctx, strings.TrimSpace(string(tool)), append(args, pkg)...)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "GOOS=tamago", "GOOSPKG=github.com/usbarmory/tamago", "GOARCH=arm", "GOARM=7")
		if b, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("qemu: building %s: %w\n%s", pkg, err, b)
		}
		return nil
	}
	name := "tamanic-mx6ullevk-tee"
	ldflags := linkFlags("mx6ullevk") + " -X github.com/tamanic/tamanic/firmware/app.BuildControlToken=" + ControlToken
	if hostile {
		ldflags += " -X main.Hostile=1"
		name += "-hostile"
	}
	normal := filepath.Join(dir, name+"-normal.elf")
	if err := build("linkramsize,tamanic_tee", ldflags, normal, "./firmware/mx6ullevk-tee/normal"); err != nil {
		return "", err
	}
	asset, err := filepath.Abs(filepath.Join(root, "firmware", "mx6ullevk-tee", "assets", "normal.elf"))
	if err != nil {
		return "", err
	}
	ov, err := json.Marshal(map[string]map[string]string{"Replace": {asset: normal}})
	if err != nil {
		return "", err
	}
	overlay := filepath.Join(dir, name+"-overlay.json")
	if err := os.WriteFile(overlay, ov, 0o644); err != nil {
		return "", err
	}
	elf := filepath.Join(dir, name+".elf")
	if err := build("linkramsize,linkramstart,linkcpuinit,tamanic_tee", "-T 0x90010000 -R 0x1000", elf, "./firmware/mx6ullevk-tee", "-overlay", overlay); err != nil {
		return "", err
	}
	return elf, nil
}
