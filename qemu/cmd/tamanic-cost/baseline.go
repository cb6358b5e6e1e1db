package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/tamanic/tamanic/qemu"
)

// baselineMode is the one TX mode the baseline firmware reports (the
// baseline module's glue.Mode, tamanic-bench's BaselineMode).
const baselineMode = "tamago"

// buildBaseline compiles the baseline firmware for board from the
// baseline module under root with the command tamanic-bench's
// buildBaseline uses (TamaGo's link address, the harness's control token).
func buildBaseline(ctx context.Context, root, dir, board string) (string, error) {
	if board != "mx6ullevk" {
		return "", fmt.Errorf("baseline: only mx6ullevk has a baseline firmware (baseline/%s does not exist)", board)
	}
	tool, err := exec.CommandContext(ctx, "go", "tool", "-n", "tamago").Output()
	if err != nil {
		return "", fmt.Errorf("baseline: locating the tamago tool: %w", err)
	}
	elf := filepath.Join(dir, "baseline-"+board+".elf")
	cmd := exec.CommandContext(ctx, strings.TrimSpace(string(tool)), "build",
		"-ldflags", "-T 0x80010000 -R 0x1000 -X github.com/tamanic/tamanic/firmware/app.BuildControlToken="+qemu.ControlToken,
		"-o", elf, "./"+board)
	cmd.Dir = filepath.Join(root, "baseline")
	cmd.Env = append(os.Environ(), "GOOS=tamago", "GOOSPKG=github.com/usbarmory/tamago", "GOARCH=arm", "GOARM=7")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("baseline: building firmware: %w\n%s", err, out)
	}
	return elf, nil
}

// startCosim builds and starts tamanic-cxsim (the ConnectX model) on files
// in a new directory (on /dev/shm when there is one), as tamanic-bench's
// co-simulated boots do; the caller passes qemu.CosimArgs(dir) to QEMU.
func startCosim(ctx context.Context, root, out string) (*qemu.CXSim, string, error) {
	bin, err := qemu.BuildCXSim(ctx, root, out)
	if err != nil {
		return nil, "", err
	}
	base := ""
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		base = "/dev/shm"
	}
	dir, err := os.MkdirTemp(base, "tamanic-cost-cosim-")
	if err != nil {
		return nil, "", err
	}
	sim, err := qemu.StartCXSim(bin, dir)
	if err != nil {
		os.RemoveAll(dir)
		return nil, "", fmt.Errorf("cosim: %w", err)
	}
	return sim, dir, nil
}
