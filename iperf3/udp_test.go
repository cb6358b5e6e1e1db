package iperf3

import (
	"bytes"
	"net"
	"testing"
	"time"
)

// TestUDPAccounting drives a UDP test with hand-made datagrams and checks
// loss, reordering, short datagrams and strays against hand-counted
// values.
func TestUDPAccounting(t *testing.T) {
	for _, c64 := range []bool{false, true} {
		name := "32bit"
		if c64 {
			name = "64bit"
		}
		t.Run(name, func(t *testing.T) {
			ts := startServer(t, Config{})
			// A datagram while idle is a stray.
			u, err := net.Dial("udp4", ts.addr())
			if err != nil {
				t.Fatal(err)
			}
			defer u.Close()
			u.Write([]byte("stray"))
			waitFor(t, "stray counted", func() bool { return ts.Stats().StrayDatagrams == 1 })

			c := dialFake(t, ts)
			params := map[string]any{"udp": true, "time": 1, "parallel": 1, "len": 100, "bandwidth": 1e6}
			if c64 {
				params["udp_counters_64bit"] = 1
			}
			c.start(params)
			u.Write([]byte{'9', '8', '7', '6'})
			reply := make([]byte, 16)
			u.SetReadDeadline(time.Now().Add(15 * time.Second))
			n, err := u.Read(reply)
			if err != nil || !bytes.Equal(reply[:n], []byte("6789")) {
				t.Fatalf("UDP connect reply %q, %v", reply[:n], err)
			}
			c.expect(stateTestStart)
			c.expect(stateTestRunning)
			// 1, 2, 4 (3 lost), 3 (late: loss taken back), 6 (5 lost),
			// then one datagram too short for a header.
			now := time.Now()
			for _, seq := range []uint64{1, 2, 4, 3, 6} {
				d := make([]byte, 100)
				if c64 {
					seq |= 0 // 64-bit numbers fit the same values
				}
				encodeUDPHeader(d, udpHeader{sec: uint32(now.Unix()), usec: 0, seq: seq}, c64)
				if _, err := u.Write(d); err != nil {
					t.Fatal(err)
				}
			}
			u.Write([]byte{1, 2, 3})
			waitFor(t, "six datagrams counted", func() bool {
				ts.mu.Lock()
				defer ts.mu.Unlock()
				return ts.active.progress() == 503
			})
			r := c.finish(503)
			ts.idle(t)
			st := ts.Stats()
			if len(r.Streams) != 1 {
				t.Fatalf("results %+v", r)
			}
			got := r.Streams[0]
			if got.Packets != 6 || got.Errors != 1 || got.Bytes != 503 {
				t.Errorf("results %+v, want packets 6, errors 1, bytes 503", got)
			}
			if st.Last.OutOfOrder != 1 || st.ShortDatagrams != 1 || st.Last.Lost != 1 {
				t.Errorf("stats %+v, last %+v", st, *st.Last)
			}
		})
	}
}

// slowReply holds each UDP connect reply back for a while, as a loaded
// host may between the server registering a stream and the reply leaving.
type slowReply struct{ net.PacketConn }

func (s slowReply) WriteTo(b []byte, a net.Addr) (int, error) {
	if bytes.Equal(b, udpConnectReply) {
		time.Sleep(300 * time.Millisecond)
	}
	return s.PacketConn.WriteTo(b, a)
}

// The first datagram a UDP stream gets is the connect reply, even when the
// server is slow to send it and the stream is the one it sends test data on:
// the stock client takes that first datagram as the reply (iperf3 3.12
// iperf_udp_connect fails with "unable to read from stream socket"
// otherwise, outside -R; a CI run met it with --bidir).
func TestUDPConnectReplyComesFirst(t *testing.T) {
	ts := startServerUDP(t, Config{}, func(c net.PacketConn) net.PacketConn { return slowReply{c} })
	c := dialFake(t, ts)
	c.start(map[string]any{"udp": true, "reverse": true, "time": 1, "parallel": 1, "len": 100, "bandwidth": 1e6})
	u, err := net.Dial("udp4", ts.addr())
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	u.Write([]byte{'9', '8', '7', '6'})
	b := make([]byte, 2048)
	u.SetReadDeadline(time.Now().Add(15 * time.Second))
	n, err := u.Read(b)
	if err != nil || !bytes.Equal(b[:n], udpConnectReply) {
		t.Fatalf("first datagram on the stream: %d bytes %x (%v), want the connect reply %x", n, b[:min(n, 16)], err, udpConnectReply)
	}
	c.expect(stateTestStart)
	c.expect(stateTestRunning)
	if n, err := u.Read(b); err != nil || n != 100 {
		t.Fatalf("test data after the reply: %d bytes, %v", n, err)
	}
	c.finish(0)
	ts.idle(t)
}

func TestUDPRecvStatsJitter(t *testing.T) {
	// Transit times 10, 12, 9, 9 ms: differences 2, 3, 0 ms; the
	// estimate moves 1/16 of the way each time (RFC 3550 A.8).
	base := time.Unix(1000, 0)
	var s udpRecvStats
	for i, transit := range []time.Duration{10, 12, 9, 9} {
		sent := base.Add(time.Duration(i) * time.Second)
		s.add(udpHeader{sec: uint32(sent.Unix()), seq: uint64(i + 1)}, sent.Add(transit*time.Millisecond))
	}
	want := 0.0
	for _, d := range []float64{0, 0.002, 0.003, 0} {
		want += (d - want) / 16
	}
	if diff := s.jitter - want; diff > 1e-12 || diff < -1e-12 {
		t.Fatalf("jitter %v, want %v", s.jitter, want)
	}
	if s.highest != 4 || s.lost != 0 || s.outOfOrder != 0 {
		t.Fatalf("%+v", s)
	}
}
