package netcall

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tamanic/tamanic/netstack"
	"github.com/tamanic/tamanic/tso"
)

// Caller makes one world call: the Normal World's SMC (firmware), or a
// direct call of a Server (tests, Direct).
type Caller interface {
	Call(op Op, r1, r2, r3 uint32) (Status, uint32)
}

// Direct calls a Server in the same address space: the host tests' world
// boundary.
type Direct struct{ S *Server }

// Call implements Caller.
func (d Direct) Call(op Op, r1, r2, r3 uint32) (Status, uint32) {
	return d.S.Handle(uint32(op), r1, r2, r3)
}

// The Normal World's use of the transfer region (the Secure World checks
// every call against the region only; this layout is the Normal World's
// choice).
const (
	txDescOff  = 0
	txDataOff  = 256
	rxOff      = 68 << 10
	rxSize     = MaxRxBatch * (RxRecordHeader + 1524)
	miscOff    = 172 << 10
	miscSize   = 16 << 10
	RegionSize = miscOff + miscSize + 68<<10 // 256 KiB: a power of two, as a TZASC region must be
)

// maxViews is what Info advertises as MaxGSOViews: the payload is copied
// into the region, so the views it comes in do not matter.
const maxViews = 64

// Device is the Normal World's netstack.Device: every Transmit,
// TransmitGSO and Receive batch is one world call. Transmissions are
// copied into the transfer region and, once the Secure World has copied
// them into its own memory, complete before the call returns (the
// completion callback runs then); the hardware's completion status stays
// in the Secure World's counters. Received frames are copied out of the
// region, so frames held by the endpoint never pin it.
//
// "Full" is retryable. When the Secure World answers StatusFull (its
// staging buffers are all with the hardware), the device holds that one
// transmission: its bytes stay in the region's TX area, the call returns
// nil and the completion comes when a later call (the next transmit, a
// receive batch, a poll tick, or the idle wait's wake-up, which the Secure
// World gives when a staging buffer comes back) gets it accepted. While
// one is held, a transmit retries it first and, if the Secure World is
// still full, returns a Full error: the endpoint then sees a packet held
// and waits for its completion before it tries again (netstack's
// retryFull gives up at once when nothing is held, and reported
// ErrNoBufferSpace 13 us after the Full answer although a buffer came back
// 20 ms later). Transmissions complete in the order they were handed in.
//
// Nothing signals RxReady from the Secure World: build the endpoint with
// a PollInterval (each tick is one OpReceive call when idle), or call Kick.
type Device struct {
	c      Caller
	region []byte
	info   Info
	done   func(any, error)

	txMu sync.Mutex
	desc TxDesc
	// held is the cookie of the transmission the Secure World answered
	// StatusFull, whose descriptor (d.desc, encoded at txDescOff) and
	// bytes still sit in the region's TX area; holding says one is held
	// (the idle wait reads it without the lock).
	held    any
	holding atomic.Bool

	rxMu  sync.Mutex
	queue []*frame
	head  int
	pool  sync.Pool

	rxReady chan struct{}
	closed  atomic.Bool
	stats   deviceCounters
}

type deviceCounters struct {
	calls, txCalls, rxCalls, rxFrames, full, refused, badRecords, waits, woken, held, retried atomic.Uint64
}

// DeviceStats are the Normal World's counters.
type DeviceStats struct {
	// Calls counts world calls (each is two world switches: into the
	// Secure World and back); TxCalls and RxCalls those for transmit and
	// receive.
	Calls, TxCalls, RxCalls uint64
	// RxFrames counts frames received; Full the transmit calls answered
	// StatusFull; Refused the calls refused; BadRecords receive answers
	// that did not parse (a Secure World fault, never expected).
	RxFrames, Full, Refused, BadRecords uint64
	// Waits counts OpWait calls (the idle governor's), Woken those a
	// received frame or a returned staging buffer ended.
	Waits, Woken uint64
	// Held counts transmissions held after a StatusFull answer, Retried
	// the calls that retried one (each is also in TxCalls).
	Held, Retried uint64
}

// NewDevice asks the Secure World for the NIC's description through c and
// returns the device. region is the transfer region as the Normal World
// maps it: RegionSize bytes.
func NewDevice(c Caller, region []byte) (*Device, error) {
	if len(region) < RegionSize {
		return nil, fmt.Errorf("netcall: transfer region of %d bytes, need %d", len(region), RegionSize)
	}
	d := &Device{c: c, region: region[:RegionSize], rxReady: make(chan struct{}, 1)}
	d.desc.Extents = make([]Extent, 0, 2)
	d.pool.New = func() any { return &frame{buf: make([]byte, 2048)} }
	if st, _ := d.call(OpInfo, miscOff, InfoSize, 0); st != StatusOK {
		return nil, fmt.Errorf("netcall: info: %w", st)
	}
	d.info = decodeInfo(d.region[miscOff:])
	if d.info.MaxFrame < 64 || d.info.MaxFrame > 2000 {
		return nil, fmt.Errorf("netcall: info: max frame %d", d.info.MaxFrame)
	}
	return d, nil
}

func (d *Device) call(op Op, r1, r2, r3 uint32) (Status, uint32) {
	d.stats.calls.Add(1)
	st, v := d.c.Call(op, r1, r2, r3)
	if st != StatusOK && st != StatusFull {
		d.stats.refused.Add(1)
	}
	return st, v
}

// Stats returns the counters.
func (d *Device) Stats() DeviceStats {
	s := &d.stats
	return DeviceStats{Calls: s.calls.Load(), TxCalls: s.txCalls.Load(), RxCalls: s.rxCalls.Load(),
		RxFrames: s.rxFrames.Load(), Full: s.full.Load(), Refused: s.refused.Load(), BadRecords: s.badRecords.Load(),
		Waits: s.waits.Load(), Woken: s.woken.Load(), Held: s.held.Load(), Retried: s.retried.Load()}
}

// SecureStats returns the Secure World's counters as JSON (OpStats).
func (d *Device) SecureStats() ([]byte, error) {
	d.txMu.Lock() // the misc area is shared with nothing else but Info
	defer d.txMu.Unlock()
	st, n := d.call(OpStats, miscOff, miscSize, 0)
	if st != StatusOK {
		return nil, fmt.Errorf("netcall: stats: %w", st)
	}
	if n > miscSize {
		return nil, fmt.Errorf("netcall: stats: %d bytes", n)
	}
	return append([]byte(nil), d.region[miscOff:miscOff+n]...), nil
}

// Call makes a raw world call (the hostile-call test's way in).
func (d *Device) Call(op Op, r1, r2, r3 uint32) (Status, uint32) { return d.call(op, r1, r2, r3) }

// Region returns the Normal World's view of the transfer region.
func (d *Device) Region() []byte { return d.region }

// Info implements netstack.Device.
func (d *Device) Info() netstack.DeviceInfo {
	return netstack.DeviceInfo{MAC: d.info.MAC, MaxFrame: int(d.info.MaxFrame), TxCsum: d.info.TxCsum, RxCsum: d.info.RxCsum,
		Segmentation: true, MaxTxDescs: int(d.info.MaxTxDescs), TxAlign: int(d.info.TxAlign),
		MaxGSOSegments: int(d.info.MaxGSOSegments), MaxGSOViews: maxViews}
}

// SetTxDone implements netstack.Device.
func (d *Device) SetTxDone(f func(any, error)) { d.done = f }

// ErrTooLong is returned for a frame or packet beyond the protocol's
// limits (never sent).
var ErrTooLong = errors.New("netcall: frame or packet too long")

// Transmit implements netstack.Device.
func (d *Device) Transmit(frags [][]byte, csum bool, cookie any) error {
	n := 0
	for _, f := range frags {
		n += len(f)
	}
	if n > int(d.info.MaxFrame) {
		return fmt.Errorf("%w: %d-byte frame", ErrTooLong, n)
	}
	d.txMu.Lock()
	held := false
	prev, perr, err := d.retryHeld()
	if err == nil {
		at := txDataOff
		for _, f := range frags {
			at += copy(d.region[at:], f)
		}
		d.desc = TxDesc{Kind: KindFrame, Extents: append(d.desc.Extents[:0], Extent{txDataOff, uint32(n)})}
		if csum {
			d.desc.Flags = FlagCsum
		}
		held, err = d.send(cookie)
	}
	d.txMu.Unlock()
	d.complete(prev, perr)
	if err == nil && !held {
		d.complete(cookie, nil)
	}
	return err
}

// TransmitGSO implements netstack.Device.
func (d *Device) TransmitGSO(hdr []byte, payload [][]byte, o tso.Options, cookie any) error {
	n := 0
	for _, p := range payload {
		n += len(p)
	}
	switch {
	case o.Type != tso.TCP:
		return fmt.Errorf("netcall: GSO type %v not carried", o.Type)
	case len(hdr) > MaxHeader || n > MaxGSOPayload:
		return fmt.Errorf("%w: %d-byte header, %d-byte payload", ErrTooLong, len(hdr), n)
	case o.MSS <= 0 || o.MSS > 0xffff || o.CsumOffset < 0 || o.CsumOffset > 0xffff:
		return fmt.Errorf("netcall: GSO MSS %d checksum offset %d", o.MSS, o.CsumOffset)
	}
	d.txMu.Lock()
	held := false
	prev, perr, err := d.retryHeld()
	if err == nil {
		at := txDataOff + copy(d.region[txDataOff:], hdr)
		for _, p := range payload {
			at += copy(d.region[at:], p)
		}
		d.desc = TxDesc{Kind: KindGSO, GSOType: GSOTCP, MSS: uint16(o.MSS), CsumOffset: uint16(o.CsumOffset),
			Extents: append(d.desc.Extents[:0], Extent{txDataOff, uint32(len(hdr))})}
		if n > 0 {
			// A GSO connection's ACKs and FINs have no payload: header only.
			d.desc.Extents = append(d.desc.Extents, Extent{txDataOff + uint32(len(hdr)), uint32(n)})
		}
		if o.NeedsCsum {
			d.desc.Flags = FlagNeedsCsum
		}
		held, err = d.send(cookie)
	}
	d.txMu.Unlock()
	d.complete(prev, perr)
	if err == nil && !held {
		d.complete(cookie, nil)
	}
	return err
}

// send encodes d.desc and makes the transmit call for cookie; txMu is
// held and nothing else is. A StatusFull answer holds the transmission
// (d.held) and returns held: it is queued, its completion comes when a
// retry gets it accepted.
func (d *Device) send(cookie any) (held bool, err error) {
	if d.closed.Load() {
		return false, fmt.Errorf("netcall: transmit: %w", StatusClosed)
	}
	d.desc.Encode(d.region[txDescOff:])
	d.stats.txCalls.Add(1)
	switch st, _ := d.call(OpTransmit, txDescOff, uint32(d.desc.Size()), 0); st {
	case StatusOK:
		return false, nil
	case StatusFull:
		d.stats.full.Add(1)
		d.stats.held.Add(1)
		d.held = cookie
		d.holding.Store(true)
		return true, nil
	default:
		return false, fmt.Errorf("netcall: transmit: %w", st)
	}
}

// retryHeld retries the held transmission, if any; txMu is held. It
// returns the cookie to complete (nil: none) with its error, and a Full
// error when the Secure World is still full (the held one stays held and
// nothing new may be sent). A held transmission the Secure World now
// refuses for good (a closed NIC) completes with that error: it was
// queued as far as the caller knows.
func (d *Device) retryHeld() (cookie any, cerr, err error) {
	if !d.holding.Load() {
		return nil, nil, nil
	}
	if d.closed.Load() {
		return nil, nil, fmt.Errorf("netcall: transmit: %w", StatusClosed)
	}
	d.stats.txCalls.Add(1)
	d.stats.retried.Add(1)
	// The descriptor and the bytes are where send left them: only this
	// device writes the TX area, under txMu.
	st, _ := d.call(OpTransmit, txDescOff, uint32(d.desc.Size()), 0)
	if st == StatusFull {
		d.stats.full.Add(1)
		return nil, nil, fmt.Errorf("netcall: transmit: %w", st)
	}
	cookie, d.held = d.held, nil
	d.holding.Store(false)
	if st != StatusOK {
		cerr = fmt.Errorf("netcall: transmit (held after full): %w", st)
	}
	return cookie, cerr, nil
}

// flushHeld retries the held transmission outside a transmit (a receive
// batch, a poll tick) and completes it if it went.
func (d *Device) flushHeld() {
	if !d.holding.Load() {
		return
	}
	d.txMu.Lock()
	c, cerr, _ := d.retryHeld()
	d.txMu.Unlock()
	d.complete(c, cerr)
}

// complete reports cookie's completion (nil: nothing to report).
func (d *Device) complete(cookie any, err error) {
	if cookie != nil && d.done != nil {
		d.done(cookie, err)
	}
}

// Full implements netstack.Device.
func (d *Device) Full(err error) bool { return errors.Is(err, StatusFull) }

// Receive implements netstack.Device: frames come from the last batch,
// and when it is used up one call fetches the next.
func (d *Device) Receive() (netstack.Frame, error) {
	d.flushHeld()
	d.rxMu.Lock()
	defer d.rxMu.Unlock()
	if d.head == len(d.queue) {
		d.queue, d.head = d.queue[:0], 0
		if d.closed.Load() {
			return nil, fmt.Errorf("netcall: receive: %w", StatusClosed)
		}
		d.stats.rxCalls.Add(1)
		st, k := d.call(OpReceive, rxOff, rxSize, MaxRxBatch)
		if st != StatusOK {
			return nil, fmt.Errorf("netcall: receive: %w", st)
		}
		if err := d.parse(k); err != nil {
			return nil, err
		}
		if k == MaxRxBatch {
			d.Kick() // more may wait
		}
	}
	if d.head == len(d.queue) {
		return nil, nil
	}
	f := d.queue[d.head]
	d.queue[d.head] = nil
	d.head++
	return f, nil
}

// parse copies k records out of the RX area. The Secure World is trusted,
// but a record that does not parse is an error, never a panic.
func (d *Device) parse(k uint32) error {
	area := d.region[rxOff : rxOff+rxSize]
	at := 0
	for i := uint32(0); i < k; i++ {
		if len(area)-at < RxRecordHeader {
			d.stats.badRecords.Add(1)
			return errors.New("netcall: receive: record outside the area")
		}
		l := int(le.Uint16(area[at:]))
		fl := le.Uint16(area[at+2:])
		if l > int(d.info.MaxFrame) || len(area)-at-RxRecordHeader < l {
			d.stats.badRecords.Add(1)
			return fmt.Errorf("netcall: receive: %d-byte record", l)
		}
		f := d.pool.Get().(*frame)
		f.d, f.held = d, true
		f.n = copy(f.buf, area[at+RxRecordHeader:at+RxRecordHeader+l])
		f.ip, f.l4 = fl&RxIPv4OK != 0, fl&RxL4OK != 0
		d.queue = append(d.queue, f)
		at += RxRecordHeader + (l+3)&^3
	}
	d.stats.rxFrames.Add(uint64(k))
	return nil
}

// Wait is the Normal World's idle: it hands the core to the Secure World
// for up to d (clamped to MaxWaitMicros), which returns early when frames
// arrive or, after a StatusFull answer, when a staging buffer comes back,
// and reports whether either happened (the caller then Kicks, from a
// context that may: the receive batch that follows retries a held
// transmission). It does not allocate: it runs in the runtime's idle
// hook.
func (d *Device) Wait(dt time.Duration) bool {
	us := min(max(dt/time.Microsecond, 0), MaxWaitMicros)
	d.stats.calls.Add(1)
	d.stats.waits.Add(1)
	st, v := d.c.Call(OpWait, uint32(us), 0, 0)
	if st != StatusOK {
		d.stats.refused.Add(1)
		return false
	}
	if v != 0 {
		d.stats.woken.Add(1)
	}
	return v != 0
}

// SetStrategy sets the Secure World driver's TX placement (ModeBounce or
// ModeSG).
func (d *Device) SetStrategy(m uint32) error {
	if st, _ := d.call(OpMode, m, 0, 0); st != StatusOK {
		return fmt.Errorf("netcall: mode: %w", st)
	}
	return nil
}

// Kick signals RxReady.
func (d *Device) Kick() {
	select {
	case d.rxReady <- struct{}{}:
	default:
	}
}

// RxReady implements netstack.Device.
func (d *Device) RxReady() <-chan struct{} { return d.rxReady }

// Poll implements netstack.Device: it retries a held transmission; the
// endpoint's poll tick is followed by a receive batch, which is the call
// that services the NIC.
func (d *Device) Poll() { d.flushHeld() }

// Close implements netstack.Device. The only transmission in flight is a
// held one (every other completed when its call returned): it completes
// now, with StatusClosed.
func (d *Device) Close() error {
	d.closed.Store(true)
	d.txMu.Lock()
	c := d.held
	d.held = nil
	d.holding.Store(false)
	d.txMu.Unlock()
	d.complete(c, fmt.Errorf("netcall: transmit: %w", StatusClosed))
	return nil
}

// frame is a received frame copied out of the region.
type frame struct {
	d      *Device
	buf    []byte
	n      int
	ip, l4 bool
	held   bool
}

func (f *frame) Bytes() []byte          { return f.buf[:f.n] }
func (f *frame) Verified() (bool, bool) { return f.ip, f.l4 }

func (f *frame) Release() error {
	if !f.held {
		return errors.New("netcall: frame released twice")
	}
	f.held = false
	f.d.pool.Put(f)
	return nil
}

var _ netstack.Device = (*Device)(nil)

// ReadRandom fills b from the Secure World's random source, 4 bytes an
// OpRandom call (the last call's unused bytes are dropped, never kept for
// a later caller). It is what the Normal World's runtime and crypto/rand
// read; it uses no memory shared with the Secure World, so it works
// before the Normal World's MMU and caches are on. An answer other than
// StatusOK is returned as the error (a Status, without allocating): the
// caller must not run on the bytes.
func ReadRandom(c Caller, b []byte) error {
	for len(b) > 0 {
		st, v := c.Call(OpRandom, 0, 0, 0)
		if st != StatusOK {
			// The Status itself (its Error names the call's package):
			// nothing allocated, as this runs in the runtime's randinit,
			// before the scheduler has a P (a review found fmt.Errorf
			// here).
			return st
		}
		var w [4]byte
		binary.LittleEndian.PutUint32(w[:], v)
		b = b[copy(b, w[:]):]
	}
	return nil
}
