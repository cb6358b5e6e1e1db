package connectxtest_test

import (
	"encoding/binary"
	"math/bits"
	"strings"
	"testing"

	"github.com/tamanic/tamanic/connectx"
	"github.com/tamanic/tamanic/connectx/connectxtest"
	"github.com/tamanic/tamanic/dma"
	"github.com/tamanic/tamanic/dma/dmatest"
)

// raw drives the model's command interface by hand, to check how it
// answers malformed commands.
type raw struct {
	t   *testing.T
	m   *connectxtest.Model
	mem *dmatest.Memory
	q   dma.Buffer
	mb  []dma.Buffer
	tok uint8
}

func newRaw(t *testing.T, o connectxtest.Options) *raw {
	mem := dmatest.New(t, dmatest.Options{})
	o.Mem = mem
	r := &raw{t: t, m: connectxtest.New(o), mem: mem}
	r.m.ConfigSpace().Write32(4, 6)
	for r.rd(connectx.InitInitializing)&connectx.InitBusy != 0 {
	}
	var err error
	if r.q, err = mem.Alloc(4096, 4096, dma.Coherent); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 16; i++ {
		b, err := mem.Alloc(connectx.MailboxSize, 4096, dma.Coherent)
		if err != nil {
			t.Fatal(err)
		}
		r.mb = append(r.mb, b)
	}
	r.wr(connectx.InitCmdqAddrH, 0)
	r.wr(connectx.InitCmdqAddrLSz, uint32(r.q.Addr()))
	for r.rd(connectx.InitInitializing)&connectx.InitBusy != 0 {
	}
	return r
}

func (r *raw) rd(off uint32) uint32    { return bits.ReverseBytes32(r.m.Read32(off)) }
func (r *raw) wr(off uint32, v uint32) { r.m.Write32(off, bits.ReverseBytes32(v)) }

// cmd sends in (outLen bytes expected); tweak may corrupt the entry or
// mailboxes before the doorbell. It returns the delivery status, the
// command status and the output.
func (r *raw) cmd(in []byte, outLen int, tweak func(e []byte, mb []dma.Buffer)) (uint8, uint8, []byte) {
	r.tok++
	nin, nout := connectx.Mailboxes(len(in)), connectx.Mailboxes(outLen)
	e := connectx.CmdEntry{InLen: uint32(len(in)), OutLen: uint32(outLen), Token: r.tok, Owner: true}
	copy(e.In[:], in)
	link := func(bs []dma.Buffer, n int, data []byte) uint64 {
		for i := 0; i < n; i++ {
			m := connectx.Mailbox{BlockNum: uint32(i), Token: r.tok}
			if lo := 16 + i*512; lo < len(data) {
				copy(m.Data[:], data[lo:])
			}
			if i+1 < n {
				m.Next = uint64(bs[i+1].Addr())
			}
			m.Encode(bs[i].Bytes())
		}
		if n == 0 {
			return 0
		}
		return uint64(bs[0].Addr())
	}
	e.InPtr = link(r.mb[:8], nin, in)
	e.OutPtr = link(r.mb[8:], nout, nil)
	e.Encode(r.q.Bytes())
	if tweak != nil {
		tweak(r.q.Bytes(), r.mb)
	}
	r.wr(connectx.InitCmdDbell, 1)
	if so := r.q.Bytes()[0x3F]; so&1 != 0 || so>>1 != 0 {
		return so >> 1, 0xFF, nil // still owned (0x7F) or not delivered
	}
	d, _ := connectx.DecodeCmdEntry(r.q.Bytes())
	out := make([]byte, max(outLen, 16))
	copy(out, d.Out[:])
	for i := 0; i < nout; i++ {
		copy(out[16+i*512:], r.mb[8+i].Bytes()[:512])
	}
	return d.DeliveryStatus, out[0], out
}

func in(op uint16, opmod uint16, n int) []byte {
	b := make([]byte, n)
	binary.BigEndian.PutUint32(b, uint32(op)<<16)
	binary.BigEndian.PutUint32(b[4:], uint32(opmod))
	return b
}

func TestDeliveryStatuses(t *testing.T) {
	r := newRaw(t, connectxtest.Options{})
	big := in(connectx.OpModifyNICVportCtx, 0, 0x200) // needs a mailbox chain
	for _, c := range []struct {
		name  string
		tweak func(e []byte, mb []dma.Buffer)
		want  uint8
	}{
		{"bad type", func(e []byte, _ []dma.Buffer) { e[0] = 6 }, connectx.DeliveryBadType},
		{"entry reserved byte", func(e []byte, _ []dma.Buffer) { e[2] = 1 }, connectx.DeliveryResNotClear},
		{"mailbox reserved byte", func(_ []byte, mb []dma.Buffer) { mb[0].Bytes()[0x210] = 1 }, connectx.DeliveryResNotClear},
		{"mailbox token", func(_ []byte, mb []dma.Buffer) { mb[0].Bytes()[0x23D]++ }, connectx.DeliveryToken},
		{"block number", func(_ []byte, mb []dma.Buffer) { mb[0].Bytes()[0x23B] = 5 }, connectx.DeliveryBadBlockNum},
		{"input pointer", func(e []byte, _ []dma.Buffer) { e[0x0F] |= 0x40 }, connectx.DeliveryInPtrAlign},
		{"input length", func(e []byte, _ []dma.Buffer) { binary.BigEndian.PutUint32(e[4:], 4) }, connectx.DeliveryInLength},
		{"output length", func(e []byte, _ []dma.Buffer) { binary.BigEndian.PutUint32(e[0x38:], 0) }, connectx.DeliveryOutLength},
	} {
		if ds, _, _ := r.cmd(big, 16, c.tweak); ds != c.want {
			t.Errorf("%s: delivery status %#x, want %#x", c.name, ds, c.want)
		}
	}
	// Output mailbox chain broken.
	if ds, _, _ := r.cmd(in(connectx.OpQueryISSI, 0, 16), 0x70, func(e []byte, _ []dma.Buffer) { e[0x37] |= 0x80 }); ds != connectx.DeliveryOutPtrAlign {
		t.Errorf("output pointer: %#x", ds)
	}
	if v := r.m.Violations(); len(v) != 0 {
		t.Errorf("violations %v", v)
	}
}

func TestCommandStatuses(t *testing.T) {
	r := newRaw(t, connectxtest.Options{})
	st := func(b []byte, outLen int) uint8 {
		ds, s, _ := r.cmd(b, outLen, nil)
		if ds != 0 {
			t.Fatalf("delivery %#x", ds)
		}
		return s
	}
	if s := st(in(connectx.OpQueryISSI, 0, 16), 0x70); s != uint8(connectx.StatBadSysState) {
		t.Errorf("command before ENABLE_HCA: %#x", s)
	}
	if s := st(in(connectx.OpEnableHCA, 0, 16), 16); s != 0 {
		t.Fatalf("ENABLE_HCA %#x", s)
	}
	for _, c := range []struct {
		name   string
		in     []byte
		outLen int
		want   connectx.CmdStatus
	}{
		{"unknown opcode", in(0x7FF, 0, 16), 16, connectx.StatBadOp},
		{"short input", in(connectx.OpCreateCQ, 0, 0x20), 16, connectx.StatBadInputLen},
		{"short output", in(connectx.OpQueryISSI, 0, 16), 16, connectx.StatBadOutputLen},
		{"caps before pages", in(connectx.OpQueryHCACap, 1, 16), 0x1010, connectx.StatBadSysState},
		{"INIT_HCA before pages", in(connectx.OpInitHCA, 0, 16), 16, connectx.StatBadSysState},
		{"object before INIT_HCA", in(connectx.OpAllocPD, 0, 16), 16, connectx.StatBadSysState},
		{"bad page stage", in(connectx.OpQueryPages, 7, 16), 16, connectx.StatBadParam},
		{"ISSI 9", func() []byte { b := in(connectx.OpSetISSI, 0, 16); b[11] = 9; return b }(), 16, connectx.StatBadParam},
		{"bad MANAGE_PAGES op_mod", in(connectx.OpManagePages, 5, 16), 16, connectx.StatBadParam},
		{"cannot give for another function", func() []byte { b := in(connectx.OpManagePages, connectx.ManagePagesCantGive, 16); b[11] = 3; return b }(), 16, connectx.StatBadParam},
		{"teardown before init", in(connectx.OpTeardownHCA, 0, 16), 16, connectx.StatBadSysState},
	} {
		if s := st(c.in, c.outLen); s != uint8(c.want) {
			t.Errorf("%s: status %#x, want %#x", c.name, s, uint8(c.want))
		}
	}
	// Pages: misaligned and duplicate addresses are refused, a short list too.
	mp := in(connectx.OpManagePages, 1, 0x18)
	binary.BigEndian.PutUint32(mp[0x0C:], 1)
	binary.BigEndian.PutUint64(mp[0x10:], 0x1234)
	if s := st(mp, 16); s != uint8(connectx.StatBadParam) {
		t.Errorf("misaligned page: %#x", s)
	}
	binary.BigEndian.PutUint32(mp[0x0C:], 2)
	if s := st(mp, 16); s != uint8(connectx.StatBadInputLen) {
		t.Errorf("short page list: %#x", s)
	}
	if v := r.m.Violations(); len(v) != 0 {
		t.Errorf("violations %v", v)
	}
}

func TestInitSegmentMisuse(t *testing.T) {
	mem := dmatest.New(t, dmatest.Options{})
	m := connectxtest.New(connectxtest.Options{Mem: mem})
	m.Write32(connectx.InitCmdDbell, bits.ReverseBytes32(1))
	m.Write32(connectx.InitCmdqAddrLSz, bits.ReverseBytes32(0x1000|0x100))
	m.Write32(0x20, 0)
	m.Write32(0x8000, 0) // UAR page never allocated
	m.Read32(3)
	v := strings.Join(m.Violations(), "\n")
	for _, want := range []string{"before the command queue", "before cmdq_addr_h", "nic_interface", "read-only", "not allocated", "BAR0 read"} {
		if !strings.Contains(v, want) {
			t.Errorf("no violation mentioning %q in\n%s", want, v)
		}
	}
	if m.ConfigSpace().Read32(0)&0xFFFF != 0x15B3 || m.ConfigSpace().Read32(64) != 0xFFFFFFFF {
		t.Error("config space")
	}
}

// initHCA takes a raw command interface through ENABLE_HCA, pages and
// INIT_HCA.
func (r *raw) initHCA() {
	st := func(b []byte, outLen int) []byte {
		ds, s, out := r.cmd(b, outLen, nil)
		if ds != 0 || s != 0 {
			r.t.Fatalf("command %#x: delivery %#x status %#x", binary.BigEndian.Uint16(b), ds, s)
		}
		return out
	}
	st(in(connectx.OpEnableHCA, 0, 16), 16)
	out := st(in(connectx.OpQueryPages, connectx.PagesInit, 16), 16)
	n := int(binary.BigEndian.Uint32(out[0x0C:]))
	mp := in(connectx.OpManagePages, connectx.ManagePagesGive, 0x10+8*n)
	binary.BigEndian.PutUint32(mp[0x0C:], uint32(n))
	for i := 0; i < n; i++ {
		b, err := r.mem.Alloc(4096, 4096, dma.Cached)
		if err != nil {
			r.t.Fatal(err)
		}
		r.mem.SyncForDevice(&b, 0, b.Len(), dma.Bidirectional)
		binary.BigEndian.PutUint64(mp[0x10+8*i:], uint64(b.Addr()))
	}
	st(mp, 16)
	st(in(connectx.OpInitHCA, 0, 16), 16)
}

func TestObjectStatuses(t *testing.T) {
	r := newRaw(t, connectxtest.Options{})
	r.initHCA()
	obj := func(b []byte) (uint8, uint32) {
		ds, s, out := r.cmd(b, 16, nil)
		if ds != 0 {
			t.Fatalf("delivery %#x", ds)
		}
		return s, binary.BigEndian.Uint32(out[8:]) & 0xFFFFFF
	}
	with := func(op uint16, n int, f func(b []byte)) []byte {
		b := in(op, 0, n)
		f(b)
		return b
	}
	id := func(op uint16, v uint32) []byte {
		return with(op, 16, func(b []byte) { binary.BigEndian.PutUint32(b[8:], v) })
	}
	_, uar := obj(in(connectx.OpAllocUAR, 0, 16))
	_, pd := obj(in(connectx.OpAllocPD, 0, 16))
	eqRing, _ := r.mem.Alloc(4096, 4096, dma.Coherent)
	cqRing, _ := r.mem.Alloc(4096, 4096, dma.Coherent)
	dbr, _ := r.mem.Alloc(64, 64, dma.Coherent)
	s, eqn := obj(with(connectx.OpCreateEQ, 0x118, func(b []byte) {
		binary.BigEndian.PutUint32(b[0x10+0x0C:], 6<<24|uar)
		binary.BigEndian.PutUint64(b[0x110:], uint64(eqRing.Addr()))
	}))
	if s != 0 {
		t.Fatalf("CREATE_EQ %#x", s)
	}
	cq := func(eq uint32, w0 uint32) []byte {
		return with(connectx.OpCreateCQ, 0x118, func(b []byte) {
			binary.BigEndian.PutUint32(b[0x10:], w0)
			binary.BigEndian.PutUint32(b[0x10+0x0C:], 6<<24|uar)
			binary.BigEndian.PutUint32(b[0x10+0x14:], eq)
			binary.BigEndian.PutUint64(b[0x10+0x38:], uint64(dbr.Addr()))
			binary.BigEndian.PutUint64(b[0x110:], uint64(cqRing.Addr()))
		})
	}
	for _, c := range []struct {
		name string
		in   []byte
		want connectx.CmdStatus
	}{
		{"DEALLOC_UAR unknown", id(connectx.OpDeallocUAR, 9), connectx.StatBadResource},
		{"DEALLOC_PD unknown", id(connectx.OpDeallocPD, 999), connectx.StatBadResource},
		{"DESTROY_CQ unknown", id(connectx.OpDestroyCQ, 999), connectx.StatBadResource},
		{"DESTROY_SQ unknown", id(connectx.OpDestroySQ, 999), connectx.StatBadResource},
		{"DESTROY_RQ unknown", id(connectx.OpDestroyRQ, 999), connectx.StatBadResource},
		{"DESTROY_TIS unknown", id(connectx.OpDestroyTIS, 999), connectx.StatBadResource},
		{"DESTROY_TIR unknown", id(connectx.OpDestroyTIR, 999), connectx.StatBadResource},
		{"DEALLOC_TD unknown", id(connectx.OpDeallocTransportDom, 999), connectx.StatBadResource},
		{"DESTROY_EQ unknown", id(connectx.OpDestroyEQ, 99), connectx.StatBadResource},
		{"CQ on unknown EQ", cq(99, 0), connectx.StatBadResource},
		{"CQ with 128-byte CQEs", cq(eqn, 1<<21), connectx.StatBadParam},
		{"CQ with compression", cq(eqn, 1<<14), connectx.StatBadParam},
		{"TIS on unknown TD", with(connectx.OpCreateTIS, 0xC0, func(b []byte) { b[0x47] = 9 }), connectx.StatBadResource},
		{"MODIFY_SQ unknown", with(connectx.OpModifySQ, 0x110, func(b []byte) { b[0x0B] = 9 }), connectx.StatBadResource},
		{"TIR on unknown RQ", with(connectx.OpCreateTIR, 0x110, func(b []byte) { b[0x3F] = 9 }), connectx.StatBadResource},
		{"TIR with indirect dispatch", with(connectx.OpCreateTIR, 0x110, func(b []byte) { b[0x24] = 0x10 }), connectx.StatBadParam},
		{"flow table of type 1", with(connectx.OpCreateFlowTable, 0x40, func(b []byte) { b[0x10] = 1 }), connectx.StatBadParam},
		{"flow group on unknown table", with(connectx.OpCreateFlowGroup, 0x400, func(b []byte) { b[0x17] = 9 }), connectx.StatBadResource},
		{"SQ on unknown CQ", with(connectx.OpCreateSQ, 0x118, func(b []byte) { b[0x20] = 0x80; b[0x40] = 0; b[0x41] = 1 }), connectx.StatBadResource},
		{"SQ without rlkey", with(connectx.OpCreateSQ, 0x118, func(b []byte) { b[0x41] = 1 }), connectx.StatBadParam},
		{"RQ not created in RST", with(connectx.OpCreateRQ, 0x118, func(b []byte) { b[0x20] = 0x80; b[0x21] = 0x10 }), connectx.StatBadParam},
		{"vport unknown field", with(connectx.OpModifyNICVportCtx, 0x200, func(b []byte) { b[0x0F] = 1 }), connectx.StatBadParam},
		{"vport MTU 20", with(connectx.OpModifyNICVportCtx, 0x200, func(b []byte) { b[0x0F] = 0x40; b[0x127] = 20 }), connectx.StatBadParam},
		{"INIT_HCA twice", in(connectx.OpInitHCA, 0, 16), connectx.StatBadSysState},
		{"SET_ISSI after INIT_HCA", in(connectx.OpSetISSI, 0, 16), connectx.StatBadSysState},
		{"DISABLE_HCA before teardown", in(connectx.OpDisableHCA, 0, 16), connectx.StatBadSysState},
	} {
		if s, _ := obj(c.in); s != uint8(c.want) {
			t.Errorf("%s: status %#x, want %#x", c.name, s, uint8(c.want))
		}
	}
	if s, cqn := obj(cq(eqn, 0)); s != 0 || cqn == 0 {
		t.Fatalf("CREATE_CQ %#x", s)
	}
	if s, _ := obj(id(connectx.OpDestroyEQ, eqn)); s != uint8(connectx.StatResourceBusy) {
		t.Errorf("DESTROY_EQ with a CQ on it: %#x", s)
	}
	if s, _ := obj(id(connectx.OpDeallocUAR, uar)); s != uint8(connectx.StatResourceBusy) {
		t.Errorf("DEALLOC_UAR in use: %#x", s)
	}
	if s, _ := obj(id(connectx.OpDeallocPD, pd)); s != 0 {
		t.Errorf("DEALLOC_PD: %#x", s)
	}
	// Page reclaim: only what exceeds the need while initialised, all
	// after TEARDOWN_HCA.
	take := func() int {
		b := in(connectx.OpManagePages, connectx.ManagePagesTake, 16)
		b[0x0F] = 64
		ds, s, out := r.cmd(b, 0x10+8*64, nil)
		if ds != 0 || s != 0 {
			t.Fatalf("take: %#x %#x", ds, s)
		}
		return int(binary.BigEndian.Uint32(out[8:]))
	}
	if n := take(); n != 0 {
		t.Errorf("firmware gave back %d pages it needs", n)
	}
	if s, _ := obj(in(connectx.OpTeardownHCA, 0, 16)); s != 0 {
		t.Fatal("TEARDOWN_HCA")
	}
	if n := take(); n != 20 {
		t.Errorf("%d pages back after teardown", n)
	}
	if v := r.m.Violations(); len(v) != 0 {
		t.Errorf("violations %v", v)
	}
	r.mem.Take() // pages the test never frees
}

// Mailboxes 1 KiB-aligned are what Linux hands the firmware (a dma_pool
// of 0x240-byte blocks aligned to 1 KiB); 0x240-aligned ones are refused
// with IN_PTR_ALIGN_ERR (Snabb).
func TestMailboxAlignment(t *testing.T) {
	r := newRaw(t, connectxtest.Options{})
	if _, s, _ := r.cmd(in(connectx.OpEnableHCA, 0, 16), 16, nil); s != 0 {
		t.Fatalf("ENABLE_HCA %#x", s)
	}
	// A buffer whose address has the given alignment and no coarser one.
	at := func(align uint64) dma.Buffer {
		for {
			b, err := r.mem.Alloc(connectx.MailboxSize, 64, dma.Coherent)
			if err != nil {
				t.Fatal(err)
			}
			if a := uint64(b.Addr()); a%align == 0 && a%(2*align) != 0 {
				return b
			}
		}
	}
	big := in(connectx.OpModifyNICVportCtx, 0, 0x200)
	for _, c := range []struct {
		align uint64
		want  uint8
	}{{1024, 0}, {0x40, connectx.DeliveryInPtrAlign}} {
		b := at(c.align)
		ds, _, _ := r.cmd(big, 16, func(e []byte, mb []dma.Buffer) {
			copy(b.Bytes(), mb[0].Bytes())
			binary.BigEndian.PutUint64(e[0x08:], uint64(b.Addr()))
		})
		if ds != c.want {
			t.Errorf("mailbox at %#x (%#x-aligned): delivery status %#x, want %#x", b.Addr(), c.align, ds, c.want)
		}
	}
	r.m.Violations()
}
