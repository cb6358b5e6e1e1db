package netstack_test

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/link/nested"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
)

// segCapture records every TCP segment of the soak's connections at three
// points: handed by a host's gVisor to its link endpoint ("a out"), on the
// wire between the models ("wire a>b"), and handed by a host's link
// endpoint to its gVisor ("b in"). A segment that left one stack and never
// reached the other is thus placed: lost before the wire (driver, model
// TX), on it (the fault filter), or after it (model RX, driver,
// endpoint). Records are kept per connection, keyed by the listening
// port, and dropped when a transfer ends quickly, so only slow ones cost
// memory. States are each side's TCP endpoint, sampled while a connection
// makes no progress.
type segCapture struct {
	start time.Time
	mu    sync.Mutex
	conns map[uint16]*connLog
	fault []string
}

type connLog struct {
	recs     []segRec
	states   []string
	lastData time.Time // last payload delivered to the receiver's gVisor
	began    time.Time
}

type segRec struct {
	at           time.Duration
	where        string
	sport, dport uint16
	seq, ack     uint32
	n            int
	flags        uint8
	win          uint16
}

func newSegCapture() *segCapture {
	return &segCapture{start: time.Now(), conns: map[uint16]*connLog{}}
}

// key is the listening port of the segment's connection: the soak listens
// below gVisor's ephemeral range (16000 and up).
func capKey(sport, dport uint16) (uint16, bool) {
	switch {
	case dport < 16000 && sport >= 16000:
		return dport, true
	case sport < 16000 && dport >= 16000:
		return sport, true
	}
	return 0, false
}

// ip records the TCP segment in an IPv4 packet, payload size n (-1: from
// the packet).
func (c *segCapture) ip(where string, b []byte, n int) {
	if len(b) < 20 || b[0]>>4 != 4 || b[9] != 6 {
		return
	}
	ihl := int(b[0]&15) * 4
	if len(b) < ihl+20 {
		return
	}
	t := b[ihl:]
	doff := int(t[12]>>4) * 4
	if n < 0 {
		n = int(binary.BigEndian.Uint16(b[2:])) - ihl - doff
	}
	r := segRec{where: where, sport: binary.BigEndian.Uint16(t), dport: binary.BigEndian.Uint16(t[2:]),
		seq: binary.BigEndian.Uint32(t[4:]), ack: binary.BigEndian.Uint32(t[8:]), n: n, flags: t[13],
		win: binary.BigEndian.Uint16(t[14:])}
	k, ok := capKey(r.sport, r.dport)
	if !ok {
		return
	}
	now := time.Now()
	r.at = now.Sub(c.start)
	c.mu.Lock()
	l := c.conns[k]
	if l == nil {
		l = &connLog{began: now, lastData: now}
		c.conns[k] = l
	}
	l.recs = append(l.recs, r)
	if strings.HasSuffix(where, " in") && n > 0 {
		l.lastData = now
	}
	c.mu.Unlock()
}

// frame records an Ethernet frame from the wire.
func (c *segCapture) frame(where string, f []byte) {
	switch {
	case len(f) > 14 && f[12] == 0x08 && f[13] == 0x00:
		c.ip(where, f[14:], -1)
	case len(f) >= 42 && f[12] == 0x08 && f[13] == 0x06:
		c.faultAt(fmt.Sprintf("%s ARP op %d %v asks/tells %v", where, binary.BigEndian.Uint16(f[20:]), netip.AddrFrom4([4]byte(f[28:32])), netip.AddrFrom4([4]byte(f[38:42]))))
	}
}

// faultAt notes an injected fault.
func (c *segCapture) faultAt(what string) {
	c.mu.Lock()
	c.fault = append(c.fault, fmt.Sprintf("%9.3f %s", time.Since(c.start).Seconds(), what))
	c.mu.Unlock()
}

// forget drops a connection's records.
func (c *segCapture) forget(port uint16) {
	c.mu.Lock()
	delete(c.conns, port)
	c.mu.Unlock()
}

// sampleStalled records both stacks' TCP state for every connection whose
// receiver has had no payload for over a second.
func (c *segCapture) sampleStalled(hs ...*host) {
	c.mu.Lock()
	var ports []uint16
	for p, l := range c.conns {
		if time.Since(l.lastData) > time.Second {
			ports = append(ports, p)
		}
	}
	c.mu.Unlock()
	if len(ports) == 0 {
		return
	}
	states := map[uint16][]string{}
	at := time.Since(c.start).Seconds()
	for i, h := range hs {
		for _, te := range h.s.RegisteredEndpoints() {
			e, ok := te.(*tcp.Endpoint)
			if !ok {
				continue
			}
			id := e.Info().(*stack.TransportEndpointInfo).ID
			p, ok := capKey(id.LocalPort, id.RemotePort)
			if !ok || !slices.Contains(ports, p) {
				continue
			}
			var info tcpip.TCPInfoOption
			e.GetSockOpt(&info)
			rq, _ := e.GetSockOptInt(tcpip.ReceiveQueueSizeOption)
			es := e.Stats().(*tcp.Stats)
			states[p] = append(states[p], fmt.Sprintf("%9.3f host%d %d->%d %v rtt %v rttvar %v rto %v cc %d cwnd %d ssthresh %d rcvq %d sent %d rcvd %d sendErr %d",
				at, i, id.LocalPort, id.RemotePort, e.EndpointState(), info.RTT, info.RTTVar, info.RTO, info.CcState, info.SndCwnd,
				info.SndSsthresh, rq, es.SegmentsSent.Value(), es.SegmentsReceived.Value(), es.SendErrors.SegmentSendToNetworkFailed.Value()))
		}
	}
	// The neighbour tables and ARP counters: a connection whose segments
	// never reach the link endpoint waits on link resolution.
	var nb []string
	for i, h := range hs {
		ents, _ := h.s.Neighbors(1, ipv4.ProtocolNumber)
		arp := h.s.Stats().ARP
		ns := h.s.NICInfo()[1].Stats.Neighbor
		nb = append(nb, fmt.Sprintf("%9.3f host%d neighbours %v arp{requests sent %d dropped %d, replies received %d, requests received %d} unreachableLookups %d",
			at, i, ents, arp.OutgoingRequestsSent.Value(), arp.OutgoingRequestsDropped.Value(), arp.RepliesReceived.Value(),
			arp.RequestsReceived.Value(), ns.UnreachableEntryLookups.Value()))
	}
	c.mu.Lock()
	for p := range states {
		states[p] = append(states[p], nb...)
	}
	for p, s := range states {
		if l := c.conns[p]; l != nil {
			l.states = append(l.states, s...)
		}
	}
	c.mu.Unlock()
}

// save writes a connection's records, states and the faults of its time
// to dir/port-N.txt.
func (c *segCapture) save(dir string, port uint16, took time.Duration, err error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	l := c.conns[port]
	if l == nil {
		return nil
	}
	var b strings.Builder
	from, to := l.began.Sub(c.start), time.Since(c.start)
	fmt.Fprintf(&b, "connection on port %d: %v (%.3f s to %.3f s), err %v\n== faults meanwhile\n", port, took.Round(time.Millisecond), from.Seconds(), to.Seconds(), err)
	for _, f := range c.fault {
		var at float64
		fmt.Sscanf(f, "%f", &at)
		if at >= from.Seconds()-1 && at <= to.Seconds() {
			fmt.Fprintln(&b, f)
		}
	}
	fmt.Fprintln(&b, "== TCP state while no payload arrived for over 1 s")
	for _, s := range l.states {
		fmt.Fprintln(&b, s)
	}
	fmt.Fprintln(&b, "== segments (time, where, ports, flags, seq, ack, payload, window)")
	for _, r := range l.recs {
		fmt.Fprintf(&b, "%9.3f %-10s %5d>%-5d %-6s seq %10d ack %10d len %6d win %5d\n", r.at.Seconds(), r.where, r.sport, r.dport,
			tcpFlags(r.flags), r.seq, r.ack, r.n, r.win)
	}
	return os.WriteFile(filepath.Join(dir, fmt.Sprintf("port-%d.txt", port)), []byte(b.String()), 0o644)
}

func tcpFlags(f uint8) string {
	var s []byte
	for i, c := range "FSRPAUEC" {
		if f&(1<<i) != 0 {
			s = append(s, byte(c))
		}
	}
	return string(s)
}

// tapEndpoint records the TCP segments a stack sends and receives.
type tapEndpoint struct {
	nested.Endpoint
	c    *segCapture
	name string
}

func newTap(child stack.LinkEndpoint, c *segCapture, name string) *tapEndpoint {
	t := &tapEndpoint{c: c, name: name}
	t.Endpoint.Init(child, t)
	return t
}

// WritePackets records what the stack sends (a host-GSO packet as one
// record with its whole payload).
func (t *tapEndpoint) WritePackets(pkts stack.PacketBufferList) (int, tcpip.Error) {
	for _, p := range pkts.AsSlice() {
		if p.NetworkProtocolNumber != 0x0800 {
			continue
		}
		h := append(slices.Clone(p.NetworkHeader().Slice()), p.TransportHeader().Slice()...)
		t.c.ip(t.name+" out", h, p.Data().Size())
	}
	return t.Endpoint.WritePackets(pkts)
}

// DeliverNetworkPacket records what the stack receives.
func (t *tapEndpoint) DeliverNetworkPacket(proto tcpip.NetworkProtocolNumber, p *stack.PacketBuffer) {
	if proto == 0x0800 {
		v := p.ToView()
		b := v.AsSlice()
		if len(b) > 14 && b[0]>>4 != 4 {
			b = b[14:]
		}
		t.c.ip(t.name+" in", b, -1)
		v.Release()
	}
	t.Endpoint.DeliverNetworkPacket(proto, p)
}
