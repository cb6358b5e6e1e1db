package connectx_test

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/tamanic/tamanic/connectx"
)

func unhex(t testing.TB, s string) []byte {
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The command entry of ENABLE_HCA as a Linux mlx5_core trace shows it (Snabb
// trace-mlx5_core: "07000000 00000010 ...", opcode 0x0104 in the first
// inline input word, dword 0x3C = 0x01fd0001: token 1, signature 0xfd, owned
// by the card). Signatures are not computed here (Linux runs with them off),
// so the signature byte is compared apart.
func TestCmdEntryMatchesTrace(t *testing.T) {
	want := unhex(t, "07000000 00000010 00000000 00000000 01040000 00000000 00000000 00000000"+
		"00000000 00000000 00000000 00000000 00000000 00000000 00000010 01fd0001")
	e := connectx.CmdEntry{InLen: 0x10, OutLen: 0x10, Token: 1, Owner: true}
	e.In[0], e.In[1] = 0x01, 0x04
	got := make([]byte, 64)
	e.Encode(got)
	want[0x3D] = 0
	if !bytes.Equal(got, want) {
		t.Fatalf("entry\n got %x\nwant %x", got, want)
	}
	d, err := connectx.DecodeCmdEntry(got)
	if err != nil || d != e {
		t.Fatalf("decode %+v %v", d, err)
	}
}

func TestFieldOffsets(t *testing.T) {
	b := make([]byte, 8)
	connectx.Field{Off: 4, Hi: 28, Lo: 24}.Set(b, 0x1F)
	connectx.Field{Off: 4, Hi: 23, Lo: 0}.Set(b, 0xABCDEF)
	if got := hex.EncodeToString(b); got != "000000001fabcdef" {
		t.Fatalf("fields %s", got)
	}
	if v := (connectx.Field{Off: 4, Hi: 28, Lo: 24}).Get(b); v != 0x1F {
		t.Fatalf("get %#x", v)
	}
	connectx.Field{Off: 0, Hi: 31, Lo: 0}.Set(b, 0xFFFFFFFF)
	if v := (connectx.Field{Off: 0, Hi: 31, Lo: 0}).Get(b); v != 0xFFFFFFFF {
		t.Fatalf("full word %#x", v)
	}
}

// A send WQE laid out as qp.h defines it: ctrl (opmod|wqe_index|opcode,
// sqn|ds, fm_ce_se at byte 11), eth (cs_flags 0x14, mss 0x16,
// inline_hdr.sz 0x1C, inline from 0x1E), then data segments.
func TestWQELayout(t *testing.T) {
	w := make([]byte, 128)
	c := connectx.CtrlSeg{WQEIndex: 0xBEEF, Opcode: connectx.OpcodeLSO, SQN: 0x1234, DS: 9, FmCeSe: connectx.CtrlCQUpdate}
	c.Encode(w)
	inl := bytes.Repeat([]byte{0xAA}, 54)
	e := connectx.EthSeg{CsFlags: connectx.EthL3Csum | connectx.EthL4Csum, MSS: 1448, Inline: inl}
	n := e.Encode(w[16:])
	if n != connectx.InlineDS(54)*16 || connectx.InlineDS(54) != 5 {
		t.Fatalf("inline DS %d, bytes %d", connectx.InlineDS(54), n)
	}
	if got := hex.EncodeToString(w[:16]); got != "00beef0e001234090000000800000000" {
		t.Fatalf("ctrl %s", got)
	}
	if w[0x14] != 0xC0 || binary.BigEndian.Uint16(w[0x16:]) != 1448 || binary.BigEndian.Uint16(w[0x1C:]) != 54 ||
		w[0x1E] != 0xAA || w[0x1E+53] != 0xAA || w[0x1E+54] != 0 {
		t.Fatalf("eth segment %x", w[16:96])
	}
	d := connectx.DataSeg{ByteCount: 9000, LKey: 0x77, Addr: 0x1_2345_6780}
	d.Encode(w[16+n:])
	if got := hex.EncodeToString(w[16+n : 32+n]); got != "0000232800000077"+"0000000123456780" {
		t.Fatalf("data segment %s", got)
	}
	dc, _ := connectx.DecodeCtrlSeg(w)
	de, m, err := connectx.DecodeEthSeg(w[16:])
	dd, _ := connectx.DecodeDataSeg(w[16+n:])
	if dc != c || err != nil || m != n || de.MSS != 1448 || !bytes.Equal(de.Inline, inl) || dd != d {
		t.Fatalf("decode %+v %+v %+v %v", dc, de, dd, err)
	}
}

// CQE64 offsets (cq.h struct mlx5_cqe64): check_sum 0x14, hds_ip_ext 0x1C,
// l4_l3_hdr_type 0x1D, byte_cnt 0x2C, syndrome 0x37, wqe_counter 0x3C,
// op_own 0x3F.
func TestCQELayout(t *testing.T) {
	b := make([]byte, 64)
	b[0x14], b[0x15] = 0x12, 0x34
	b[0x1C], b[0x1D] = 0x07, 0x48
	binary.BigEndian.PutUint32(b[0x2C:], 1514)
	b[0x37] = 5
	binary.BigEndian.PutUint16(b[0x3C:], 0xFFFF)
	b[0x3F] = 0x21
	c, err := connectx.DecodeCQE(b)
	if err != nil || c.CheckSum != 0x1234 || c.HdsIPExt != 7 || c.L3Type() != connectx.CQEL3TypeIPv4 || c.ByteCnt != 1514 ||
		c.Syndrome != 5 || c.WQECounter != 0xFFFF || c.Opcode != connectx.CQEOpRespSend || !c.Owner {
		t.Fatalf("%+v %v", c, err)
	}
	b2 := make([]byte, 64)
	c.Encode(b2)
	if !bytes.Equal(b, b2) {
		t.Fatalf("re-encoded\n%x\n%x", b2, b)
	}
	b[0x3F] = 0x2D // compressed format 3
	if _, err := connectx.DecodeCQE(b); err == nil {
		t.Fatal("compressed CQE accepted")
	}
}

func TestEQELayout(t *testing.T) {
	b := make([]byte, 64)
	b[1] = connectx.EventPageRequest
	binary.BigEndian.PutUint16(b[0x22:], 0)
	binary.BigEndian.PutUint32(b[0x24:], uint32(0xFFFFFFF0)) // -16
	b[0x3F] = 1
	e, err := connectx.DecodeEQE(b)
	if err != nil || e.Type != connectx.EventPageRequest || !e.Owner {
		t.Fatalf("%+v %v", e, err)
	}
	if fn, n := e.PageRequest(); fn != 0 || n != -16 {
		t.Fatalf("page request %d %d", fn, n)
	}
	b2 := make([]byte, 64)
	e.Encode(b2)
	if !bytes.Equal(b, b2) {
		t.Fatalf("re-encoded %x", b2)
	}
	b[1] = connectx.EventCQError
	binary.BigEndian.PutUint32(b[0x20:], 0x00ABCDEF)
	b[0x2B] = 1
	e, _ = connectx.DecodeEQE(b)
	if cqn, syn := e.CQN(); cqn != 0xABCDEF || syn != 1 {
		t.Fatalf("cq error %#x %d", cqn, syn)
	}
}

// Mailbox (device.h struct mlx5_cmd_prot_block): 512 data bytes, next at
// 0x230, block number at 0x238, token at 0x23D; 0x240 bytes.
func TestMailboxLayout(t *testing.T) {
	var m connectx.Mailbox
	m.Data[0], m.Data[511] = 1, 2
	m.Next, m.BlockNum, m.Token = 0x8800_1000, 3, 0x5A
	b := make([]byte, connectx.MailboxSize)
	m.Encode(b)
	if b[0] != 1 || b[511] != 2 || binary.BigEndian.Uint64(b[0x230:]) != 0x8800_1000 ||
		binary.BigEndian.Uint32(b[0x238:]) != 3 || b[0x23D] != 0x5A {
		t.Fatalf("mailbox %x", b[0x200:])
	}
	d, err := connectx.DecodeMailbox(b)
	if err != nil || d != m {
		t.Fatal("decode")
	}
	for n, want := range map[int]int{0: 0, 16: 0, 17: 1, 528: 1, 529: 2, 0x10 + 8*512: 8, 0x11 + 8*512: 9} {
		if got := connectx.Mailboxes(n); got != want {
			t.Errorf("Mailboxes(%d) = %d, want %d", n, got, want)
		}
	}
}

func TestShortInputs(t *testing.T) {
	short := make([]byte, 10)
	if _, err := connectx.DecodeCmdEntry(short); err == nil {
		t.Error("cmd entry")
	}
	if _, err := connectx.DecodeMailbox(short); err == nil {
		t.Error("mailbox")
	}
	if _, err := connectx.DecodeCtrlSeg(short); err == nil {
		t.Error("ctrl")
	}
	if _, _, err := connectx.DecodeEthSeg(short); err == nil {
		t.Error("eth")
	}
	if _, err := connectx.DecodeDataSeg(short); err == nil {
		t.Error("data")
	}
	if _, err := connectx.DecodeCQE(short); err == nil {
		t.Error("cqe")
	}
	if _, err := connectx.DecodeEQE(short); err == nil {
		t.Error("eqe")
	}
	bad := make([]byte, 64)
	bad[0] = 6
	if _, err := connectx.DecodeCmdEntry(bad); err == nil {
		t.Error("cmd entry type 6 accepted")
	}
	eth := make([]byte, 32)
	binary.BigEndian.PutUint16(eth[12:], 100)
	if _, _, err := connectx.DecodeEthSeg(eth); err == nil {
		t.Error("inline header beyond the WQE accepted")
	}
	for _, s := range []connectx.CmdStatus{connectx.StatBadParam, 0x77} {
		if s.String() == "" {
			t.Error("status name")
		}
	}
}
