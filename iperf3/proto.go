package iperf3

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
)

// Control-connection states, one signed byte each on the wire (iperf_api.h).
const (
	stateTestStart       int8 = 1
	stateTestRunning     int8 = 2
	stateTestEnd         int8 = 4
	stateParamExchange   int8 = 9
	stateCreateStreams   int8 = 10
	stateServerTerminate int8 = 11
	stateClientTerminate int8 = 12
	stateExchangeResults int8 = 13
	stateDisplayResults  int8 = 14
	stateIperfStart      int8 = 15
	stateIperfDone       int8 = 16
	stateAccessDenied    int8 = -1
	stateServerError     int8 = -2
)

// Error numbers sent after SERVER_ERROR; the client prints its own text for
// each (iperf_api.h, enum of i_errno values).
const (
	ieDuration     = 5   // test duration too long
	ieNumStreams   = 6   // too many parallel streams
	ieBlockSize    = 7   // block size too large
	ieOmit         = 12  // bogus --omit value
	ieUDPBlockSize = 20  // UDP block size invalid
	ieMessage      = 110 // unknown control message
	ieRecvParams   = 114 // unable to receive parameters
	ieRecvResults  = 117 // unable to receive results
	ieProtocol     = 131 // protocol does not exist
	ieNoMsg        = 144 // nothing received for too long
	ieStreamAccept = 204 // unable to accept a stream connection
)

// Protocol limits.
const (
	// CookieSize is the length of the cookie a client sends first on the
	// control connection and on every TCP stream: 36 characters from
	// "a-z2-7" and a NUL (iperf.h COOKIE_SIZE).
	CookieSize = 37
	// maxParamsJSON bounds the parameter object (iperf.h
	// MAX_PARAMS_JSON_STRING).
	maxParamsJSON = 8 * 1024
	// maxResultsJSON bounds the client's results object: 128 streams of
	// about 200 bytes each, with room to spare.
	maxResultsJSON = 64 * 1024
	// maxTCPBlock is the largest TCP block a client may ask for
	// (iperf.h MAX_BLOCKSIZE).
	maxTCPBlock = 1 << 20
	// defaultTCPBlock is the TCP block used when the client sends no "len"
	// (iperf.h DEFAULT_TCP_BLKSIZE).
	defaultTCPBlock = 128 * 1024
	// maxUDPBlock is the largest UDP payload over IPv4 (65535 - 20 - 8).
	maxUDPBlock = 65507
	// defaultUDPBlock is the UDP payload used when the client sends no
	// "len" (iperf.h DEFAULT_UDP_BLKSIZE).
	defaultUDPBlock = 1460
	// maxDurationSeconds is the client's own ceiling for -t (iperf.h
	// MAX_TIME).
	maxDurationSeconds = 86400
)

// UDP stream handshake: the client sends four bytes, the server answers
// four. Older clients send 123456789 in host order and accept any reply;
// 3.11 and later send "9876" and accept "6789" (or 987654321).
var udpConnectReply = []byte{'6', '7', '8', '9'}

// Params is what the client asks for in PARAM_EXCHANGE, after validation.
type Params struct {
	UDP           bool    // "udp" present; TCP otherwise
	Reverse       bool    // -R: the server sends
	Bidir         bool    // --bidir: both directions at once
	Streams       int     // -P
	Duration      int     // -t in seconds; 0 with -n or -k
	Omit          int     // -O in seconds
	Bytes         uint64  // -n, 0 if unset
	Blocks        uint64  // -k, 0 if unset
	BlockSize     int     // -l, defaulted per protocol
	Rate          uint64  // -b in bit/s per stream, 0 for unlimited
	Counters64    bool    // --udp-counters-64bit
	ServerOutput  bool    // --get-server-output
	ClientVersion string  // "client_version", informational
	raw           rawJSON // every key, for the fuzz target's invariants
}

type rawJSON map[string]json.RawMessage

// paramError is a refusal carrying the i_errno value the client will print.
type paramError struct {
	code int32
	msg  string
}

func (e *paramError) Error() string { return e.msg }

func badParam(code int32, format string, a ...any) error {
	return &paramError{code: code, msg: fmt.Sprintf(format, a...)}
}

// ParseParams decodes and validates a PARAM_EXCHANGE object. maxStreams
// bounds the data streams the test holds: -P, or twice -P with --bidir
// (the client opens -P streams in each direction). The error, if any, is
// a *paramError naming the offending key.
func ParseParams(b []byte, maxStreams int) (Params, error) {
	var p Params
	if len(b) > maxParamsJSON {
		return p, badParam(ieRecvParams, "parameters: %d bytes, limit %d", len(b), maxParamsJSON)
	}
	var raw rawJSON
	if err := json.Unmarshal(b, &raw); err != nil {
		return p, badParam(ieRecvParams, "parameters: %v", err)
	}
	if raw == nil {
		return p, badParam(ieRecvParams, "parameters: not a JSON object")
	}
	p.raw = raw
	if _, ok := raw["sctp"]; ok {
		return p, badParam(ieProtocol, "parameters: SCTP is not supported")
	}
	_, tcp := raw["tcp"]
	_, p.UDP = raw["udp"]
	if tcp && p.UDP {
		return p, badParam(ieProtocol, "parameters: both tcp and udp")
	}
	_, p.Reverse = raw["reverse"]
	_, p.Bidir = raw["bidirectional"]
	_, p.Counters64 = raw["udp_counters_64bit"]
	_, p.ServerOutput = raw["get_server_output"]
	if v, ok := raw["client_version"]; ok {
		if err := json.Unmarshal(v, &p.ClientVersion); err != nil {
			return p, badParam(ieRecvParams, "parameters: client_version: %v", err)
		}
	}

	num := func(key string, lo, hi float64, code int32) (float64, error) {
		v, ok := raw[key]
		if !ok {
			return 0, nil
		}
		var f float64
		if err := json.Unmarshal(v, &f); err != nil {
			return 0, badParam(ieRecvParams, "parameters: %s: not a number", key)
		}
		if math.IsNaN(f) || f < lo || f > hi {
			return 0, badParam(code, "parameters: %s=%v outside [%v, %v]", key, f, lo, hi)
		}
		return f, nil
	}
	var err error
	var f float64
	if f, err = num("parallel", 0, float64(maxStreams), ieNumStreams); err != nil {
		return p, err
	}
	p.Streams = max(int(f), 1)
	if p.Bidir && 2*p.Streams > maxStreams {
		return p, badParam(ieNumStreams, "parameters: parallel=%d with bidirectional is %d streams, limit %d", p.Streams, 2*p.Streams, maxStreams)
	}
	if f, err = num("time", 0, maxDurationSeconds, ieDuration); err != nil {
		return p, err
	}
	p.Duration = int(f)
	if f, err = num("omit", 0, maxDurationSeconds, ieOmit); err != nil {
		return p, err
	}
	p.Omit = int(f)
	if f, err = num("num", 0, 1<<62, ieRecvParams); err != nil {
		return p, err
	}
	p.Bytes = uint64(f)
	if f, err = num("blockcount", 0, 1<<62, ieRecvParams); err != nil {
		return p, err
	}
	p.Blocks = uint64(f)
	if f, err = num("bandwidth", 0, 1<<62, ieRecvParams); err != nil {
		return p, err
	}
	p.Rate = uint64(f)
	if p.UDP {
		hdr := 12.0
		if p.Counters64 {
			hdr = 16
		}
		if f, err = num("len", 0, maxUDPBlock, ieUDPBlockSize); err != nil {
			return p, err
		}
		p.BlockSize = int(f)
		if p.BlockSize == 0 {
			p.BlockSize = defaultUDPBlock
		}
		if float64(p.BlockSize) < hdr {
			return p, badParam(ieUDPBlockSize, "parameters: len=%d shorter than the %v-byte UDP header", p.BlockSize, hdr)
		}
	} else {
		if f, err = num("len", 0, maxTCPBlock, ieBlockSize); err != nil {
			return p, err
		}
		p.BlockSize = int(f)
		if p.BlockSize == 0 {
			p.BlockSize = defaultTCPBlock
		}
	}
	return p, nil
}

// streamResult is one entry of the "streams" array in EXCHANGE_RESULTS.
type streamResult struct {
	ID             int     `json:"id"`
	Bytes          uint64  `json:"bytes"`
	Retransmits    int64   `json:"retransmits"`
	Jitter         float64 `json:"jitter"`
	Errors         uint64  `json:"errors"`
	OmittedErrors  uint64  `json:"omitted_errors"`
	Packets        uint64  `json:"packets"`
	OmittedPackets uint64  `json:"omitted_packets"`
	StartTime      float64 `json:"start_time"`
	EndTime        float64 `json:"end_time"`
}

// results is the object each side sends in EXCHANGE_RESULTS.
type results struct {
	CPUTotal             float64        `json:"cpu_util_total"`
	CPUUser              float64        `json:"cpu_util_user"`
	CPUSystem            float64        `json:"cpu_util_system"`
	SenderHasRetransmits int            `json:"sender_has_retransmits"`
	ServerOutputText     string         `json:"server_output_text,omitempty"`
	Streams              []streamResult `json:"streams"`
}

// parseResults decodes the client's EXCHANGE_RESULTS object, requiring the
// keys the reference implementation requires.
func parseResults(b []byte) (results, error) {
	var r results
	var raw struct {
		CPUTotal             *float64 `json:"cpu_util_total"`
		CPUUser              *float64 `json:"cpu_util_user"`
		CPUSystem            *float64 `json:"cpu_util_system"`
		SenderHasRetransmits *float64 `json:"sender_has_retransmits"` // 3.12 sends -1 as 2^64-1
		Streams              *[]struct {
			ID      *int     `json:"id"`
			Bytes   *float64 `json:"bytes"`
			Jitter  *float64 `json:"jitter"`
			Errors  *float64 `json:"errors"`
			Packets *float64 `json:"packets"`
		} `json:"streams"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return r, fmt.Errorf("results: %w", err)
	}
	if raw.CPUTotal == nil || raw.CPUUser == nil || raw.CPUSystem == nil || raw.SenderHasRetransmits == nil || raw.Streams == nil {
		return r, errors.New("results: a required key is missing")
	}
	r.CPUTotal, r.CPUUser, r.CPUSystem = *raw.CPUTotal, *raw.CPUUser, *raw.CPUSystem
	if *raw.SenderHasRetransmits == 1 {
		r.SenderHasRetransmits = 1
	}
	for i, s := range *raw.Streams {
		if s.ID == nil || s.Bytes == nil || s.Jitter == nil || s.Errors == nil || s.Packets == nil {
			return r, fmt.Errorf("results: stream %d: a required key is missing", i)
		}
		if *s.Bytes < 0 || *s.Errors < 0 || *s.Packets < 0 {
			return r, fmt.Errorf("results: stream %d: negative counter", i)
		}
		r.Streams = append(r.Streams, streamResult{ID: *s.ID, Bytes: uint64(*s.Bytes), Jitter: *s.Jitter,
			Errors: uint64(*s.Errors), Packets: uint64(*s.Packets)})
	}
	return r, nil
}

// readJSON reads one length-prefixed JSON object: a 32-bit big-endian
// length, then that many bytes. Lengths above limit are refused before
// anything is allocated.
func readJSON(r io.Reader, limit int) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, fmt.Errorf("JSON length: %w", err)
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n == 0 || n > uint32(limit) {
		return nil, fmt.Errorf("JSON length %d outside [1, %d]", n, limit)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, fmt.Errorf("JSON body (%d bytes): %w", n, err)
	}
	return b, nil
}

// writeJSON writes v as one length-prefixed JSON object.
func writeJSON(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode JSON: %w", err)
	}
	msg := make([]byte, 4+len(b))
	binary.BigEndian.PutUint32(msg, uint32(len(b)))
	copy(msg[4:], b)
	if _, err := w.Write(msg); err != nil {
		return fmt.Errorf("write JSON: %w", err)
	}
	return nil
}

// validCookie reports whether c has the shape every iperf3 client sends:
// 36 printable ASCII characters and a NUL.
func validCookie(c []byte) bool {
	if len(c) != CookieSize || c[CookieSize-1] != 0 {
		return false
	}
	for _, b := range c[:CookieSize-1] {
		if b < 0x21 || b > 0x7e {
			return false
		}
	}
	return true
}

// serverError encodes SERVER_ERROR with the i_errno value and errno 0.
func serverError(code int32) []byte {
	b := make([]byte, 9)
	b[0] = stateByte(stateServerError)
	binary.BigEndian.PutUint32(b[1:], uint32(code))
	return b
}

// stateByte is a state as it travels: one two's-complement byte.
func stateByte(s int8) byte { return byte(s) }
