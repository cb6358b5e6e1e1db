package iperf3

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

// Parameter objects exactly as the 3.12 client sends them (its --debug
// output for -t 1; -u -b 10M -t 1 -P 2 -R --udp-counters-64bit;
// -n 1M -O 1 -P 4 --bidir --get-server-output), plus edge cases.
var paramSeeds = []string{
	`{"tcp":true,"omit":0,"time":1,"num":0,"blockcount":0,"parallel":1,"len":131072,"pacing_timer":1000,"client_version":"3.12"}`,
	`{"udp":true,"omit":0,"time":1,"num":0,"blockcount":0,"parallel":2,"reverse":true,"len":32768,"bandwidth":10000000,"pacing_timer":1000,"udp_counters_64bit":1,"client_version":"3.12"}`,
	`{"tcp":true,"omit":1,"time":0,"num":1048576,"blockcount":0,"parallel":4,"bidirectional":true,"len":131072,"pacing_timer":1000,"get_server_output":1,"client_version":"3.12"}`,
	`{"udp":true,"tcp":true}`, `{"parallel":1e308}`, `{"len":-1}`, `[]`, `null`, `{"time":NaN}`, `{"client_version":5}`,
}

func FuzzParseParams(f *testing.F) {
	for _, s := range paramSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		const maxStreams = 128
		p, err := ParseParams(b, maxStreams)
		if err != nil {
			if _, ok := err.(*paramError); !ok {
				t.Fatalf("error %T %v is not a paramError", err, err)
			}
			return
		}
		held := p.Streams
		if p.Bidir {
			held *= 2
		}
		if p.Streams < 1 || held > maxStreams || p.Duration < 0 || p.Duration > maxDurationSeconds ||
			p.Omit < 0 || p.Omit > maxDurationSeconds {
			t.Fatalf("accepted out-of-range parameters %+v", p)
		}
		if p.UDP && (p.BlockSize < udpHeaderLen(p.Counters64) || p.BlockSize > maxUDPBlock) {
			t.Fatalf("accepted UDP block size %d", p.BlockSize)
		}
		if !p.UDP && (p.BlockSize < 1 || p.BlockSize > maxTCPBlock) {
			t.Fatalf("accepted TCP block size %d", p.BlockSize)
		}
		// What was accepted, said again the way a client says it, parses
		// to the same parameters.
		m := map[string]any{"parallel": p.Streams, "time": p.Duration, "omit": p.Omit, "num": p.Bytes,
			"blockcount": p.Blocks, "len": p.BlockSize, "bandwidth": p.Rate, "client_version": p.ClientVersion}
		flag := func(k string, on bool) {
			if on {
				m[k] = true
			}
		}
		flag("udp", p.UDP)
		flag("tcp", !p.UDP)
		flag("reverse", p.Reverse)
		flag("bidirectional", p.Bidir)
		flag("udp_counters_64bit", p.Counters64)
		flag("get_server_output", p.ServerOutput)
		again, _ := json.Marshal(m)
		q, err := ParseParams(again, maxStreams)
		if err != nil {
			t.Fatalf("re-encoded %s refused: %v", again, err)
		}
		q.raw, p.raw = nil, nil
		if !reflect.DeepEqual(q, p) {
			t.Fatalf("round trip changed %+v into %+v", p, q)
		}
	})
}

// FuzzControlJSON feeds arbitrary bytes to the length-prefixed reader and
// the results parser: they must refuse or decode, never panic, and never
// read past the announced length.
func FuzzControlJSON(f *testing.F) {
	f.Add([]byte{0, 0, 0, 2, '{', '}'})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Add(append([]byte{0, 0, 0, 60}, `{"cpu_util_total":1,"cpu_util_user":1,"cpu_util_system":0,"sender_has_retransmits":-1,"streams":[]}`...))
	f.Fuzz(func(t *testing.T, b []byte) {
		r := bytes.NewReader(b)
		body, err := readJSON(r, maxResultsJSON)
		if err != nil {
			return
		}
		n := binary.BigEndian.Uint32(b)
		if uint32(len(body)) != n || r.Len() != len(b)-4-int(n) {
			t.Fatalf("read %d bytes for a length of %d", len(body), n)
		}
		res, err := parseResults(body)
		if err != nil {
			return
		}
		for _, s := range res.Streams {
			_ = s.Bytes
		}
	})
}

// FuzzUDPHeader checks that every datagram either decodes to a header that
// re-encodes to the same bytes or is reported short, and that accounting
// it never panics.
func FuzzUDPHeader(f *testing.F) {
	f.Add([]byte{0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3}, false)
	f.Add([]byte{0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 3}, true)
	f.Fuzz(func(t *testing.T, b []byte, c64 bool) {
		h, ok := decodeUDPHeader(b, c64)
		if !ok {
			if len(b) >= udpHeaderLen(c64) {
				t.Fatalf("%d bytes reported short", len(b))
			}
			return
		}
		out := make([]byte, udpHeaderLen(c64))
		encodeUDPHeader(out, h, c64)
		if !bytes.Equal(out, b[:len(out)]) {
			t.Fatalf("header %x re-encoded as %x", b[:len(out)], out)
		}
		var s udpRecvStats
		s.add(h, testNow)
		s.add(udpHeader{seq: h.seq / 2}, testNow)
		// The second datagram is late: it takes back one of the h.seq-1
		// losses the first one implied.
		wantLost := uint64(0)
		if h.seq >= 2 {
			wantLost = h.seq - 2
		}
		wantOOO := uint64(1)
		if h.seq == 0 {
			wantOOO = 2 // the first datagram is not above "none seen" either
		}
		if s.highest != h.seq || s.lost != wantLost || s.outOfOrder != wantOOO {
			t.Fatalf("after seq %d then %d: %+v", h.seq, h.seq/2, s)
		}
	})
}

var testNow = time.Unix(1700000000, 0)
