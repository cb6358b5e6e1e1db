//go:build tamago && arm

// Command normal is the Normal World OS of the TrustZone-partitioned
// tamanic firmware (firmware/mx6ullevk-tee loads and runs it): gVisor and
// the services of package app on a netcall.Device, whose every transmit
// (one frame or one GSO packet) and receive batch is a world call (SMC)
// into the Trusted OS, which owns ENET1. It prints "READY ip=... mac=...
// mode=... world=normal" on the console when serving.
//
// Built with -ldflags "-X main.Hostile=1" it also makes every malformed
// call of netcall.HostileCalls before READY and then every 100 ms while it
// serves, and reports in /stats (nic.hostile) how many the Trusted OS
// answered otherwise than the table wants (none, or it is broken). Before
// that it probes the world switch (probeBanked): it aims its IRQ-mode
// stack at a canary, sets every banked register, waits in the Secure
// World, and prints "BANKED canary_touched=N changed=..." (0 and none, or
// Secure interrupts ran on its stack or clobbered its registers); it
// checks the GIC groups from its side ("GROUPS ppi30=1 enet1=0") and
// waits with its timer's PPI held asserted ("STORM waits=5", or the
// Secure World is stalled and no READY follows).
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/goos"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/usbarmory/tamago/arm"

	"github.com/tamanic/tamanic/fec"
	"github.com/tamanic/tamanic/firmware/app"
	"github.com/tamanic/tamanic/netstack"
	"github.com/tamanic/tamanic/tee/netcall"
	"github.com/tamanic/tamanic/tee/smc"
	"github.com/tamanic/tamanic/tee/teemap"
)

//go:linkname ramSize runtime/goos.RamSize
var ramSize uint32 = teemap.NormalRAMSize

// Hostile, when set (-X main.Hostile=1), runs the hostile-call table.
var Hostile string

// PollInterval is the receive poll period. Nothing interrupts the Normal
// World when frames arrive: its idle governor (idle) waits in the Secure
// World, which returns when the NIC's interrupt signals frames, and wakes
// the receive loop. The poll is the safety net for a signal that came and
// went between the last receive call and the wait.
const PollInterval = 10 * time.Millisecond

// minWait is the shortest wait handed to the Secure World; below it the
// scheduler spins (a world call costs more).
const minWait = 20 * time.Microsecond

// The idle governor's state (package level: the runtime's idle hook has no
// other way in).
var (
	idleDev *netcall.Device
	waker   atomic.Uintptr // the goroutine that kicks the receive loop
	idleNs  atomic.Int64
)

// idle is the runtime's idle hook (goos.Idle): it gives the core to the
// Secure World until the next timer (pollUntil, runtime nanotime) or
// received frames, whichever comes first, and accounts the time as idle.
// It runs in the scheduler: no allocation, no channel operation; a frame
// wakes the waker goroutine through runtime.Wake.
func idle(pollUntil int64) {
	t0 := cpu.GetTime()
	d := time.Duration(netcall.MaxWaitMicros) * time.Microsecond
	if pollUntil != 0 && pollUntil != math.MaxInt64 {
		d = min(d, time.Duration(pollUntil-t0))
	}
	if d < minWait {
		return
	}
	if idleDev.Wait(d) {
		if g := waker.Load(); g != 0 {
			runtime.Wake(uint(g))
		}
	}
	idleNs.Add(cpu.GetTime() - t0)
}

func main() {
	boot := time.Now()
	defer func() {
		if r := recover(); r != nil {
			fmt.Printf("PANIC %v\n%s", r, debug.Stack())
			os.Exit(1)
		}
	}()
	fmt.Printf("normal: Normal World OS, non-secure=%v\n", cpu.NonSecure())
	// The transfer region lies outside the runtime's RAM, which TamaGo maps
	// strongly ordered; the Trusted OS maps it normal cacheable memory
	// (monitor.Load), and both views must agree for the caches to.
	cpu.ConfigureMMU(teemap.TransferStart, teemap.TransferStart+1<<20, 0, arm.MemoryRegion|arm.TTE_EXECUTE_NEVER)
	var start uintptr = teemap.TransferStart
	region := unsafe.Slice((*byte)(unsafe.Add(nil, start)), netcall.RegionSize)
	dev, err := netcall.NewDevice(smc.Caller{}, region)
	if err != nil {
		panic(err)
	}
	netcfg, err := app.BuildNetConfig()
	if err != nil {
		panic(err)
	}
	ep, err := netstack.New(netstack.Options{Device: dev, TSO: true, AckFilter: true, GRO: true,
		PollInterval: PollInterval, Clock: cpu.GetTime})
	if err != nil {
		panic(err)
	}
	idleDev = dev
	go func() {
		g, _ := runtime.GetG()
		waker.Store(uintptr(g))
		for {
			time.Sleep(math.MaxInt64) // until idle wakes it
			dev.Kick()
		}
	}()
	goos.Idle = idle
	mac := dev.Info().MAC
	network, err := app.StartNetwork(ep, mac, netcfg, os.Stdout)
	if err != nil {
		panic(err)
	}
	ctl := &controls{ep: ep, dev: dev}
	if err := ctl.SetMode("tso", nil); err != nil {
		panic(err)
	}
	if Hostile != "" {
		touched, changed := probeBanked(dev, 20)
		fmt.Printf("BANKED canary_touched=%d changed=%s\n", touched, changed)
		ppi30, enet1 := probeGroups()
		fmt.Printf("GROUPS ppi30=%d enet1=%d\n", ppi30, enet1)
		fmt.Println("STORM start")
		fmt.Printf("STORM waits=%d\n", probeStorm(dev, 5))
		ctl.hostile = &hostile{}
		ctl.hostile.round(dev)
		h := ctl.hostile.snapshot()
		fmt.Printf("HOSTILE calls=%d unexpected=%d\n", h.Calls, h.Unexpected)
		go func() {
			for {
				time.Sleep(100 * time.Millisecond)
				ctl.hostile.round(dev)
			}
		}()
	}
	// The Normal World has 128 MiB of RAM in all: its services take a
	// third of the default limits (app.Limits.Split), a budget of under
	// 60 MiB (app.TestSplitLimitsFitTheBudget), not the full 176 MiB.
	srv := &app.Server{Stack: network.Stack, NIC: 1, Net: network, Ctl: ctl, Boot: boot, Limits: app.DefaultLimits.Split(3)}
	if err := srv.Start(); err != nil {
		panic(err)
	}
	tx, cb := ctl.Mode()
	fmt.Printf("READY ip=%s mac=%02x:%02x:%02x:%02x:%02x:%02x mode=%s copybreak=%d boot_ns=%d world=normal\n",
		network.Addr(), mac[0], mac[1], mac[2], mac[3], mac[4], mac[5], tx, cb, time.Since(boot).Nanoseconds())
	select {}
}

// controls are app.Controls for the partition: tso hands the Secure
// World host-GSO packets (one call each, segmented there); sg and bounce
// hand it frames (one call each), which its driver maps in place or
// copies. The RX copybreak stays the Trusted OS's.
type controls struct {
	ep      *netstack.Endpoint
	dev     *netcall.Device
	hostile *hostile
	mu      sync.Mutex
	mode    string
}

func (c *controls) SetMode(tx string, copybreak *int) error {
	if copybreak != nil && *copybreak != fec.DefaultCopybreak {
		return errors.New("normal: the RX copybreak is the Trusted OS's")
	}
	strategy := uint32(netcall.ModeSG)
	switch tx {
	case "tso", "sg":
	case "bounce":
		strategy = netcall.ModeBounce
	default:
		return fmt.Errorf("normal: TX mode %q: want bounce, sg or tso", tx)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.dev.SetStrategy(strategy); err != nil {
		return err
	}
	c.ep.SetTSO(tx == "tso")
	c.mode = tx
	return nil
}

func (c *controls) Mode() (string, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mode, fec.DefaultCopybreak
}

// Stats returns the endpoint's, the device's (world calls) and the Trusted
// OS's counters (its server and its driver), and the hostile calls'.
func (c *controls) Stats() any {
	m := map[string]any{"endpoint": c.ep.Stats(), "device": c.dev.Stats()}
	if j, err := c.dev.SecureStats(); err == nil {
		m["secure"] = json.RawMessage(j)
	} else {
		m["secure_error"] = err.Error()
	}
	if c.hostile != nil {
		m["hostile"] = c.hostile.snapshot()
	}
	return m
}

// IdleNanoseconds is the time spent waiting in the Secure World with
// nothing to do (idle): the Secure World's own work for the Normal World
// (calls, the driver) counts as busy.
func (c *controls) IdleNanoseconds() int64 { return idleNs.Load() }

// hostile counts the hostile-call rounds.
type hostile struct {
	mu sync.Mutex
	s  HostileStats
}

// HostileStats are the hostile calls made and how many were answered
// otherwise than the table wants.
type HostileStats struct {
	Rounds, Calls, Unexpected uint64
	First                     string `json:",omitempty"`
}

func (h *hostile) round(dev *netcall.Device) {
	for _, c := range netcall.HostileCalls() {
		if c.Prepare != nil {
			c.Prepare(dev.Region())
		}
		st, _ := dev.Call(c.Op, c.R1, c.R2, c.R3)
		h.mu.Lock()
		h.s.Calls++
		if st != c.Want {
			h.s.Unexpected++
			if h.s.First == "" {
				h.s.First = fmt.Sprintf("%s: %v, want %v", c.Name, st, c.Want)
			}
		}
		h.mu.Unlock()
	}
	h.mu.Lock()
	h.s.Rounds++
	h.mu.Unlock()
}

func (h *hostile) snapshot() HostileStats {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.s
}
