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

// Open checks the function, brings it up and returns it ready to move
// frames. On failure everything done so far is undone.
func Open(cfg Config) (*NIC, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	id := cfg.ConfigSpace.Read32(pciID)
	ok := uint16(id) == VendorMellanox
	if ok {
		ok = false
		for _, d := range DeviceIDs {
			ok = ok || uint16(id>>16) == d
		}
	}
	if !ok {
		return nil, fmt.Errorf("%w: PCI ID %04x:%04x", ErrNotConnectX, uint16(id), uint16(id>>16))
	}
	n := &NIC{cfg: cfg, bar: regs{cfg.BAR0}, mem: cfg.Mem, pages: map[dma.Addr]dma.Buffer{},
		rxRdy: make(chan struct{}, 1)}
	n.cmd = cmdq{bar: n.bar, mem: cfg.Mem, timeout: cfg.BringUpCmdTimeout, sleep: cfg.Sleep, now: cfg.Now}
	err := n.bringUp()
	n.cmd.timeout = cfg.CmdTimeout // the undo commands and the running card's
	if err != nil {
		if terr := n.teardown(); terr != nil {
			err = fmt.Errorf("%w (teardown: %v)", err, terr)
		}
		return nil, err
	}
	return n, nil
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

// satisfyPages asks how many pages a stage needs and gives them.
func (n *NIC) satisfyPages(stage uint16) error {
	out, err := n.exec(newIn(OpQueryPages, stage, 0x10), 0x10)
	if err != nil {
		return fmt.Errorf("connectx: QUERY_PAGES stage %d: %w", stage, err)
	}
	want := int32(binary.BigEndian.Uint32(out[0x0C:]))
	if want <= 0 {
		return nil // nothing needed (CX7 firmware may report a negative count here)
	}
	if err := n.givePages(int(want)); err != nil {
		return fmt.Errorf("connectx: %s pages (stage %d): %w", [4]string{"", "boot", "init", "regular"}[min(stage, 3)], stage, err)
	}
	return nil
}

// pagesPerCmd bounds the page addresses in one MANAGE_PAGES (8 bytes each
// after a 16-byte header, within maxMailboxes).
const pagesPerCmd = (maxMailboxes*MailboxData + CmdInlineSize - 0x10) / 8

func (n *NIC) givePages(want int) error {
	if len(n.pages)+want > n.cfg.MaxPages {
		n.stats.PageRefused++
		return fmt.Errorf("connectx: firmware wants %d more pages, %d held, limit %d: %w", want, len(n.pages), n.cfg.MaxPages, ErrNoPages)
	}
	total, given := want, 0
	for want > 0 {
		k := min(want, pagesPerCmd)
		in := newIn(OpManagePages, ManagePagesGive, 0x10+8*k)
		put32(in, 0x0C, uint32(k))
		bufs := make([]dma.Buffer, 0, k)
		for i := 0; i < k; i++ {
			b, err := n.mem.Alloc(PageSize, PageSize, dma.Cached)
			if err != nil {
				n.freePages(bufs)
				return fmt.Errorf("connectx: firmware page %d of %d wanted: DMA memory: %w", given+i+1, total, err)
			}
			bufs = append(bufs, b)
			n.mem.SyncForDevice(&bufs[i], 0, b.Len(), dma.Bidirectional)
			put64(in, 0x10+8*i, uint64(b.Addr()))
		}
		if _, err := n.exec(in, 0x10); err != nil {
			n.freePages(bufs)
			return fmt.Errorf("connectx: MANAGE_PAGES give %d: %w", k, err)
		}
		for _, b := range bufs {
			n.pages[b.Addr()] = b
		}
		n.stats.PagesGiven += uint64(k)
		want -= k
		given += k
	}
	return nil
}

// cantGive answers a page request for function fn that the driver
// refused: MANAGE_PAGES op_mod "cannot give" (MLX5_PAGES_CANT_GIVE), no
// page list, as Linux's page_notify_fail sends it, so the firmware stops
// waiting for the pages.
func (n *NIC) cantGive(fn uint16) {
	in := newIn(OpManagePages, ManagePagesCantGive, 0x10)
	binary.BigEndian.PutUint16(in[0x0A:], fn)
	if _, err := n.exec(in, 0x10); err != nil {
		n.stats.PageCantGiveFailed++
		return
	}
	n.stats.PageCantGive++
}

func (n *NIC) freePages(bufs []dma.Buffer) {
	for i := range bufs {
		n.mem.SyncForCPU(&bufs[i], 0, bufs[i].Len(), dma.Bidirectional)
		_ = n.mem.Free(bufs[i])
	}
}

// takePages asks the card to return up to k pages and frees those it
// returns; it reports how many came back.
func (n *NIC) takePages(k int) (int, error) {
	got := 0
	for k > 0 {
		c := min(k, pagesPerCmd)
		in := newIn(OpManagePages, ManagePagesTake, 0x10)
		put32(in, 0x0C, uint32(c))
		out, err := n.exec(in, 0x10+8*c)
		if err != nil {
			return got, fmt.Errorf("connectx: MANAGE_PAGES take %d: %w", c, err)
		}
		m := int(binary.BigEndian.Uint32(out[0x08:]))
		if m > c {
			return got, fmt.Errorf("connectx: MANAGE_PAGES returned %d pages, %d asked", m, c)
		}
		for i := 0; i < m; i++ {
			a := dma.Addr(binary.BigEndian.Uint64(out[0x10+8*i:]))
			b, ok := n.pages[a]
			if !ok {
				return got, fmt.Errorf("connectx: MANAGE_PAGES returned page %#x never given", a)
			}
			delete(n.pages, a)
			n.freePages([]dma.Buffer{b})
			got++
		}
		n.stats.PagesReturned += uint64(m)
		if m < c {
			break
		}
		k -= c
	}
	return got, nil
}

// reclaimPages takes back every page after TEARDOWN_HCA. Pages the card
// would not return stay allocated: the card may still write them.
func (n *NIC) reclaimPages() error {
	if len(n.pages) == 0 {
		return nil
	}
	if n.cmd.dead {
		return fmt.Errorf("connectx: %d firmware pages left allocated: %w", len(n.pages), ErrDead)
	}
	if _, err := n.takePages(len(n.pages)); err != nil {
		return err
	}
	if len(n.pages) != 0 {
		return fmt.Errorf("connectx: card kept %d firmware pages", len(n.pages))
	}
	return nil
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

// create runs a create/alloc command and returns the object number at
// output 0x08 (24 bits), registering destroy with the number at input
// 0x08 for teardown.
func (n *NIC) create(name string, in []byte, destroy uint16) (uint32, error) {
	out, err := n.exec(in, 0x10)
	if err != nil {
		return 0, fmt.Errorf("connectx: %s: %w", name, err)
	}
	id := binary.BigEndian.Uint32(out[0x08:]) & 0xFFFFFF
	n.push(name, func() error {
		d := newIn(destroy, 0, 0x10)
		put32(d, 0x08, id)
		_, err := n.exec(d, 0x10)
		return err
	})
	return id, nil
}

// ring allocates a coherent, page-aligned ring of n bytes filled with fill,
// freed at teardown.
func (n *NIC) ring(name string, size int, fill byte) (dma.Buffer, error) {
	b, err := n.mem.Alloc(max(size, PageSize), PageSize, dma.Coherent)
	if err != nil {
		return dma.Buffer{}, fmt.Errorf("connectx: %s ring: %w", name, err)
	}
	for i := range b.Bytes() {
		b.Bytes()[i] = fill
	}
	n.pushMem(name+" memory", func() error { return n.mem.Free(b) })
	return b, nil
}

// pas writes the physical address list of buf (4 KiB pages) at in[off:].
func pas(in []byte, off int, buf dma.Buffer) {
	for i := 0; i < (buf.Len()+PageSize-1)/PageSize; i++ {
		put64(in, off+8*i, uint64(buf.Addr())+uint64(i*PageSize))
	}
}

func log2(n int) uint32 {
	l := uint32(0)
	for 1<<l < n {
		l++
	}
	return l
}

const eqLog = 6 // 64 event entries

func (n *NIC) createQueues() error {
	var err error
	if n.obj.uar, err = n.create("ALLOC_UAR", newIn(OpAllocUAR, 0, 0x10), OpDeallocUAR); err != nil {
		return err
	}
	// Every doorbell is a store to this page: one beyond the mapping
	// would be dropped (the card never rung) or reach another device.
	if end := (uint64(n.obj.uar) + 1) * UARPageSize; n.cfg.BAR0Size != 0 && end > uint64(n.cfg.BAR0Size) {
		return fmt.Errorf("%w: UAR %d at BAR0 %#x..%#x, %#x bytes mapped", ErrUARUnmapped, n.obj.uar, end-UARPageSize, end, n.cfg.BAR0Size)
	}
	if n.dbr, err = n.ring("doorbell records", PageSize, 0); err != nil {
		return err
	}
	// EQ: page requests, port changes, CQ errors.
	if n.eq.buf, err = n.ring("EQ", 64<<eqLog, EQEOwnerInit); err != nil {
		return err
	}
	n.eq.logSize = eqLog
	in := newIn(OpCreateEQ, 0, 0x110+8*((64<<eqLog+PageSize-1)/PageSize))
	Field{0x10 + 0x0C, 28, 24}.Set(in, eqLog)
	Field{0x10 + 0x0C, 23, 0}.Set(in, n.obj.uar)
	put64(in, 0x58, 1<<EventCQError|1<<EventPortChange|1<<EventPageRequest)
	pas(in, 0x110, n.eq.buf)
	out, err := n.exec(in, 0x10)
	if err != nil {
		return fmt.Errorf("connectx: CREATE_EQ: %w", err)
	}
	n.obj.eqn = uint32(out[0x0B])
	n.push("DESTROY_EQ", func() error {
		d := newIn(OpDestroyEQ, 0, 0x10)
		put32(d, 0x08, n.obj.eqn)
		_, err := n.exec(d, 0x10)
		return err
	})
	if n.obj.pd, err = n.create("ALLOC_PD", newIn(OpAllocPD, 0, 0x10), OpDeallocPD); err != nil {
		return err
	}
	if n.obj.td, err = n.create("ALLOC_TRANSPORT_DOMAIN", newIn(OpAllocTransportDomain, 0, 0x10), OpDeallocTransportDom); err != nil {
		return err
	}
	out, err = n.exec(newIn(OpQuerySpecialContexts, 0, 0x10), 0x10)
	if err != nil {
		return fmt.Errorf("connectx: QUERY_SPECIAL_CONTEXTS: %w", err)
	}
	n.obj.rlkey = binary.BigEndian.Uint32(out[0x0C:])
	// CQs: one entry per WQEBB (TX) or buffer (RX), so neither can overrun.
	if n.obj.txcq, err = n.createCQ("TX CQ", &n.txcq, n.cfg.TxRing, 128); err != nil {
		return err
	}
	if n.obj.rxcq, err = n.createCQ("RX CQ", &n.rxcq, n.cfg.RxRing, 192); err != nil {
		return err
	}
	in = newIn(OpCreateTIS, 0, 0xC0)
	put32(in, 0x20+0x24, n.obj.td)
	if n.obj.tis, err = n.create("CREATE_TIS", in, OpDestroyTIS); err != nil {
		return err
	}
	if err := n.createSQ(); err != nil {
		return err
	}
	return n.createRQ()
}

func (n *NIC) createCQ(name string, q *queue, entries int, dbrOff int) (uint32, error) {
	var err error
	if q.buf, err = n.ring(name, entries*CQESize, 0xFF); err != nil {
		return 0, err
	}
	for i := 0; i < entries; i++ {
		q.buf.Bytes()[i*CQESize+63] = CQEOpOwnInit
	}
	q.logSize = uint(log2(entries))
	in := newIn(OpCreateCQ, 0, 0x110+8*((q.buf.Len()+PageSize-1)/PageSize))
	ctx := in[0x10:]
	Field{0x0C, 28, 24}.Set(ctx, uint32(q.logSize))
	Field{0x0C, 23, 0}.Set(ctx, n.obj.uar)
	Field{0x14, 7, 0}.Set(ctx, n.obj.eqn)
	put64(ctx, 0x38, uint64(n.dbr.Addr())+uint64(dbrOff))
	pas(in, 0x110, q.buf)
	return n.create(name, in, OpDestroyCQ)
}

// wq fills a work queue structure (mlx5_ifc wq_bits) at w.
func (n *NIC) wq(w []byte, buf dma.Buffer, logStride, logSize uint32, dbr uint64) {
	Field{0x00, 31, 28}.Set(w, 1) // cyclic
	Field{0x08, 23, 0}.Set(w, n.obj.pd)
	Field{0x0C, 23, 0}.Set(w, n.obj.uar)
	put64(w, 0x10, dbr)
	Field{0x20, 19, 16}.Set(w, logStride)
	Field{0x20, 12, 8}.Set(w, 0) // 4 KiB pages
	Field{0x20, 4, 0}.Set(w, logSize)
	pas(w, 0xC0, buf)
}

func (n *NIC) modifyState(op uint16, qn uint32, from, to uint32) error {
	in := newIn(op, 0, 0x110)
	put32(in, 0x08, from<<28|qn)
	Field{0x20, 23, 20}.Set(in, to)
	if _, err := n.exec(in, 0x10); err != nil {
		return fmt.Errorf("connectx: modify queue %#x %d->%d: %w", qn, from, to, err)
	}
	return nil
}

func (n *NIC) createSQ() error {
	var err error
	if n.sq.buf, err = n.ring("SQ", n.cfg.TxRing*WQEBB, 0); err != nil {
		return err
	}
	n.sq.size = uint32(n.cfg.TxRing)
	n.sq.slots = make([]txSlot, n.cfg.TxRing)
	n.pushMem("queued sends", n.abortTx)
	in := newIn(OpCreateSQ, 0, 0x110+8*(n.sq.buf.Len()/PageSize))
	ctx := in[0x20:]
	// rlkey, flush_in_error_en, and min_wqe_inline_mode only when the
	// caps' wqe_inline_mode is "from the vport context" (Linux
	// mlx5e_create_sq).
	w0 := uint32(1<<31 | 1<<28)
	if n.caps.WQEInlineMode == 1 {
		w0 |= uint32(n.caps.MinInlineMode) << 24
	}
	put32(ctx, 0, w0)
	put32(ctx, 0x08, n.obj.txcq)
	put32(ctx, 0x20, 1<<16) // tis_lst_sz
	put32(ctx, 0x2C, n.obj.tis)
	n.wq(ctx[0x30:], n.sq.buf, 6, log2(n.cfg.TxRing), uint64(n.dbr.Addr()))
	if n.obj.sq, err = n.create("CREATE_SQ", in, OpDestroySQ); err != nil {
		return err
	}
	return n.modifyState(OpModifySQ, n.obj.sq, StateRST, StateRDY)
}

func (n *NIC) createRQ() error {
	var err error
	if n.rq.buf, err = n.ring("RQ", n.cfg.RxRing*DSSize, 0); err != nil {
		return err
	}
	n.rq.size = uint32(n.cfg.RxRing)
	in := newIn(OpCreateRQ, 0, 0x110+8*((n.rq.buf.Len()+PageSize-1)/PageSize))
	ctx := in[0x20:]
	// rlky, vsd (VLAN strip disable), flush_in_error_en (rqc bit 0x0D:
	// after an error the card returns every posted WQE with a flush CQE,
	// as Linux's mlx5e_create_rq asks)
	put32(ctx, 0, 1<<31|1<<28|1<<18)
	put32(ctx, 0x08, n.obj.rxcq)
	n.wq(ctx[0x30:], n.rq.buf, 4, log2(n.cfg.RxRing), uint64(n.dbr.Addr())+64)
	if n.obj.rq, err = n.create("CREATE_RQ", in, OpDestroyRQ); err != nil {
		return err
	}
	if err := n.allocRx(); err != nil {
		return err
	}
	return n.modifyState(OpModifyRQ, n.obj.rq, StateRST, StateRDY)
}

// steering creates the TIR and a flow table with one wildcard entry to it.
func (n *NIC) steering() error {
	in := newIn(OpCreateTIR, 0, 0x110) // create_tir_in: 0x20 + tirc 0xF0 (mlx5_ifc.h)
	ctx := in[0x20:]
	Field{0x04, 31, 28}.Set(ctx, 0) // direct dispatch
	put32(ctx, 0x1C, n.obj.rq)
	put32(ctx, 0x24, n.obj.td)
	var err error
	if n.obj.tir, err = n.create("CREATE_TIR", in, OpDestroyTIR); err != nil {
		return err
	}
	in = newIn(OpCreateFlowTable, 0, 0x40)
	put32(in, 0x10, 0) // NIC RX
	Field{0x18, 23, 16}.Set(in, 0)
	Field{0x18, 7, 0}.Set(in, 0) // log_size 0: one entry
	out, err := n.exec(in, 0x10)
	if err != nil {
		return fmt.Errorf("connectx: CREATE_FLOW_TABLE: %w", err)
	}
	n.obj.ft = binary.BigEndian.Uint32(out[0x08:]) & 0xFFFFFF
	n.push("DESTROY_FLOW_TABLE", func() error {
		d := newIn(OpDestroyFlowTable, 0, 0x40)
		put32(d, 0x14, n.obj.ft)
		_, err := n.exec(d, 0x10)
		return err
	})
	in = newIn(OpCreateFlowGroup, 0, 0x400)
	put32(in, 0x14, n.obj.ft)
	put32(in, 0x1C, 0)
	put32(in, 0x24, 0)
	if out, err = n.exec(in, 0x10); err != nil {
		return fmt.Errorf("connectx: CREATE_FLOW_GROUP: %w", err)
	}
	n.obj.fg = binary.BigEndian.Uint32(out[0x08:]) & 0xFFFFFF
	n.push("DESTROY_FLOW_GROUP", func() error {
		d := newIn(OpDestroyFlowGroup, 0, 0x40)
		put32(d, 0x14, n.obj.ft)
		put32(d, 0x18, n.obj.fg)
		_, err := n.exec(d, 0x10)
		return err
	})
	in = newIn(OpSetFlowTableEntry, 0, 0x40+0x300+8)
	put32(in, 0x14, n.obj.ft)
	put32(in, 0x20, 0)
	fc := in[0x40:]
	put32(fc, 0x04, n.obj.fg)
	put32(fc, 0x0C, 4) // action: forward to destination
	put32(fc, 0x10, 1) // destination_list_size
	put32(fc, 0x300, 2<<24|n.obj.tir)
	if _, err := n.exec(in, 0x10); err != nil {
		return fmt.Errorf("connectx: SET_FLOW_TABLE_ENTRY: %w", err)
	}
	n.push("DELETE_FLOW_TABLE_ENTRY", func() error {
		d := newIn(OpDeleteFlowTableEntry, 0, 0x40)
		put32(d, 0x14, n.obj.ft)
		put32(d, 0x20, 0)
		_, err := n.exec(d, 0x10)
		return err
	})
	in = newIn(OpSetFlowTableRoot, 0, 0x40)
	put32(in, 0x14, n.obj.ft)
	if _, err := n.exec(in, 0x10); err != nil {
		return fmt.Errorf("connectx: SET_FLOW_TABLE_ROOT: %w", err)
	}
	// No undo of its own: at Close the root table is destroyed directly,
	// as Linux destroys the last table of the NIC RX root (fs_core.c
	// update_root_ft_destroy: no next table, so root_ft = NULL and no
	// command). SET_FLOW_TABLE_ROOT op_mod 1 (disconnect) is for an IPoIB
	// underlay QPN, or a NIC TX root with reset_root_to_default.
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
