// Command tamanic-qemu builds the tamanic firmware and boots it under QEMU
// (-board mx6ullevk on mcimx6ul-evk, -board mcimx7d on mcimx7d-sabre, user
// networking forwarded to 127.0.0.1), printing the guest console and the
// forwarded ports, until interrupted. -device adds QEMU devices, for
// example -device e1000e,bus=dw-pcie behind the i.MX7D's PCIe root port.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"

	"github.com/tamanic/tamanic/qemu"
)

func main() {
	icount := flag.Bool("icount", false, "run with -icount shift=0,sleep=off")
	out := flag.String("o", "build", "directory for the firmware image")
	board := flag.String("board", "mx6ullevk", "firmware board (mx6ullevk, mcimx7d)")
	var devices []string
	flag.Func("device", "extra QEMU -device (repeatable)", func(s string) error { devices = append(devices, s); return nil })
	flag.Parse()
	if why := qemu.Missing(); why != "" {
		fmt.Fprintln(os.Stderr, "tamanic-qemu:", why)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	root, _ := filepath.Abs(".")
	os.MkdirAll(*out, 0o755)
	elf, err := qemu.Build(ctx, root, *out, *board)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	m, err := qemu.Boot(ctx, qemu.Options{ELF: elf, Board: *board, Devices: devices, Icount: *icount, Console: os.Stdout})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("# %s\n# booted in %v; sink 127.0.0.1:%d, source 127.0.0.1:%d, http://127.0.0.1:%d/, udp echo 127.0.0.1:%d, iperf3 -c 127.0.0.1 -p %d\n",
		m.CommandLine(), m.Boot, m.SinkPort, m.SourcePort, m.HTTPPort, m.EchoPort, m.IperfPort)
	fmt.Printf("# control: curl -X POST -H 'Authorization: Bearer %s' 'http://127.0.0.1:%d/mode?tx=sg'\n", qemu.ControlToken, m.HTTPPort)
	<-ctx.Done()
	m.Stop()
}
