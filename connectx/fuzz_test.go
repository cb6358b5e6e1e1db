package connectx_test

import (
	"bytes"
	"testing"

	"github.com/tamanic/tamanic/connectx"
)

// Decoders never panic, and what decodes re-encodes to the same fields.

func FuzzCmdEntry(f *testing.F) {
	f.Add(append([]byte{7}, make([]byte, 63)...))
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := connectx.DecodeCmdEntry(b)
		if err != nil {
			return
		}
		out := make([]byte, 64)
		e.Encode(out)
		e2, err := connectx.DecodeCmdEntry(out)
		if err != nil || e2 != e {
			t.Fatalf("round trip %+v -> %+v %v", e, e2, err)
		}
	})
}

func FuzzMailbox(f *testing.F) {
	f.Add(make([]byte, connectx.MailboxSize))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := connectx.DecodeMailbox(b)
		if err != nil {
			return
		}
		out := make([]byte, connectx.MailboxSize)
		m.Encode(out)
		m2, _ := connectx.DecodeMailbox(out)
		if m2 != m {
			t.Fatal("round trip")
		}
	})
}

func FuzzWQE(f *testing.F) {
	f.Add(make([]byte, 64))
	f.Add(append(make([]byte, 28), 0, 18))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := connectx.DecodeCtrlSeg(b)
		if err != nil {
			return
		}
		out := make([]byte, 16)
		c.Encode(out)
		if c2, _ := connectx.DecodeCtrlSeg(out); c2 != c {
			t.Fatal("ctrl round trip")
		}
		e, n, err := connectx.DecodeEthSeg(b[16:])
		if err != nil {
			return
		}
		if n != connectx.InlineDS(len(e.Inline))*16 || n > len(b)-16 {
			t.Fatalf("eth segment size %d for %d inline bytes", n, len(e.Inline))
		}
		w := make([]byte, n)
		if e.Encode(w) != n {
			t.Fatal("eth size")
		}
		e2, _, err := connectx.DecodeEthSeg(w)
		if err != nil || e2.MSS != e.MSS || e2.CsFlags != e.CsFlags || !bytes.Equal(e2.Inline, e.Inline) {
			t.Fatal("eth round trip")
		}
		if d, err := connectx.DecodeDataSeg(b[16+n:]); err == nil {
			out := make([]byte, 16)
			d.Encode(out)
			if d2, _ := connectx.DecodeDataSeg(out); d2 != d {
				t.Fatal("data round trip")
			}
		}
	})
}

func FuzzCQE(f *testing.F) {
	f.Add(make([]byte, 64))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := connectx.DecodeCQE(b)
		if err != nil {
			return
		}
		out := make([]byte, 64)
		c.Encode(out)
		if c2, err := connectx.DecodeCQE(out); err != nil || c2 != c {
			t.Fatalf("round trip %+v %+v", c, c2)
		}
	})
}

func FuzzEQE(f *testing.F) {
	f.Add(make([]byte, 64))
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := connectx.DecodeEQE(b)
		if err != nil {
			return
		}
		out := make([]byte, 64)
		e.Encode(out)
		e2, _ := connectx.DecodeEQE(out)
		if e2 != e {
			t.Fatal("round trip")
		}
		e.PageRequest()
		e.CQN()
	})
}
