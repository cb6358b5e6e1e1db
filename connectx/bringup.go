package connectx

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/tamanic/tamanic/dma"
)

// NIC is one brought-up function.
type NIC struct {
	cfg  Config
	bar  regs
	mem  dma.Memory
	cmd  cmdq
	caps Caps
	mac  [6]byte
	obj  objects
	link bool

	mu        sync.Mutex
	closed    bool
	busMaster bool
	broken    error // a CQ reported an error: its completions stopped
	failed    error // Fail was called: no command is issued, no DMA allowed
	undo      []undo
	pages     map[dma.Addr]dma.Buffer // firmware pages the card holds
	eq        queue                   // event queue ring
	txcq      queue
	rxcq      queue
	sq        sendQueue
	rq        recvQueue
	dbr       dma.Buffer // doorbell records: SQ, RQ, TX CQ, RX CQ at 0, 64, 128, 192
	stats     Stats
	txDone    func(any, error)
	rxRdy     chan struct{}
	done      []completion // scratch for completions delivered outside mu
}

type completion struct {
	cookie any
	err    error
}

// queue is a ring of 64-byte entries the card writes (EQ, CQ).
type queue struct {
	buf     dma.Buffer
	logSize uint
	cc      uint32 // consumer counter
}

func (q *queue) size() uint32 { return 1 << q.logSize }

// next returns the entry at the consumer counter when software owns it:
// owner bit = (cc >> log_size) & 1 (Linux mlx5_cqwq_get_wqe, eq.c).
// The last word (op_own) is read atomically: the card writes it after the
// rest of the entry, so seeing it orders the other reads after it.
func (q *queue) next() []byte {
	e := q.buf.Bytes()[(q.cc&(q.size()-1))*64:][:64]
	if lastByte(e)&1 != uint8((q.cc>>q.logSize)&1) {
		return nil
	}
	return e
}

// push registers a command that undoes a step; pushMem memory to free.
func (n *NIC) push(name string, fn func() error)    { n.undo = append(n.undo, undo{name, fn, false}) }
func (n *NIC) pushMem(name string, fn func() error) { n.undo = append(n.undo, undo{name, fn, true}) }

// teardown runs the undo commands in reverse (objects, TEARDOWN_HCA, page
// reclaim, DISABLE_HCA), then clears Bus Master Enable so the card can no
// longer reach memory even if a command failed or timed out, and only then
// frees the memory, in reverse.
func (n *NIC) teardown() error {
	var errs []error
	for _, mem := range []bool{false, true} {
		if !mem && n.failed != nil {
			continue // a failed card is sent no command (Fail)
		}
		if mem {
			n.stopBusMaster()
		}
		for i := len(n.undo) - 1; i >= 0; i-- {
			if u := n.undo[i]; u.mem == mem {
				if err := u.fn(); err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", u.name, err))
				}
			}
		}
	}
	n.undo = nil
	return errors.Join(errs...)
}

// stopBusMaster clears Bus Master Enable in the function's Command register
// (PCI Local Bus 3.0 6.2.2): the card can no longer read or write memory.
// Only the Command half of the dword is written back: Status (the upper
// half) is write-1-to-clear and writing zeros leaves it alone. A failing
// card may read all ones (a completion timeout or a link gone down): then
// only Memory Space stays set, rather than every Command bit. The read
// back makes sure the write reached the function before memory is
// unmapped or freed (a configuration write is non-posted on PCIe, but a
// root complex's window may buffer it).
func (n *NIC) stopBusMaster() {
	if n.busMaster {
		cs := n.cfg.ConfigSpace
		v := cs.Read32(pciCommand)
		if v == 0xFFFFFFFF {
			v = pciCmdMemory
		}
		cs.Write32(pciCommand, v&0xFFFF&^pciCmdMaster)
		cs.Read32(pciCommand)
		n.busMaster = false
	}
}

// waitReady polls the initializing bit for up to timeout.
func (n *NIC) waitReady(stage string, timeout time.Duration) error {
	deadline := n.cfg.Now().Add(timeout)
	for n.bar.read(InitInitializing)&InitBusy != 0 {
		if n.cfg.Now().After(deadline) {
			return fmt.Errorf("connectx: firmware still initializing %s after %v: %w", stage, timeout, ErrTimeout)
		}
		n.cfg.Sleep()
	}
	return nil
}

func (n *NIC) bringUp() error {
	cs := n.cfg.ConfigSpace
	cmdReg := cs.Read32(pciCommand)
	cs.Write32(pciCommand, cmdReg|pciCmdMemory|pciCmdMaster)
	n.busMaster = true
	if err := n.waitReady("at start", n.cfg.FirmwareTimeout); err != nil {
		return err
	}
	if rev := n.bar.read(InitCmdIfRev) >> 16; rev != CmdIfRev {
		return fmt.Errorf("%w: %d (want %d)", ErrCmdIfRev, rev, CmdIfRev)
	}
	l := n.bar.read(InitCmdqAddrLSz)
	if logSz, logStride := (l>>4)&0xF, l&0xF; logSz+logStride > 12 || logStride < 6 {
		return fmt.Errorf("connectx: command queue geometry log size %d, log stride %d unsupported", logSz, logStride)
	}
	n.pushMem("command queue memory", func() error { n.cmd.free(); return nil })
	if err := n.cmd.alloc(); err != nil {
		return err
	}
	a := uint64(n.cmd.q.Addr())
	n.bar.write(InitCmdqAddrH, uint32(a>>32))
	n.bar.write(InitCmdqAddrLSz, uint32(a)) // nic_interface 0: full driver
	if err := n.waitReady("after the command queue was set", n.cfg.FirmwareTimeout); err != nil {
		return err
	}
	if _, err := n.cmd.exec(newIn(OpEnableHCA, 0, 0x10), 0x10); err != nil {
		return fmt.Errorf("connectx: ENABLE_HCA: %w", err)
	}
	n.push("DISABLE_HCA", func() error {
		_, err := n.exec(newIn(OpDisableHCA, 0, 0x10), 0x10)
		return err
	})
	out, err := n.exec(newIn(OpQueryISSI, 0, 0x10), 0x70)
	if err != nil {
		var ce *CmdError
		if !errors.As(err, &ce) || ce.Status != StatBadOp {
			return fmt.Errorf("connectx: QUERY_ISSI: %w", err)
		}
		out = make([]byte, 0x70) // old firmware: ISSI 0 only
	}
	if binary.BigEndian.Uint32(out[0x6C:])&(1<<1) != 0 {
		in := newIn(OpSetISSI, 0, 0x10)
		Field{0x08, 15, 0}.Set(in, 1)
		if _, err := n.exec(in, 0x10); err != nil {
			return fmt.Errorf("connectx: SET_ISSI 1: %w", err)
		}
	}
	if err := n.satisfyPages(PagesBoot); err != nil {
		return err
	}
	n.push("firmware pages", n.reclaimPages)
	n.pushMem("firmware pages", func() error {
		// Pages the card did not return: it can no longer reach them.
		for a, b := range n.pages {
			delete(n.pages, a)
			n.freePages([]dma.Buffer{b})
		}
		return nil
	})
	if err := n.queryCaps(); err != nil {
		return err
	}
	if err := n.satisfyPages(PagesInit); err != nil {
		return err
	}
	if _, err := n.exec(newIn(OpInitHCA, 0, 0x10), 0x10); err != nil {
		return fmt.Errorf("connectx: INIT_HCA: %w", err)
	}
	n.push("TEARDOWN_HCA", func() error {
		_, err := n.exec(newIn(OpTeardownHCA, 0, 0x10), 0x10)
		return err
	})
	if err := n.satisfyPages(PagesRegular); err != nil {
		return err
	}
	if err := n.vport(); err != nil {
		return err
	}
	if err := n.createQueues(); err != nil {
		return err
	}
	if err := n.steering(); err != nil {
		return err
	}
	// The port's admin status UP once everything is ready, and DOWN
	// first on close (Linux en_main.c mlx5e_open, mlx5e_close:
	// mlx5_set_port_admin_status); the card reports the port up only
	// after it.
	if err := n.setPortAdmin(PortUp); err != nil {
		return err
	}
	n.push("PAOS admin down", func() error { return n.setPortAdmin(PortDown) })
	return n.queryLink()
}

// Port admin status values (Linux enum mlx5_port_status).
const (
	PortUp   = 1
	PortDown = 2
)

// setPortAdmin writes the PAOS register of port 1 as Linux's port.c
// mlx5_set_port_admin_status does: local_port 1, admin_status, ase (admin
// status enable) set (mlx5_ifc.h mlx5_ifc_paos_reg_bits: local_port bits
// 23:16 and admin_status 11:8 of the first dword, ase bit 31 of the
// second; 16 bytes in and out).
func (n *NIC) setPortAdmin(status uint32) error {
	in := newIn(OpAccessRegister, AccessRegWrite, 0x20)
	Field{0x08, 15, 0}.Set(in, RegPAOS)
	Field{0x10, 23, 16}.Set(in, 1)
	Field{0x10, 11, 8}.Set(in, status)
	Field{0x14, 31, 31}.Set(in, 1)
	if _, err := n.exec(in, 0x20); err != nil {
		return fmt.Errorf("connectx: ACCESS_REGISTER PAOS admin status %d: %w", status, err)
	}
	return nil
}

// exec runs a command and counts it; a failed card is sent none.
func (n *NIC) exec(in []byte, outLen int) ([]byte, error) {
	if n.failed != nil {
		return nil, n.failed
	}
	out, err := n.cmd.exec(in, outLen)
	n.stats.Commands = n.cmd.count
	return out, err
}

func (n *NIC) queryCaps() error {
	out, err := n.exec(newIn(OpQueryHCACap, 0<<1|1, 0x10), 0x1010)
	if err != nil {
		return fmt.Errorf("connectx: QUERY_HCA_CAP general: %w", err)
	}
	gen := out[0x10:]
	if pt := (Field{0x34, 9, 8}).Get(gen); pt != 1 {
		return fmt.Errorf("connectx: port type %d is not Ethernet", pt)
	}
	if (Field{0x40, 3, 3}).Get(gen) == 0 {
		return errors.New("connectx: card has no Ethernet offloads (eth_net_offloads 0)")
	}
	// max_wqe_sz_sq (cmd_hca_cap bits 0x290..0x29F: byte 0x50 bits 15:0)
	// is the largest send WQE in bytes; Linux sizes every SQ WQE by it
	// (mlx5e_get_max_sq_wqebbs: min(MLX5_SEND_WQE_MAX_WQEBBS,
	// max_wqe_sz_sq / MLX5_SEND_WQE_BB)). The driver needs 4 WQEBBs: a
	// 142-byte inline header (10 DS), the control segment and one data
	// segment.
	sz := Field{0x50, 15, 0}.Get(gen)
	n.caps.MaxSQWQEBBs = min(MaxWQEBBs, int(sz)/WQEBB)
	if n.caps.MaxSQWQEBBs < 4 {
		return fmt.Errorf("connectx: max_wqe_sz_sq %d bytes, the driver needs %d", sz, 4*WQEBB)
	}
	n.sq.maxDS = min(maxDS, n.caps.MaxSQWQEBBs*WQEBB/DSSize)
	// disable_local_lb_uc / _mc: cmd_hca_cap bits 0x3E1, 0x3E2 (byte
	// 0x7C bits 30, 29), which Linux checks before it changes the vport's
	// local loopback (vport.c mlx5_nic_vport_update_local_lb).
	n.caps.LocalLBUC = be32(gen, 0x7C)&capLocalLBUC != 0
	n.caps.LocalLBMC = be32(gen, 0x7C)&capLocalLBMC != 0
	out, err = n.exec(newIn(OpQueryHCACap, 1<<1|1, 0x10), 0x1010)
	if err != nil {
		return fmt.Errorf("connectx: QUERY_HCA_CAP Ethernet offloads: %w", err)
	}
	eth := out[0x10:]
	n.caps.CsumCap = Field{0, 31, 31}.Get(eth) != 0
	if l := (Field{0, 20, 16}).Get(eth); l > 0 {
		n.caps.MaxLSO = 1 << l
	}
	n.caps.WQEInlineMode = int(Field{0, 13, 12}.Get(eth))
	return nil
}

// pmtu accesses the PMTU register of port 1 (ACCESS_REGISTER, register
// data from input and output 0x10); admin is the MTU to write, 0 to read.
func (n *NIC) pmtu(admin uint32) (max, oper uint32, err error) {
	op := uint16(AccessRegRead)
	if admin != 0 {
		op = AccessRegWrite
	}
	in := newIn(OpAccessRegister, op, 0x20)
	Field{0x08, 15, 0}.Set(in, RegPMTU)
	Field{0x10, 23, 16}.Set(in, 1) // local_port
	Field{0x18, 31, 16}.Set(in, admin)
	out, err := n.exec(in, 0x20)
	if err != nil {
		return 0, 0, fmt.Errorf("connectx: ACCESS_REGISTER PMTU: %w", err)
	}
	return Field{0x14, 31, 16}.Get(out), Field{0x1C, 31, 16}.Get(out), nil
}

// vport sets the port MTU, then the vport's MTU and promiscuous mode, and
// reads the MAC. The port MTU is written as Linux does on every open
// (en_main.c mlx5e_set_mtu: mlx5_set_port_mtu, PMTU admin_mtu, then the
// vport MTU) and Snabb does (connectx.lua set_port_mtu): the port's MAC
// drops longer frames whatever the vport says. Its max_mtu is checked
// first (mlx5_query_port_max_mtu) and oper_mtu read back after
// (mlx5e_query_mtu, which Linux only warns about when it differs: here
// it is an error, the frames the driver was configured for would not
// pass).
func (n *NIC) vport() error {
	// hw MTU: IP MTU + Ethernet header + VLAN tag + FCS (Linux MLX5E_SW2HW_MTU).
	hw := uint32(n.cfg.MTU + 14 + 4 + 4)
	max, _, err := n.pmtu(0)
	if err != nil {
		return err
	}
	if hw > max {
		return fmt.Errorf("connectx: MTU %d needs a port MTU of %d, the port takes %d", n.cfg.MTU, hw, max)
	}
	if _, _, err := n.pmtu(hw); err != nil {
		return err
	}
	if _, oper, err := n.pmtu(0); err != nil {
		return err
	} else if oper != hw {
		return fmt.Errorf("connectx: port MTU %d after setting %d", oper, hw)
	}
	in := newIn(OpModifyNICVportCtx, 0, 0x200)
	put32(in, 0x0C, 1<<6|1<<4) // field_select: mtu, promisc
	ctx := in[0x100:]
	put32(ctx, 0x24, hw)
	put32(ctx, 0xF0, 1<<31|1<<30|1<<29) // promisc_uc, promisc_mc, promisc_all
	if _, err := n.exec(in, 0x10); err != nil {
		return fmt.Errorf("connectx: MODIFY_NIC_VPORT_CONTEXT: %w", err)
	}
	// The vport's local loopback off, as Linux sets it at every bring-up
	// (main.c mlx5_core_set_hca_defaults, "Disable local_lb by default":
	// mlx5_nic_vport_update_local_lb(dev, false)), each direction only
	// where the firmware lets it change (cmd_hca_cap disable_local_lb_uc
	// and _mc; without them Linux sends nothing). The self-test turns the
	// unicast one on for its run and back off.
	if n.caps.LocalLBUC || n.caps.LocalLBMC {
		in := newIn(OpModifyNICVportCtx, 0, 0x200)
		var fs, v uint32
		if n.caps.LocalLBUC {
			fs, v = fs|fieldDisableUCLB, v|vportDisableUCLB
		}
		if n.caps.LocalLBMC {
			fs, v = fs|fieldDisableMCLB, v|vportDisableMCLB
		}
		put32(in, 0x0C, fs)
		put32(in, 0x100, v)
		if _, err := n.exec(in, 0x10); err != nil {
			return fmt.Errorf("connectx: MODIFY_NIC_VPORT_CONTEXT disable_*_local_lb: %w", err)
		}
	}
	out, err := n.exec(newIn(OpQueryNICVportContext, 0, 0x10), 0x110)
	if err != nil {
		return fmt.Errorf("connectx: QUERY_NIC_VPORT_CONTEXT: %w", err)
	}
	ctx = out[0x10:]
	// The minimum inline mode as Linux's mlx5_query_min_inline takes it:
	// from the vport context only when wqe_inline_mode says so (1), L2
	// for 0, none for 2.
	switch n.caps.WQEInlineMode {
	case 0:
		n.caps.MinInlineMode = 1
	case 1:
		n.caps.MinInlineMode = int(Field{0, 26, 24}.Get(ctx))
	default:
		n.caps.MinInlineMode = 0
	}
	copy(n.mac[:], ctx[0xF6:0xFC])
	if n.mac == [6]byte{} {
		return errors.New("connectx: vport has no permanent MAC address")
	}
	return nil
}

func (n *NIC) queryLink() error {
	out, err := n.exec(newIn(OpQueryVportState, 0, 0x10), 0x10)
	if err != nil {
		return fmt.Errorf("connectx: QUERY_VPORT_STATE: %w", err)
	}
	n.link = out[0x0F]&0xF == 1
	return nil
}

// MAC returns the vport's permanent address.
func (n *NIC) MAC() [6]byte { return n.mac }

// Caps returns the capabilities read at bring-up.
func (n *NIC) Caps() Caps { return n.caps }

// Link reports the vport's operational state (down once the card failed).
func (n *NIC) Link() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.link && n.failed == nil
}

// Stats returns the counters.
func (n *NIC) Stats() Stats {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.stats
}
