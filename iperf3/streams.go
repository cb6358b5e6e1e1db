package iperf3

import (
	"time"
)

// recvTCP counts what arrives on a receiving TCP stream until it closes.
func (t *test) recvTCP(st *stream) {
	buf := make([]byte, min(t.p.BlockSize, 128<<10))
	for {
		n, err := st.conn.Read(buf)
		if n > 0 && t.counting.Load() {
			st.bytes.Add(uint64(n))
		}
		if err != nil {
			return
		}
	}
}

// limitReached reports whether -n or -k has been met by all senders
// together.
func (t *test) limitReached() bool {
	return (t.p.Bytes > 0 && t.sent.Load() >= t.p.Bytes) || (t.p.Blocks > 0 && t.blocks.Load() >= t.p.Blocks)
}

// pace waits until a stream that has sent n bytes since start is within
// its -b rate; it returns false if the test ended meanwhile.
func (t *test) pace(n uint64, start time.Time) bool {
	if t.p.Rate == 0 {
		select {
		case <-t.quit:
			return false
		default:
			return true
		}
	}
	due := start.Add(time.Duration(float64(n) * 8 / float64(t.p.Rate) * float64(time.Second)))
	wait := time.Until(due)
	if wait <= 0 {
		return true
	}
	tm := time.NewTimer(wait)
	defer tm.Stop()
	select {
	case <-t.quit:
		return false
	case <-tm.C:
		return true
	}
}

// sendTCP writes blocks on a sending TCP stream until the test ends or a
// limit is reached.
func (t *test) sendTCP(st *stream, start time.Time) {
	var sent uint64
	for {
		if t.limitReached() {
			<-t.quit
			return
		}
		if !t.pace(sent, start) {
			return
		}
		counting := t.counting.Load() // the write starts inside the test
		n, err := st.conn.Write(t.payload)
		sent += uint64(n)
		if counting {
			st.bytes.Add(uint64(n))
			t.sent.Add(uint64(n))
			t.blocks.Add(1)
		}
		if err != nil {
			return
		}
	}
}

// sendUDP sends numbered, timestamped datagrams to a sending UDP stream's
// peer until the test ends or a limit is reached.
func (t *test) sendUDP(st *stream, start time.Time) {
	buf := make([]byte, t.p.BlockSize)
	copy(buf, t.payload)
	var sent, seq uint64
	for {
		if t.limitReached() {
			<-t.quit
			return
		}
		if !t.pace(sent, start) {
			return
		}
		seq++
		now := time.Now()
		encodeUDPHeader(buf, udpHeader{sec: uint32(now.Unix()), usec: uint32(now.Nanosecond() / 1000), seq: seq}, t.p.Counters64)
		counting := t.counting.Load()
		n, err := t.s.udp.WriteTo(buf, st.peer)
		sent += uint64(len(buf))
		if err != nil {
			if t.closing() {
				return
			}
			t.s.mu.Lock()
			t.s.stats.UDPSendErrors++
			t.s.mu.Unlock()
			time.Sleep(time.Millisecond) // let the queue drain rather than spin
			continue
		}
		if counting {
			st.bytes.Add(uint64(n))
			st.packets.Store(seq)
			t.sent.Add(uint64(n))
			t.blocks.Add(1)
		}
	}
}
