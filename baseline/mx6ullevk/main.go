//go:build tamago && arm

// Command mx6ullevk is the baseline firmware for the MCIMX6ULL-EVK and
// QEMU's mcimx6ul-evk: TamaGo's own ENET driver (soc/nxp/enet, v1.26.0)
// joined to gVisor by github.com/usbarmory/go-net, serving the tamanic
// firmware's services (package firmware/app: sink 5001, source 5002, UDP
// echo 7, HTTP /stats and /mode, iperf3 5201). It prints
// "READY ip=... mac=... mode=tamago ..." when serving.
//
// The bring-up is TamaGo's example firmware's: ENET1 (the one QEMU wires
// -nic to) initialised by TamaGo, its rings in TamaGo's default DMA region
// (OCRAM), an RX-frame interrupt that drains the ring into go-net. The
// idle governor is the tamanic boards' (package idle), so idle_ns is
// comparable.
//
//	-ldflags "-X main.IP=10.0.0.1/24 -X main.Gateway=10.0.0.2"
package main

import (
	"fmt"
	"net/netip"
	"os"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/usbarmory/tamago/arm"
	tamagoevk "github.com/usbarmory/tamago/board/nxp/mx6ullevk"
	"github.com/usbarmory/tamago/soc/nxp/enet"
	"github.com/usbarmory/tamago/soc/nxp/imx6ul"
	"gvisor.dev/gvisor/pkg/tcpip"

	"github.com/tamanic/tamanic/baseline/glue"
	"github.com/tamanic/tamanic/baseline/idle"
	"github.com/tamanic/tamanic/firmware/app"
)

// Build-time settings.
var (
	IP      = "10.0.0.1/24"
	Gateway = "10.0.0.2"
)

var (
	irqs  atomic.Int64
	irqNs atomic.Int64 // handler time outside receive passes
)

func main() {
	boot := time.Now()
	tamagoevk.Init()
	gov := idle.Install(imx6ul.ARM)
	defer func() {
		if r := recover(); r != nil {
			fmt.Printf("PANIC %v\n%s", r, debug.Stack())
			os.Exit(1)
		}
	}()
	addr, err := netip.ParsePrefix(IP)
	if err != nil {
		panic(fmt.Sprintf("IP %q: %v", IP, err))
	}
	gw, err := netip.ParseAddr(Gateway)
	if err != nil {
		panic(fmt.Sprintf("Gateway %q: %v", Gateway, err))
	}
	eth := imx6ul.ENET1
	eth.Init()
	clock := imx6ul.ARM.GetTime
	dev := &glue.Device{ENET: eth, Clock: clock}
	iface, err := glue.NewStack(dev, eth.MAC, addr, gw)
	if err != nil {
		panic(err)
	}
	// Rings set up, receive enabled, no polling loop: frames arrive by
	// interrupt.
	eth.Start(false)
	eth.EnableInterrupt(enet.IRQ_RXF)

	imx6ul.GIC.Init(true, false)
	imx6ul.GIC.EnableInterrupt(eth.IRQ, true)
	idle.EnableTimerInterrupts(imx6ul.GIC)
	go arm.ServiceInterrupts(func() {
		for {
			id := imx6ul.GIC.GetInterrupt(true)
			switch {
			case id >= 1020:
				return
			case id == eth.IRQ:
				t0 := clock()
				before := dev.RxNanoseconds()
				// Clear, then drain: a frame landing after the
				// drain raises the interrupt again.
				eth.ClearInterrupt(enet.IRQ_RXF)
				dev.Drain()
				irqNs.Add(clock() - t0 - (dev.RxNanoseconds() - before))
				irqs.Add(1)
			case gov.Alarm(id):
			}
		}
	})
	gov.Serve()

	ctl := &glue.Controls{Dev: dev, Idle: gov.IdleNanoseconds,
		Interrupts: func() (int64, int64) { return irqs.Load(), irqNs.Load() },
		ENETStats:  func() any { return eth.Stats }}
	srv := &app.Server{Stack: iface.Stack, NIC: iface.NICID, Addr: tcpip.AddrFrom4(addr.Addr().As4()), Ctl: ctl, Boot: boot}
	if err := srv.Start(); err != nil {
		panic(err)
	}
	// A 500 ms tick, as the tamanic boards' link poll has. Under QEMU's
	// -icount sleep=off an idle guest's clock jumps straight to its next
	// timer; with only the services' 30 s and 60 s idle timers and TCP's
	// handshake timers pending, the firmware ran through its SYN-ACK
	// retransmissions before slirp's ACK came, and answered no connection
	// (make bench's baseline icount boot). It changes nothing on a board.
	go func() {
		for range time.Tick(500 * time.Millisecond) {
		}
	}()
	m := eth.MAC
	fmt.Printf("READY ip=%s mac=%02x:%02x:%02x:%02x:%02x:%02x mode=%s driver=tamago-enet glue=go-net boot_ns=%d\n",
		addr, m[0], m[1], m[2], m[3], m[4], m[5], glue.Mode, time.Since(boot).Nanoseconds())
	select {}
}
