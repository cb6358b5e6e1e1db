package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/tamanic/tamanic/qemu"
)

// target returns the ports of the interface a mode runs on: "e1000e-..."
// modes on the 82574L, "cx-..." on the ConnectX, the others on ENET1.
func target(m *qemu.Machine, mode string) *qemu.Ports {
	if strings.HasPrefix(mode, "e1000e-") && m.E1000E != nil {
		return m.E1000E
	}
	if strings.HasPrefix(mode, "cx-") && cxPorts != nil {
		return cxPorts
	}
	return &m.Ports
}

// planTransfers tells p how many transfers of how many bytes the run will
// make, for its estimate of the time left. It mirrors the loops of main,
// profile and benchBaseline.
func planTransfers(p *progress, board string, runs int, size, profSize int64, profOnly, withBaseline bool) {
	base := withBaseline && board == "mx6ullevk"
	if profSize > 0 {
		p.plan(5, profSize)
		if base && !profOnly {
			p.plan(2, profSize)
		}
	}
	if profOnly {
		return
	}
	cfgs := 9 // tx and rx with copybreak 512 and off, per bounce, sg, tso
	if board == "mcimx7d" {
		cfgs += 3 // e1000e-sg and -tso out, e1000e-tso in
	}
	p.plan(2*cfgs*runs, size) // plain and icount boots
	if board == "mcimx7d" {
		p.plan(2*3*runs, size) // the ConnectX boots: cx-sg and cx-tso out, cx-tso in
	}
	if base {
		p.plan(2*2*runs, size)
	}
}

// transferTries is how often a failed transfer is tried before the board's
// measurement stops. Under -icount with sleep=off an idle guest's clock
// jumps to its next timer at once, so when the host side stalls for a
// moment (a loaded machine) the guest's TCP can run through its
// retransmission timeouts and reset the connection in no host time at
// all; make bench then lost a whole board to one run ("broken pipe").
const transferTries = 3

// transfer runs one transfer (see measure) and reports it on prog; a
// failed one is tried again, up to transferTries in all, and the report
// keeps only the run that completed.
func transfer(mm *qemu.Machine, boot, dir, mode string, cb, i int, n int64) (Run, error) {
	var r Run
	var err error
	for try := 0; try < transferTries; try++ {
		if try > 0 {
			fmt.Printf("# %s %s %s run %d: try %d after: %v\n", boot, dir, mode, i+1, try+1, err)
			prog.plan(1, n) // the progress counts the retry as one more transfer
		}
		prog.begin(boot, dir, mode, cb, i, n)
		r, err = measure(mm, boot, dir, mode, cb, i, n)
		prog.end(r, err)
		if err == nil {
			return r, nil
		}
	}
	return r, err
}

// timedTransfer moves n bytes in direction dir ("tx": guest to host)
// through p, fills r's wall time, throughput and busy figures, and returns
// the difference of the firmware's /stats counters over the transfer.
func timedTransfer(p *qemu.Ports, r *Run, dir string, n int64) (func(path ...string) float64, error) {
	s0, err := p.Stats()
	if err != nil {
		return nil, err
	}
	start := time.Now()
	if dir == "tx" {
		_, err = p.Receive(n, 5*time.Minute)
	} else {
		var sr qemu.SinkResult
		sr, err = p.Send(n, 5*time.Minute)
		if err == nil && sr.Bytes != n {
			err = fmt.Errorf("guest received %d of %d bytes", sr.Bytes, n)
		}
	}
	if err != nil {
		return nil, err
	}
	r.WallNs = int64(time.Since(start))
	s1, err := p.Stats()
	if err != nil {
		return nil, err
	}
	d := func(path ...string) float64 { return num(s1, path...) - num(s0, path...) }
	mib := float64(n) / (1 << 20)
	r.Mbps = float64(n*8) / (float64(r.WallNs) / 1e9) / 1e6
	r.BusyNs = int64(d("uptime_ns") - d("idle_ns"))
	r.BusyPerMiB = float64(r.BusyNs) / mib
	return d, nil
}

// measure moves n bytes in direction dir on the interface mode runs on and
// returns the run with the firmware's counters' deltas per MiB.
func measure(mm *qemu.Machine, boot, dir, mode string, cb, i int, n int64) (Run, error) {
	r := Run{Boot: boot, Dir: dir, Mode: mode, Copybreak: cb, N: i, Bytes: n}
	m := target(mm, mode)
	cx := m == cxPorts
	e1k := m != &mm.Ports && !cx
	d, err := timedTransfer(m, &r, dir, n)
	if err != nil {
		return r, err
	}
	mib := float64(n) / (1 << 20)
	r.IRQPerMiB = d("nic", "irq_ns") / mib
	r.IRQsPerMiB = d("nic", "irqs") / mib
	r.RxPerMiB = d("nic", "endpoint", "RxNs") / mib
	r.RxPassesPerMiB = d("nic", "endpoint", "RxBatches") / mib
	r.TxPerMiB = d("nic", "endpoint", "TxNs") / mib
	switch {
	case cx:
		// The ConnectX's driver counts sends posted (an LSO WQE once);
		// the card makes the wire frames. Its endpoint TX time is the
		// figure the offload saves on.
		if dir == "tx" {
			r.StackPktsPerMiB = d("nic", "endpoint", "TxPackets") / mib
			r.LSOPerMiB = d("nic", "driver", "TxLSO") / mib
		} else {
			r.FramesPerMiB = d("nic", "driver", "RxPackets") / mib
		}
	case dir == "tx" && e1k:
		// The 82574L's driver counts packets handed to the hardware (a
		// GSO packet once); the wire frames are the others plus every
		// segment the hardware makes. Copies: the GSO headers.
		wire := d("nic", "driver", "Tx", "Frames") - d("nic", "driver", "Tx", "GSOPackets") + d("nic", "driver", "Tx", "GSOSegs")
		r.CopiedPerByte = d("nic", "driver", "Tx", "Copied") / float64(n)
		if wire > 0 {
			r.DescsPerFrame = d("nic", "driver", "Tx", "Descs") / wire
		}
		r.FramesPerMiB = wire / mib
		r.SegmentsPerMiB = d("nic", "driver", "Tx", "GSOSegs") / mib
		r.StackPktsPerMiB = d("nic", "endpoint", "TxPackets") / mib
	case dir == "tx":
		r.CopiedPerByte = d("nic", "driver", "Tx", "Copied") / float64(n)
		if f := d("nic", "driver", "Tx", "Frames"); f > 0 {
			r.DescsPerFrame = d("nic", "driver", "Tx", "Descs") / f
		}
		r.FramesPerMiB = d("nic", "driver", "Tx", "Frames") / mib
		r.SegmentsPerMiB = d("nic", "driver", "Tx", "GSOSegments") / mib
		r.StackPktsPerMiB = d("nic", "endpoint", "TxPackets") / mib
	default:
		r.CopiedPerByte = d("nic", "driver", "Rx", "Copied") / float64(n)
		r.FramesPerMiB = d("nic", "driver", "Rx", "Frames") / mib
	}
	return r, nil
}
