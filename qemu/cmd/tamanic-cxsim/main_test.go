//go:build linux

package main

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tamanic/tamanic/connectx/connectxtest"
)

func newSim(t *testing.T) (*sim, *bytes.Buffer, net.Listener) {
	t.Helper()
	var out bytes.Buffer
	s := &sim{out: &out}
	s.model = connectxtest.New(connectxtest.Options{Device: &connectxtest.FileMemory{Mem: make([]byte, 1<<20), Base: 0x80000000}})
	s.model.SetPeer(s.send)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go s.accept(l)
	return s, &out, l
}

func (s *sim) counters() Counters {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.c
}

func waitFor(t *testing.T, what string, f func() bool) {
	t.Helper()
	for i := 0; i < 500; i++ {
		if f() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}

// TestWire: frames with no peer are dropped and counted; a peer gets each
// frame with the 4-byte big-endian length; its frames reach the model
// (which, not brought up, has no buffer: counted); a new connection
// replaces the old; a runt is counted and dropped; a length beyond the
// framing limit closes the connection.
func TestWire(t *testing.T) {
	s, out, l := newSim(t)
	frame := bytes.Repeat([]byte{0xAB}, 60)
	s.send(frame)
	if c := s.counters(); c.WireTxNoPeer != 1 || c.WireTx != 0 {
		t.Fatalf("no peer: %+v", c)
	}
	a, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	waitFor(t, "peer", func() bool { return s.counters().Peers == 1 })
	s.send(frame)
	var hdr [4]byte
	a.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(a, hdr[:]); err != nil || binary.BigEndian.Uint32(hdr[:]) != 60 {
		t.Fatalf("framing %x %v", hdr, err)
	}
	got := make([]byte, 60)
	if _, err := io.ReadFull(a, got); err != nil || !bytes.Equal(got, frame) {
		t.Fatalf("frame %x %v", got, err)
	}
	msg := append(binary.BigEndian.AppendUint32(nil, 60), frame...)
	a.Write(msg)
	waitFor(t, "frame from the peer", func() bool { return s.counters().WireRx == 1 })
	if c := s.counters(); c.WireRxDropped != 1 {
		t.Fatalf("frame for a model not brought up: %+v", c)
	}
	// A second peer replaces the first.
	b, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	waitFor(t, "second peer", func() bool { return s.counters().Peers == 2 })
	if _, err := io.ReadFull(a, hdr[:]); err == nil {
		t.Fatal("the replaced peer's connection is still open")
	}
	// A runt (length 5) is counted and dropped; the connection stays.
	b.Write([]byte{0, 0, 0, 5, 1, 2, 3, 4, 5})
	waitFor(t, "runt", func() bool { return s.counters().WireRunts == 1 })
	b.Write(msg)
	waitFor(t, "frame after the runt", func() bool { return s.counters().WireRx == 2 })
	// Malformed: a length beyond the framing limit.
	b.Write(binary.BigEndian.AppendUint32(nil, framingMax+1))
	waitFor(t, "malformed", func() bool { return s.counters().WireMalformed == 1 })
	b.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(b, hdr[:]); err == nil {
		t.Fatal("connection with broken framing still open")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !strings.Contains(out.String(), "CXSIM PEER malformed frame length 69633") {
		t.Fatalf("output:\n%s", out)
	}
}

func TestFilesAndFlags(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "bar")
	b, err := mapFile(p, 64<<10)
	if err != nil || len(b) != 64<<10 {
		t.Fatalf("created %d bytes: %v", len(b), err)
	}
	b[100] = 7
	// An existing larger file keeps its size and contents.
	c, err := mapFile(p, 4096)
	if err != nil || len(c) != 64<<10 || c[100] != 7 {
		t.Fatalf("reopened: %d bytes, %v", len(c), err)
	}
	if st, _ := os.Stat(p); st.Size() != 64<<10 {
		t.Fatalf("file size %d", st.Size())
	}
	for _, a := range []string{"0.0.0.0:1", "10.0.0.1:5", "[::]:1", "example.com:1"} {
		if loopback(a) == nil {
			t.Errorf("-listen %s accepted", a)
		}
	}
	if loopback("127.0.0.1:0") != nil || loopback("[::1]:7") != nil {
		t.Error("loopback refused")
	}
	for in, want := range map[string]int64{"1G": 1 << 30, "32M": 32 << 20, "0x1000": 4096, "4k": 4096} {
		if v, err := parseSize(in); err != nil || v != want {
			t.Errorf("parseSize(%q) = %d, %v", in, v, err)
		}
	}
}

// TestPageFlags: -boot-pages and -init-pages set the pages the model asks
// for (a driver brought up on a model built from them holds that many);
// out-of-range counts and missing files are refused.
func TestPageFlags(t *testing.T) {
	st, err := parseArgs([]string{"-ram", "r", "-bar", "b", "-boot-pages", "6", "-init-pages", "300"})
	if err != nil {
		t.Fatal(err)
	}
	if st.model.BootPages != 6 || st.model.InitPages != 300 || st.ramBase != 0x80000000 || st.barSize != 32<<20 {
		t.Fatalf("settings %+v", st)
	}
	mo := st.model
	r := connectxtest.NewRig(t, connectxtest.RigOptions{Model: func(o *connectxtest.Options) {
		o.BootPages, o.InitPages = mo.BootPages, mo.InitPages
	}})
	if p := r.Model.State().Pages; p != 306 {
		t.Fatalf("driver holds %d pages, want 306", p)
	}
	for _, args := range [][]string{
		{"-ram", "r", "-bar", "b", "-init-pages", "-1"},
		{"-ram", "r", "-bar", "b", "-init-pages", "2000000"},
		{"-ram", "r", "-bar", "b", "-listen", "10.0.0.1:1"},
		{"-bar", "b"},
	} {
		if _, err := parseArgs(args); err == nil {
			t.Errorf("%q accepted", args)
		}
	}
}
