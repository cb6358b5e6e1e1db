// Command tamanic-qemu builds the tamanic firmware and boots it under QEMU
// with user networking forwarded to 127.0.0.1, printing the guest console
// and the forwarded ports, until interrupted. The boards: -board mx6ullevk
// (the default) on mcimx6ul-evk, -board usbarmory on mcimx6ul-evk with the
// network on ENET2 (a second -nic), -board sabrelite on sabrelite (core 0,
// console on UART2), -board mcimx7d on mcimx7d-sabre. -device adds QEMU
// devices; -e1000e (mcimx7d) adds QEMU's e1000e behind the PCIe root port
// on its own user network, which the firmware serves as its second
// interface.
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
	board := flag.String("board", "mx6ullevk", "firmware board: mx6ullevk, usbarmory, sabrelite or mcimx7d")
	e1k := flag.Bool("e1000e", false, "mcimx7d: add an e1000e on its own user network (10.0.2.0/24)")
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
	m, err := qemu.Boot(ctx, qemu.Options{ELF: elf, Board: *board, Devices: devices, Icount: *icount, Console: os.Stdout,
		E1000E: *e1k})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("# %s\n# booted in %v; sink 127.0.0.1:%d, source 127.0.0.1:%d, http://127.0.0.1:%d/, udp echo 127.0.0.1:%d, iperf3 -c 127.0.0.1 -p %d\n",
		m.CommandLine(), m.Boot, m.SinkPort, m.SourcePort, m.HTTPPort, m.EchoPort, m.IperfPort)
	fmt.Printf("# control: curl -X POST -H 'Authorization: Bearer %s' 'http://127.0.0.1:%d/mode?tx=sg'\n", qemu.ControlToken, m.HTTPPort)
	if e := m.E1000E; e != nil {
		fmt.Printf("# e1000e (%s): sink 127.0.0.1:%d, source 127.0.0.1:%d, http://127.0.0.1:%d/, udp echo 127.0.0.1:%d\n",
			qemu.E1000EGuest, e.SinkPort, e.SourcePort, e.HTTPPort, e.EchoPort)
	}
	<-ctx.Done()
	m.Stop()
}
