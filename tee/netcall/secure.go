package netcall

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tamanic/tamanic/bounce"
	"github.com/tamanic/tamanic/fec"
	"github.com/tamanic/tamanic/tso"
)

// ServerConfig configures a Server.
type ServerConfig struct {
	// NIC is the Secure World's ENET driver. Its Config.OnTxDone must call
	// the server's TxDone.
	NIC *fec.NIC
	// Region is the transfer region (Normal World memory) as the Secure
	// World maps it. Nothing outside it is ever read or written.
	Region []byte
	// SmallSlots and LargeSlots are the staging buffers TX copies go to:
	// small ones hold a frame, large ones a GSO packet. A buffer stays with
	// the driver until the frame or packet completes. Defaults 256 and 8.
	SmallSlots, LargeSlots int
	// Random is the source OpRandom answers from; crypto/rand's Reader
	// when nil (in the Trusted OS, TamaGo's: the RNGB on an i.MX6ULL).
	// A source that fails is answered StatusClosed; crypto/rand's never
	// returns an error (Go 1.26 ends the program instead, and TamaGo's
	// RNGB driver panics on an RNGB error), so there a failing RNGB stops
	// the whole Trusted OS: fail-closed, ENET1 included.
	Random io.Reader
}

// Staging buffer sizes.
const (
	smallSlot = 2048
	largeSlot = MaxHeader + MaxGSOPayload
)

// Server is the Secure World end: it validates each call against the
// transfer region, copies what it is handed into its own memory and drives
// the NIC. Handle is safe for concurrent use (calls are serialised, as on
// one core they are anyway).
type Server struct {
	nic    *fec.NIC
	region Region
	small  chan []byte
	large  chan []byte
	random io.Reader

	mu    sync.Mutex
	desc  [TxDescHeader + TxExtentSize*MaxExtents]byte
	ext   []Extent
	stats ServerStats
	// refused counts refusals by status.
	refused [numStatus]uint64

	txErrors   atomic.Uint64 // completions with an error
	txComplete atomic.Uint64
	// fullOut is set when a transmit is answered StatusFull: the Normal
	// World holds that transmission, and the next staging buffer to come
	// back signals freed, which ends an OpWait (value WaitFreed).
	fullOut atomic.Bool
	freed   chan struct{}
}

// ServerStats are the Secure World's counters.
type ServerStats struct {
	// Calls counts every call handled; Info, Tx, Rx, Stats and WaitCalls
	// count them by operation (a call with an unknown operation counts in
	// Calls and in Refused["bad-op"] only); WaitWoken counts the waits a
	// received frame ended, WaitFreed those a staging buffer coming back
	// after a StatusFull answer ended.
	Calls, InfoCalls, TxCalls, RxCalls, StatsCalls, WaitCalls, WaitWoken, WaitFreed, ModeCalls uint64
	// RandomCalls counts OpRandom calls, RandomErrors those the random
	// source failed (answered StatusClosed: the Normal World stops rather
	// than run on bytes that are not random).
	RandomCalls, RandomErrors uint64
	// Refused counts refused calls by status name (Full is not a
	// refusal: it is counted in TxFull).
	Refused map[string]uint64 `json:",omitempty"`
	// LastRefusal describes the last refused call.
	LastRefusal string `json:",omitempty"`
	// TxFrames, TxGSOPackets and TxBytes count what was queued;
	// TxComplete the completions, TxErrors those with an error; TxFull
	// the calls answered StatusFull.
	TxFrames, TxGSOPackets, TxBytes, TxComplete, TxErrors, TxFull uint64
	// RxFrames and RxBytes count frames handed to the Normal World;
	// RxErrors receive errors (frames the NIC dropped, counted there);
	// RxEmpty the receive calls that found no frame (a poll tick with
	// nothing waiting).
	RxFrames, RxBytes, RxErrors, RxEmpty uint64
	// Staging is the staging buffers held by the driver now.
	Staging int
}

// slot is a staging buffer lent to the driver: the TX cookie.
type slot struct {
	buf   []byte
	large bool
}

// NewServer returns a server on c.NIC and c.Region.
func NewServer(c ServerConfig) (*Server, error) {
	if c.NIC == nil {
		return nil, errors.New("netcall: ServerConfig.NIC is required")
	}
	if c.SmallSlots <= 0 {
		c.SmallSlots = 256
	}
	if c.LargeSlots <= 0 {
		c.LargeSlots = 8
	}
	if c.Random == nil {
		c.Random = rand.Reader
	}
	s := &Server{nic: c.NIC, region: c.Region, random: c.Random, small: make(chan []byte, c.SmallSlots), large: make(chan []byte, c.LargeSlots),
		ext: make([]Extent, 0, MaxExtents), freed: make(chan struct{}, 1)}
	for range c.SmallSlots {
		s.small <- make([]byte, smallSlot)
	}
	for range c.LargeSlots {
		s.large <- make([]byte, largeSlot)
	}
	return s, nil
}

// TxDone takes a TX completion from the NIC (its Config.OnTxDone) and
// returns the staging buffer.
func (s *Server) TxDone(cookie any, err error) {
	sl, ok := cookie.(*slot)
	if !ok {
		return
	}
	s.txComplete.Add(1)
	if err != nil {
		s.txErrors.Add(1)
	}
	if sl.large {
		s.large <- sl.buf
	} else {
		s.small <- sl.buf
	}
	if s.fullOut.Swap(false) {
		select {
		case s.freed <- struct{}{}:
		default:
		}
	}
}

// Stats returns a snapshot of the counters.
func (s *Server) Stats() ServerStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.statsLocked()
}

func (s *Server) statsLocked() ServerStats {
	st := s.stats
	st.TxComplete, st.TxErrors = s.txComplete.Load(), s.txErrors.Load()
	st.Staging = cap(s.small) - len(s.small) + cap(s.large) - len(s.large)
	for i, n := range s.refused {
		if n > 0 {
			if st.Refused == nil {
				st.Refused = map[string]uint64{}
			}
			st.Refused[Status(i).String()] = n
		}
	}
	return st
}

// Handle serves one world call: r0 the operation, r1-r3 its arguments. It
// returns the status (r0) and the value (r1).
func (s *Server) Handle(r0, r1, r2, r3 uint32) (Status, uint32) {
	op := Op(r0)
	if op == OpWait && r1 <= MaxWaitMicros && r2 == 0 && r3 == 0 {
		return s.wait(r1) // without the lock: other calls go on meanwhile
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stats.Calls++
	var st Status
	var v uint32
	var why string
	switch op {
	case OpInfo:
		s.stats.InfoCalls++
		st, why = s.info(r1, r2)
	case OpTransmit:
		s.stats.TxCalls++
		st, why = s.transmit(r1, r2, r3)
	case OpReceive:
		s.stats.RxCalls++
		v, st, why = s.receive(r1, r2, r3)
	case OpStats:
		s.stats.StatsCalls++
		v, st, why = s.statsCall(r1, r2)
	case OpWait:
		s.stats.WaitCalls++
		st, why = StatusBadField, "wait beyond MaxWaitMicros or r2, r3 set"
	case OpMode:
		s.stats.ModeCalls++
		st, why = s.mode(r1, r2, r3)
	case OpRandom:
		s.stats.RandomCalls++
		v, st, why = s.randomCall(r1, r2, r3)
	default:
		st, why = StatusBadOp, "unknown operation"
	}
	switch st {
	case StatusOK:
		if op == OpTransmit {
			// Whatever the Normal World held has gone: a pending
			// signal would end its next wait for nothing.
			select {
			case <-s.freed:
			default:
			}
		}
	case StatusFull:
		s.stats.TxFull++
		s.fullOut.Store(true)
	default:
		s.refused[st]++
		s.stats.LastRefusal = op.String() + ": " + st.String() + ": " + why
	}
	return st, v
}

func (s *Server) info(off, n uint32) (Status, string) {
	if n < InfoSize {
		return StatusBadLength, "info needs 24 bytes"
	}
	b, st := s.region.Slice(off, InfoSize)
	if st != StatusOK {
		return st, "info outside the region"
	}
	i := Info{MAC: s.nic.MAC(), TxCsum: s.nic.CsumOffload(), RxCsum: s.nic.CsumOffload(),
		MaxFrame: uint16(s.nic.MaxFrame()), MaxTxDescs: uint16(s.nic.MaxTxDescs()), TxAlign: uint16(s.nic.Caps().TxAlign),
		MaxGSOSegments: uint16(min(s.nic.MaxGSOSegments(1), 0xffff)), MaxGSOPayload: MaxGSOPayload}
	i.encode(b)
	return StatusOK, ""
}

// transmit validates the descriptor at off (n bytes), copies it and the
// extents it names into a staging buffer, and queues that.
func (s *Server) transmit(off, n, r3 uint32) (Status, string) {
	if r3 != 0 {
		return StatusBadField, "r3 must be 0"
	}
	if n < TxDescHeader || n > uint32(len(s.desc)) {
		return StatusBadLength, "descriptor length"
	}
	b, st := s.region.Slice(off, n)
	if st != StatusOK {
		return st, "descriptor outside the region"
	}
	// One copy of the descriptor: the checks and the use read the copy.
	copy(s.desc[:n], b)
	d, st := decodeTxDesc(s.desc[:n], s.ext)
	if st != StatusOK {
		return st, "descriptor"
	}
	var total uint64
	for _, e := range d.Extents {
		if e.Len == 0 {
			return StatusBadLength, "empty extent"
		}
		if _, st := s.region.Slice(e.Off, e.Len); st != StatusOK {
			return st, "extent outside the region"
		}
		total += uint64(e.Len)
	}
	maxFrame := uint64(s.nic.MaxFrame())
	var hl uint64
	switch d.Kind {
	case KindFrame:
		if d.GSOType != GSONone || d.MSS != 0 || d.CsumOffset != 0 || d.Flags&^FlagCsum != 0 {
			return StatusBadField, "frame with GSO fields"
		}
		if total < 14 || total > maxFrame {
			return StatusBadLength, "frame length"
		}
	case KindGSO:
		if d.GSOType != GSOTCP || d.Flags&^FlagNeedsCsum != 0 {
			return StatusBadField, "GSO type or flags"
		}
		hl = uint64(d.Extents[0].Len)
		if hl < 14+20+20 || hl > MaxHeader {
			return StatusBadLength, "GSO header length"
		}
		if total-hl > MaxGSOPayload {
			return StatusBadLength, "GSO payload length"
		}
		if int(d.MSS) < tso.MinTCPMSS || uint64(d.MSS) > maxFrame {
			return StatusBadField, "MSS"
		}
	default:
		return StatusBadField, "kind"
	}
	sl := s.take(d.Kind == KindGSO)
	if sl == nil {
		return StatusFull, ""
	}
	buf := sl.buf[:0]
	for _, e := range d.Extents {
		src, _ := s.region.Slice(e.Off, e.Len) // checked above
		buf = append(buf, src...)
	}
	var err error
	if d.Kind == KindFrame {
		err = s.nic.Transmit([][]byte{buf}, fec.TxOptions{Csum: d.Flags&FlagCsum != 0}, sl)
	} else {
		var payload [][]byte
		if uint64(len(buf)) > hl {
			payload = [][]byte{buf[hl:]}
		}
		err = s.nic.TransmitGSO(buf[:hl], payload, tso.Options{Type: tso.TCP, MSS: int(d.MSS),
			NeedsCsum: d.Flags&FlagNeedsCsum != 0, CsumOffset: int(d.CsumOffset)}, sl)
	}
	if err != nil {
		s.give(sl)
		switch {
		case errors.Is(err, fec.ErrRingFull):
			return StatusFull, ""
		case errors.Is(err, fec.ErrClosed):
			return StatusClosed, err.Error()
		}
		return StatusRefused, err.Error()
	}
	if d.Kind == KindFrame {
		s.stats.TxFrames++
	} else {
		s.stats.TxGSOPackets++
	}
	s.stats.TxBytes += total
	return StatusOK, ""
}

// take returns a free staging buffer, reclaiming completed TX once when
// none is free; nil when none is.
func (s *Server) take(large bool) *slot {
	ch := s.small
	if large {
		ch = s.large
	}
	for range 2 {
		select {
		case b := <-ch:
			return &slot{buf: b, large: large}
		default:
		}
		s.nic.Reclaim()
	}
	return nil
}

// give returns a staging buffer the driver did not take.
func (s *Server) give(sl *slot) {
	if sl.large {
		s.large <- sl.buf
	} else {
		s.small <- sl.buf
	}
}

// receive writes up to max received frames as records into the n bytes at
// off.
func (s *Server) receive(off, n, max uint32) (uint32, Status, string) {
	if max == 0 || max > MaxRxBatch {
		return 0, StatusBadCount, "frame count"
	}
	rec := uint32(RxRecordHeader + (s.nic.MaxFrame()+3)&^3)
	if n < rec {
		return 0, StatusBadLength, "area holds no frame"
	}
	area, st := s.region.Slice(off, n)
	if st != StatusOK {
		return 0, st, "area outside the region"
	}
	if _, err := s.nic.Poll(); err != nil {
		s.stats.RxErrors++
	}
	var k, at uint32
	// Dropped frames are reported one by one; a bound on them keeps a call
	// short whatever the ring holds.
	for errs := 0; k < max && uint32(len(area))-at >= rec && errs < MaxRxBatch; {
		p, err := s.nic.Receive()
		if p == nil {
			if err == nil {
				// The ring is empty: a pending RX signal is stale (every
				// poll gives one) and would end the next OpWait at once.
				select {
				case <-s.nic.RxReady():
				default:
				}
				break
			}
			if errors.Is(err, fec.ErrClosed) {
				if k == 0 {
					return 0, StatusClosed, err.Error()
				}
				break
			}
			s.stats.RxErrors++
			errs++
			continue
		}
		if uint32(len(p.Data)) > rec-RxRecordHeader {
			// Longer than MaxFrame: never from this driver; dropped and
			// counted rather than written past the record.
			_ = p.Release()
			s.stats.RxErrors++
			errs++
			continue
		}
		var f uint16
		if p.Csum.IPv4 {
			f |= RxIPv4OK
		}
		if p.Csum.L4 {
			f |= RxL4OK
		}
		l := uint32(len(p.Data))
		le.PutUint16(area[at:], uint16(l))
		le.PutUint16(area[at+2:], f)
		copy(area[at+RxRecordHeader:], p.Data)
		_ = p.Release()
		at += RxRecordHeader + (l+3)&^3
		k++
		s.stats.RxFrames++
		s.stats.RxBytes += uint64(l)
	}
	if k == 0 {
		s.stats.RxEmpty++
	}
	return k, StatusOK, ""
}

// mode sets the driver's TX placement strategy.
func (s *Server) mode(m, r2, r3 uint32) (Status, string) {
	if r2 != 0 || r3 != 0 {
		return StatusBadField, "r2, r3 must be 0"
	}
	switch m {
	case ModeBounce:
		s.nic.SetStrategy(bounce.Bounce)
	case ModeSG:
		s.nic.SetStrategy(bounce.SG)
	default:
		return StatusBadField, "unknown strategy"
	}
	return StatusOK, ""
}

// randomCall answers 32 bits from the random source. A source that fails
// is answered StatusClosed, counted, never with bytes it did not give.
func (s *Server) randomCall(r1, r2, r3 uint32) (uint32, Status, string) {
	if r1 != 0 || r2 != 0 || r3 != 0 {
		return 0, StatusBadField, "r1, r2, r3 must be 0"
	}
	var b [4]byte
	if _, err := io.ReadFull(s.random, b[:]); err != nil {
		s.stats.RandomErrors++
		return 0, StatusClosed, fmt.Sprintf("random source: %v", err)
	}
	return binary.LittleEndian.Uint32(b[:]), StatusOK, ""
}

// wait waits up to us microseconds for the NIC to signal received frames
// (its interrupt, or a poll), or, after a StatusFull answer, for a staging
// buffer to come back; it reports WaitRx or WaitFreed when one did.
func (s *Server) wait(us uint32) (Status, uint32) {
	woken := func(v uint32) (Status, uint32) {
		s.mu.Lock()
		s.stats.Calls++
		s.stats.WaitCalls++
		if v == WaitRx {
			s.stats.WaitWoken++
		} else {
			s.stats.WaitFreed++
		}
		s.mu.Unlock()
		return StatusOK, v
	}
	rx := s.nic.RxReady()
	select {
	case <-rx:
		return woken(WaitRx)
	case <-s.freed:
		return woken(WaitFreed)
	default:
	}
	if us > 0 {
		t := time.NewTimer(time.Duration(us) * time.Microsecond)
		defer t.Stop()
		select {
		case <-rx:
			return woken(WaitRx)
		case <-s.freed:
			return woken(WaitFreed)
		case <-t.C:
		}
	}
	s.mu.Lock()
	s.stats.Calls++
	s.stats.WaitCalls++
	s.mu.Unlock()
	return StatusOK, 0
}

// statsCall writes the counters as JSON into the n bytes at off.
func (s *Server) statsCall(off, n uint32) (uint32, Status, string) {
	if _, st := s.region.Slice(off, n); st != StatusOK {
		return 0, st, "stats outside the region"
	}
	doc := struct {
		Server ServerStats
		NIC    fec.Stats
	}{s.statsLocked(), s.nic.Stats()}
	j, err := json.Marshal(doc)
	if err != nil {
		return 0, StatusRefused, err.Error()
	}
	if uint64(len(j)) > uint64(n) {
		return 0, StatusBadLength, "stats do not fit"
	}
	b, _ := s.region.Slice(off, uint32(len(j)))
	copy(b, j)
	return uint32(len(j)), StatusOK, ""
}
