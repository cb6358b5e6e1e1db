package connectx

import (
	"encoding/binary"
	"fmt"

	"github.com/tamanic/tamanic/dma"
)

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
