package qemu

import (
	"bytes"
	"encoding/binary"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/tamanic/tamanic/firmware/app"
)

var (
	pcapDescribe = flag.String("pcap.describe", "", "TestDescribePcap: the pcap file (a -soak.pcap recording) to describe")
	pcapPort     = flag.Int("pcap.port", 0, "TestDescribePcap: the peer port whose connections to list segment by segment (0: only the 4-tuples used more than once)")
	pcapFrames   = flag.String("pcap.frames", "", "TestDescribePcap: list every TCP frame numbered FROM-TO, whatever its connection")
)

// TestDescribePcap is a tool: it lists the 4-tuples of a recording that
// carried more than one connection and, with -pcap.port, every segment
// of that port's connections (see DescribePort).
func TestDescribePcap(t *testing.T) {
	if *pcapDescribe == "" {
		t.Skip("a tool: -pcap.describe FILE [-pcap.port N]")
	}
	fh, err := os.Open(*pcapDescribe)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	syns := map[string][]string{}
	_, err = ReadPcapTCP(fh, func(f *TCPFrame) bool {
		if f.Flags&tcpSYN != 0 && f.Flags&tcpACK == 0 {
			k := f.Src.String() + ">" + f.Dst.String()
			syns[k] = append(syns[k], fmt.Sprintf("%.3f s seq %d", f.At.Seconds(), f.Seq))
		}
		return false
	})
	if err != nil {
		t.Fatal(err)
	}
	if *pcapFrames != "" {
		var from, to int
		if _, err := fmt.Sscanf(*pcapFrames, "%d-%d", &from, &to); err != nil {
			t.Fatalf("-pcap.frames %q: want FROM-TO", *pcapFrames)
		}
		fh2, err := os.Open(*pcapDescribe)
		if err != nil {
			t.Fatal(err)
		}
		defer fh2.Close()
		fs, err := ReadPcapTCP(fh2, func(f *TCPFrame) bool { return f.N >= from && f.N <= to })
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fs {
			t.Logf("%10.6f %7d %s>%s %-5s seq %d ack %d len %d win %d", f.At.Seconds(), f.N, f.Src, f.Dst, f.flags(), f.Seq, f.Ack, f.Len, f.Win)
		}
	}
	var keys []string
	for k, v := range syns {
		if len(v) > 1 {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	t.Logf("%d 4-tuples, %d with more than one SYN", len(syns), len(keys))
	for _, k := range keys {
		t.Logf("%s: %s", k, strings.Join(syns[k], ", "))
	}
	var b strings.Builder
	conns, err := ScanPcap(*pcapDescribe, uint16(*pcapPort), &b)
	if err != nil {
		t.Fatal(err)
	}
	bad, again := 0, 0
	for _, c := range conns {
		if c.GuestSYNAgain > 0 {
			again++
		}
		if c.Misplaced+c.OverAck > 0 {
			bad++
			t.Logf("%s #%d: %d misplaced data segments, %d acknowledgements beyond the data, %d retransmitted SYN-ACKs; first: %s\n\t%s",
				c.Tuple, c.N, c.Misplaced, c.OverAck, c.GuestSYNAgain, c.First, c.Verdict())
		}
	}
	t.Logf("%d sink and source connections, %d with anomalies, %d in which the firmware retransmitted its SYN-ACK", len(conns), bad, again)
	if *pcapPort != 0 {
		out := *pcapDescribe + fmt.Sprintf(".port%d.txt", *pcapPort)
		if err := os.WriteFile(out, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("every segment of port %d in %s", *pcapPort, out)
	}
}

// pcapWriter writes a classic pcap of Ethernet frames holding IPv4 TCP
// segments, as QEMU's filter-dump does, cut to snap bytes.
type pcapWriter struct {
	b    bytes.Buffer
	snap int
	t    time.Duration
}

func newPcapWriter(snap int) *pcapWriter {
	w := &pcapWriter{snap: snap}
	var h [24]byte
	binary.LittleEndian.PutUint32(h[0:], 0xa1b2c3d4)
	binary.LittleEndian.PutUint16(h[4:], 2)
	binary.LittleEndian.PutUint16(h[6:], 4)
	binary.LittleEndian.PutUint32(h[16:], uint32(snap))
	binary.LittleEndian.PutUint32(h[20:], 1)
	w.b.Write(h[:])
	return w
}

func (w *pcapWriter) segment(src, dst netip.AddrPort, seq, ack uint32, flags uint8, payload []byte) {
	f := make([]byte, 14+20+20+len(payload))
	binary.BigEndian.PutUint16(f[12:], 0x0800)
	ip := f[14:]
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:], uint16(40+len(payload)))
	ip[8], ip[9] = 64, 6
	s4, d4 := src.Addr().As4(), dst.Addr().As4()
	copy(ip[12:], s4[:])
	copy(ip[16:], d4[:])
	tcp := ip[20:]
	binary.BigEndian.PutUint16(tcp[0:], src.Port())
	binary.BigEndian.PutUint16(tcp[2:], dst.Port())
	binary.BigEndian.PutUint32(tcp[4:], seq)
	binary.BigEndian.PutUint32(tcp[8:], ack)
	tcp[12] = 5 << 4
	tcp[13] = flags
	binary.BigEndian.PutUint16(tcp[14:], 65535)
	copy(tcp[20:], payload)
	w.t += time.Millisecond
	incl := min(len(f), w.snap)
	var rh [16]byte
	binary.LittleEndian.PutUint32(rh[0:], uint32(w.t/time.Second))
	binary.LittleEndian.PutUint32(rh[4:], uint32(w.t%time.Second/time.Microsecond))
	binary.LittleEndian.PutUint32(rh[8:], uint32(incl))
	binary.LittleEndian.PutUint32(rh[12:], uint32(len(f)))
	w.b.Write(rh[:])
	w.b.Write(f[:incl])
}

// TestDescribePortFindsMisplacedData: two connections on one 4-tuple; in
// the second the peer's third segment carries the pattern 128000 bytes
// further on than its sequence number says, and the guest acknowledges
// beyond what the peer sent. Both are reported, the first connection's
// segments are not.
func TestDescribePortFindsMisplacedData(t *testing.T) {
	peer := netip.MustParseAddrPort("10.0.0.2:40000")
	guest := netip.MustParseAddrPort("10.0.0.1:5001")
	w := newPcapWriter(128)
	pat := func(off, n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = app.Pattern[(off+i)%len(app.Pattern)]
		}
		return b
	}
	for c, isn := range []uint32{1000, 1000 + 128000} {
		giss := uint32(7777 * (c + 1))
		w.segment(peer, guest, isn, 0, tcpSYN, nil)
		w.segment(guest, peer, giss, isn+1, tcpSYN|tcpACK, nil)
		w.segment(peer, guest, isn+1, giss+1, tcpACK, nil)
		if c == 1 {
			w.segment(guest, peer, giss, isn+1, tcpSYN|tcpACK, nil) // retransmitted
		}
		for k := range 3 {
			off := k * 1460
			if c == 1 && k == 2 {
				off += 128000
			}
			w.segment(peer, guest, isn+1+uint32(k*1460), giss+1, tcpACK, pat(off, 1460))
		}
		ack := isn + 1 + 3*1460
		if c == 1 {
			ack += 1460 // beyond what the peer sent
		}
		w.segment(guest, peer, giss+1, ack, tcpACK, nil)
	}
	file := filepath.Join(t.TempDir(), "two.pcap")
	if err := os.WriteFile(file, w.b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	conns, err := ScanPcap(file, peer.Port(), &b)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s", b.String())
	if len(conns) != 2 || conns[0].Misplaced+conns[0].OverAck+conns[0].GuestSYNAgain != 0 || conns[1].Misplaced != 1 || conns[1].OverAck != 1 || conns[1].N != 2 || conns[1].GuestSYNAgain != 1 {
		for _, c := range conns {
			t.Logf("%+v", *c)
		}
		t.Errorf("want two connections, the second with 1 misplaced segment, 1 acknowledgement beyond the data and 1 retransmitted SYN-ACK")
	}
	if v := conns[1].Verdict(); !strings.Contains(v, "QEMU's user network") || !strings.Contains(v, "firmware acknowledged") || !strings.Contains(v, "tcp_mss") {
		t.Errorf("verdict %q: want slirp's bytes, the firmware's acknowledgement and the SYN-ACK named", v)
	}
	if v := conns[0].Verdict(); v != "" {
		t.Errorf("verdict on a clean connection: %q", v)
	}
	lines := strings.Split(b.String(), "\n")
	var mis []string
	for _, l := range lines {
		if strings.Contains(l, "MISPLACED") {
			mis = append(mis, l)
		}
	}
	if len(mis) != 1 || !strings.Contains(mis[0], "#2 ") || !strings.Contains(mis[0], fmt.Sprintf("pattern offset %d, sequence says %d", (2*1460+128000)%len(app.Pattern), 2*1460)) {
		t.Errorf("misplaced lines %q: want the second connection's third segment, at pattern offset %d", mis, (2*1460+128000)%len(app.Pattern))
	}
}
