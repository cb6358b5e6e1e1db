//go:build linux

// Command tamanic-cxsim runs the ConnectX-4 Lx model of package
// connectx/connectxtest as a process, for a firmware running under QEMU to
// drive: the model's BAR0 is a file QEMU maps as the BAR2 of an
// ivshmem-plain function, and the guest's RAM is a file QEMU maps as its
// memory backend, so the model's DMA is a read or write of that file.
//
//	tamanic-cxsim -ram /tmp/ram -ram-base 0x80000000 -bar /tmp/bar -listen 127.0.0.1:7700
//
//	qemu-system-arm -M mcimx7d-sabre,memory-backend=ram -m 1G \
//	  -object memory-backend-file,id=ram,size=1G,mem-path=/tmp/ram,share=on \
//	  -object memory-backend-file,id=cxbar,size=32M,mem-path=/tmp/bar,share=on \
//	  -device ivshmem-plain,memdev=cxbar,bus=dw-pcie ...
//
// Both files are created and sized when absent, so either side may start
// first. -boot-pages and -init-pages set the firmware pages the model asks
// for (defaults 4 and 16; a ConnectX-4 asked 6 and 12,868, about 50 MiB,
// which the i.MX7D firmware's 32 MiB DMA region cannot hold: its driver
// then fails bring-up with "init pages ... DMA memory" and the firmware
// carries on without the interface). The model learns the driver's writes by polling (the command
// doorbell vector, cleared as commands are taken; the doorbell records in
// RAM; the UAR doorbell words), and sleeps with back-off while nothing
// changes. A DMA address outside the RAM file is a violation, as it would
// be a bus error on a card.
//
// The wire is a TCP listener on loopback speaking QEMU's -netdev socket
// stream framing (a 4-byte big-endian length, then the Ethernet frame
// without FCS): one peer at a time (a new connection replaces the old);
// frames the card sends while no peer is connected are dropped and
// counted. A peer's frames go through a queue of 256 that a writer of its
// own drains, so a peer that stops reading never holds the card: once
// the queue is full, the card's frames are dropped and counted
// (wire_tx_queue_full), as a stalled link's transmit FIFO would drop them
// (TestStalledPeer). Whatever a length prefix within the framing limit announces is
// a frame, as a cable carries it, and the card's MAC judges it: one
// shorter than an Ethernet header is a runt, one longer than the port's
// largest frame (the hardware MTU the driver set, less the FCS) is
// oversize; both are counted and dropped, as a ConnectX MAC counts and
// drops them (Linux mlx5 counters.rst rx_undersize_pkts_phy,
// rx_oversize_pkts_phy), and the connection carries on. Garbage of a valid
// length goes to the card like any frame. Only a length beyond the
// framing limit, QEMU's NET_BUFSIZE (4096 + 65536: net_fill_rstate
// refuses a longer packet), loses the framing: counted as malformed, and
// the connection closed.
//
// A send doorbell whose first word is seen beside a stale second word is
// taken when its second word lands, however late (the guest may be
// descheduled between its two stores); one never completed is a
// violation when the next doorbell shows it, or at exit.
//
// Output: "CXSIM READY <addr>" once listening, "CXSIM VIOLATION <what>"
// for each rule the driver breaks, "CXSIM PEER ..." as peers come and go,
// and "CXSIM STATS <json>" on SIGTERM or SIGINT, after which it exits 0.
package main

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/tamanic/tamanic/connectx/connectxtest"
)

// Frame lengths on the wire: a frame shorter than an Ethernet header is a
// runt; a length prefix beyond framingMax (QEMU's NET_BUFSIZE, the most
// its socket netdev reads as one packet) breaks the framing.
const (
	minFrame   = 14
	framingMax = 4096 + 65536
)

// Counters are the process's own counters, beside the model's.
type Counters struct {
	Violations    int `json:"violations"`
	Polls         int `json:"polls"`
	Peers         int `json:"peers"`
	WireRx        int `json:"wire_rx_frames"`
	WireRxDropped int `json:"wire_rx_no_buffer"`
	WireMalformed int `json:"wire_malformed"`
	WireRunts     int `json:"wire_runts"`
	WireOversize  int `json:"wire_oversize"`
	WireTx        int `json:"wire_tx_frames"`
	WireTxNoPeer  int `json:"wire_tx_no_peer"`
	WireTxErrors  int `json:"wire_tx_errors"`
	// WireTxQueueFull counts frames the card sent while the peer's send
	// queue was full (a peer that stopped reading): dropped.
	WireTxQueueFull int `json:"wire_tx_queue_full"`
	DMAOutOfBounds  int `json:"dma_out_of_bounds"`
}

type sim struct {
	mu    sync.Mutex
	c     Counters
	peer  net.Conn
	txq   chan []byte // frames for peer's writer; nil without a peer
	model *connectxtest.Model
	out   io.Writer
}

func (s *sim) printf(format string, a ...any) {
	s.mu.Lock()
	fmt.Fprintf(s.out, format, a...)
	s.mu.Unlock()
}

func (s *sim) violation(what string) {
	s.mu.Lock()
	s.c.Violations++
	fmt.Fprintf(s.out, "CXSIM VIOLATION %s\n", what)
	s.mu.Unlock()
}

// txQueue is how many frames the card may have waiting for the wire: a
// peer that stops reading fills it, and from then on the card's frames are
// dropped and counted (WireTxQueueFull), as a MAC's transmit FIFO drops
// when its link is stalled, instead of the card waiting for the peer. The
// card's frames are at most its hardware MTU (about 10 KB), so the queue
// holds at most a few MB.
const txQueue = 256

// send puts a frame the card transmitted on the wire: it queues the frame
// for the peer's writer and never waits for the peer, so a stalled peer
// cannot hold the card (its commands and doorbells) or s.mu.
func (s *sim) send(f []byte) {
	b := make([]byte, 4+len(f))
	binary.BigEndian.PutUint32(b, uint32(len(f)))
	copy(b[4:], f)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.peer == nil {
		s.c.WireTxNoPeer++
		return
	}
	select {
	case s.txq <- b:
	default:
		s.c.WireTxQueueFull++
	}
}

// writer writes the frames queued for peer c until the queue is closed
// (the peer gone or replaced). After a write error the connection is
// closed and what is left is counted as errors.
func (s *sim) writer(c net.Conn, q <-chan []byte) {
	broken := false
	for b := range q {
		if !broken {
			if _, err := c.Write(b); err != nil {
				broken = true
				c.Close()
			}
		}
		s.mu.Lock()
		if broken {
			s.c.WireTxErrors++
		} else {
			s.c.WireTx++
		}
		s.mu.Unlock()
	}
}

// serve reads frames from peer c until it closes or breaks the framing.
func (s *sim) serve(c net.Conn) {
	defer func() {
		c.Close()
		s.mu.Lock()
		if s.peer == c {
			s.peer = nil
			close(s.txq)
			s.txq = nil
		}
		fmt.Fprintf(s.out, "CXSIM PEER gone %s\n", c.RemoteAddr())
		s.mu.Unlock()
	}()
	var hdr [4]byte
	buf := make([]byte, framingMax)
	for {
		if _, err := io.ReadFull(c, hdr[:]); err != nil {
			return
		}
		n := binary.BigEndian.Uint32(hdr[:])
		if n > framingMax {
			s.mu.Lock()
			s.c.WireMalformed++
			fmt.Fprintf(s.out, "CXSIM PEER malformed frame length %d from %s: closing\n", n, c.RemoteAddr())
			s.mu.Unlock()
			return
		}
		if _, err := io.ReadFull(c, buf[:n]); err != nil {
			return
		}
		if n < minFrame {
			s.mu.Lock()
			s.c.WireRunts++
			s.mu.Unlock()
			continue
		}
		if mf := s.model.MaxFrame(); mf > 0 && int(n) > mf {
			s.mu.Lock()
			s.c.WireOversize++
			s.mu.Unlock()
			continue
		}
		ok := s.model.Deliver(buf[:n])
		s.mu.Lock()
		s.c.WireRx++
		if !ok {
			s.c.WireRxDropped++
		}
		s.mu.Unlock()
	}
}

func (s *sim) accept(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.peer != nil {
			s.peer.Close() // its serve goroutine ends
			close(s.txq)   // and its writer
		}
		s.peer = c
		s.txq = make(chan []byte, txQueue)
		go s.writer(c, s.txq)
		s.c.Peers++
		fmt.Fprintf(s.out, "CXSIM PEER connected %s\n", c.RemoteAddr())
		s.mu.Unlock()
		go s.serve(c)
	}
}

// mapFile opens (creating) path, sizes it to at least size bytes (size 0:
// as it is) and maps it shared.
func mapFile(path string, size int64) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() < size {
		if err := f.Truncate(size); err != nil {
			return nil, fmt.Errorf("sizing %s: %w", path, err)
		}
	} else {
		size = st.Size()
	}
	if size == 0 {
		return nil, fmt.Errorf("%s is empty", path)
	}
	b, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mapping %s: %w", path, err)
	}
	return b, nil
}

func loopback(addr string) error {
	h, _, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if ip := net.ParseIP(h); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("-listen %s: only loopback addresses", addr)
	}
	return nil
}

func parseSize(s string) (int64, error) {
	mul := int64(1)
	if n := len(s); n > 0 {
		switch s[n-1] {
		case 'K', 'k':
			mul, s = 1<<10, s[:n-1]
		case 'M', 'm':
			mul, s = 1<<20, s[:n-1]
		case 'G', 'g':
			mul, s = 1<<30, s[:n-1]
		}
	}
	v, err := strconv.ParseInt(s, 0, 64)
	return v * mul, err
}

// settings are the command line's.
type settings struct {
	ramPath, barPath, listen string
	ramSize, barSize         int64
	ramBase                  uint64
	maxSleep                 time.Duration
	// model holds the model's options the flags set (page counts).
	model connectxtest.Options
}

// parseArgs reads the command line (without the program name).
func parseArgs(args []string) (settings, error) {
	fs := flag.NewFlagSet("tamanic-cxsim", flag.ContinueOnError)
	ramPath := fs.String("ram", "", "guest RAM file (QEMU memory-backend-file mem-path, share=on)")
	ramSize := fs.String("ram-size", "1G", "size the RAM file is created with when absent or smaller")
	ramBase := fs.String("ram-base", "0x80000000", "bus address of the RAM file's first byte")
	barPath := fs.String("bar", "", "BAR file (the ivshmem's memory-backend-file mem-path, share=on)")
	barSize := fs.String("bar-size", "32M", "size the BAR file is created with when absent or smaller")
	listen := fs.String("listen", "127.0.0.1:0", "wire: loopback address for a -netdev socket stream peer")
	maxSleep := fs.Duration("max-sleep", time.Millisecond, "longest back-off sleep while the driver writes nothing")
	bootPages := fs.Int("boot-pages", 0, "firmware pages the model asks for at boot (0: the model's 4; a ConnectX-4 asked 6)")
	initPages := fs.Int("init-pages", 0, "firmware pages the model asks for at init (0: the model's 16; a ConnectX-4 asked 12868, about 50 MiB, more than the i.MX7D firmware's 32 MiB DMA region holds)")
	if err := fs.Parse(args); err != nil {
		return settings{}, err
	}
	s := settings{ramPath: *ramPath, barPath: *barPath, listen: *listen, maxSleep: *maxSleep}
	if s.ramPath == "" || s.barPath == "" {
		return s, errors.New("-ram and -bar are required")
	}
	var err error
	if s.ramBase, err = strconv.ParseUint(*ramBase, 0, 64); err != nil {
		return s, fmt.Errorf("-ram-base: %w", err)
	}
	if s.ramSize, err = parseSize(*ramSize); err != nil {
		return s, fmt.Errorf("-ram-size: %w", err)
	}
	if s.barSize, err = parseSize(*barSize); err != nil {
		return s, fmt.Errorf("-bar-size: %w", err)
	}
	if err := loopback(s.listen); err != nil {
		return s, err
	}
	// The page counts are 32-bit signed in QUERY_PAGES; the model keeps
	// each page's address in a map, so bound them at 1 Mi pages (4 GiB).
	for _, p := range []struct {
		name string
		v    int
	}{{"-boot-pages", *bootPages}, {"-init-pages", *initPages}} {
		if p.v < 0 || p.v > 1<<20 {
			return s, fmt.Errorf("%s %d: want 0..%d", p.name, p.v, 1<<20)
		}
	}
	s.model.BootPages, s.model.InitPages = *bootPages, *initPages
	return s, nil
}

func run() error {
	st, err := parseArgs(os.Args[1:])
	if err != nil {
		return err
	}
	ram, err := mapFile(st.ramPath, st.ramSize)
	if err != nil {
		return err
	}
	bar, err := mapFile(st.barPath, st.barSize)
	if err != nil {
		return err
	}
	s := &sim{out: os.Stdout}
	mem := &connectxtest.FileMemory{Mem: ram, Base: st.ramBase, OnFault: func(what string) {
		s.mu.Lock()
		s.c.DMAOutOfBounds++
		s.mu.Unlock()
		s.violation(what)
	}}
	mo := st.model
	mo.Device = mem
	s.model = connectxtest.New(mo)
	s.model.SetPeer(s.send)
	sh, err := connectxtest.NewShared(s.model, bar)
	if err != nil {
		return err
	}
	sh.OnViolation = s.violation
	l, err := net.Listen("tcp", st.listen)
	if err != nil {
		return err
	}
	defer l.Close()
	go s.accept(l)
	s.printf("CXSIM READY %s\n", l.Addr())

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	idle := time.Duration(0)
	for {
		select {
		case <-sig:
			// The driver is stopped or gone: a send doorbell still
			// waiting for its second word never got it.
			sh.Finish()
			st := struct {
				Model connectxtest.Stats `json:"model"`
				Sim   Counters           `json:"sim"`
			}{Model: s.model.Stats()}
			s.mu.Lock()
			st.Sim = s.c
			s.mu.Unlock()
			b, _ := json.Marshal(st)
			s.printf("CXSIM STATS %s\n", b)
			return nil
		default:
		}
		busy := sh.Poll()
		s.mu.Lock()
		s.c.Polls++
		s.mu.Unlock()
		if busy {
			idle = 0
			continue
		}
		idle = min(max(2*idle, 10*time.Microsecond), st.maxSleep)
		time.Sleep(idle)
	}
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "tamanic-cxsim: %v\n", err)
		os.Exit(1)
	}
}
