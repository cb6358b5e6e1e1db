package app

// The memory budget: what peers on the network can make the services
// hold, at most, whatever they do. It is the sum, over every place a
// service gives a connection (Limits), of that connection's TCP buffers
// in both directions and its goroutine, plus the services' fixed
// buffers. A peer cannot make a service hold more: lines and requests
// are bounded per read (the source's line, HTTP's headers, iperf3's
// JSON), connections and waiters per service, and each connection's
// buffers by the stack's options (newBareStack).
const (
	// TCPSendBufferSize is every TCP connection's send buffer (the
	// stack's default and maximum: no auto-tuning past it). 128 KiB is a
	// window that fills a 1 Gbit/s link at 1 ms of round trip (a LAN) and
	// a 100 Mbit/s ENET at 10 ms. gVisor's defaults (1 MiB, auto-tuned to
	// 4 MiB here before) let 64 never-reading source clients pin 250 MiB.
	TCPSendBufferSize = 128 << 10
	// sourceSendBuffer is the source's send buffer (set on each
	// connection it accepts; the stack's maximum): the source is the
	// bulk sender the cost figures measure, and a smaller buffer cuts
	// gVisor's TSO bursts: guest->host sg+tso cost 4.15-4.19 M
	// instructions per MiB with 128 KiB, 3.95-3.99 M with 512 KiB and
	// 3.90-3.91 M with 1 MiB, against 3.84-3.92 M before the budget
	// (go run ./qemu/cmd/tamanic-cost -warm -runs 2 -cfg tx:tso:512).
	// Its places are few (MaxConns), so the budget holds it.
	sourceSendBuffer = 1 << 20
	// TCPReceiveBufferSize is every TCP connection's receive buffer but
	// the source's. It stays at 512 KiB: with 128 KiB the firmware's
	// stack took 2 to 23 retransmission timeouts, not one, to recover from
	// a lost burst (TestTailLossRecoversAtOnce; 512 KiB: one or two, as
	// the 1 MiB before). Why gVisor recovers worse with smaller windows
	// is not analysed here.
	TCPReceiveBufferSize = 512 << 10
	// sourceReceiveBuffer is the source's receive buffer (set on its
	// listener, which accepted connections inherit): it reads a line,
	// and then nothing until it has sent what was asked, so a peer can
	// make it hold no more than this unread; gVisor grows a receive
	// buffer only by what the application copied out.
	sourceReceiveBuffer = 16 << 10
	// connOverhead is what a connection holds beside its buffers: its
	// goroutine's stack, the endpoint and gonet structures, and the
	// per-segment overhead gVisor charges beyond the payload bytes
	// (measured: TestTCPBuffersBounded).
	connOverhead = 64 << 10
	// timeWaitSize is what an endpoint in FIN-WAIT-2 or TIME-WAIT holds:
	// its tcp.Endpoint and registration. Measured: 1,000 connections the
	// source closed first grew the live heap by 11 KiB each, the client
	// stack's closed endpoints included (go test ./firmware/app, a
	// throwaway test beside TestTimeWaitBounded).
	timeWaitSize = 12 << 10
	// fixedBuffers are the services' own buffers: the echo's and
	// iperf3's 64 KiB datagram buffers, the source's 64 KiB pattern, an
	// iperf3 test's payload block (1 MiB at most, -l) and the two
	// echoes' busy-time histograms (busyhist.go).
	fixedBuffers = 3*64<<10 + 1<<20 + 2*busyBuckets*4
	// MemoryBudget is the budget the default limits must fit in: 176
	// MiB, 37% of the EVK's 480 MiB heap, leaving the rest to the
	// drivers' rings and the stack's own state (it was 128 MiB until the
	// source's send buffer went back to 1 MiB, which adds 56 MiB over its
	// 64 places). The TrustZone image's Normal World has 128 MiB of RAM in
	// all, so its limits would have to be smaller; they are not yet.
	MemoryBudget = 176 << 20
)

// Split returns one interface's share of l when n interfaces each run
// the services (the i.MX7D runs them on ENET1, the 82574L and the
// ConnectX), so that the n sets together fit the budget one set of l
// fits: every bound on places, lingering connections and TIME-WAIT
// endpoints is divided by n, down to a floor that keeps each service
// usable (4 sink, source and HTTP places, 2 TCP echo places, 4 iperf3 streams, 2 cookie
// slots, 1 waiter, 4 orphans, 64 TIME-WAIT endpoints). Each server used
// to take the full limits, three budgets on the i.MX7D.
func (l Limits) Split(n int) Limits {
	l = l.withDefaults()
	if n <= 1 {
		return l
	}
	div := func(v *int, floor int) { *v = max(*v/n, floor) }
	div(&l.MaxConns, 4)
	div(&l.HTTPMaxConns, 4)
	div(&l.EchoMaxConns, 2)
	div(&l.IperfMaxStreams, 4)
	div(&l.IperfMaxPending, 2)
	div(&l.IperfMaxWaiters, 1)
	div(&l.MaxOrphans, 4)
	div(&l.MaxTimeWait, 64)
	return l
}

// Places returns how many TCP connections the services may hold at once
// under l: sink and source, HTTP, the TCP echo, and iperf3's control connection, its
// streams, the connections waiting for their cookie and those waiting
// for a test to end.
func (l Limits) Places() int {
	l = l.withDefaults()
	return 2*l.MaxConns + l.HTTPMaxConns + l.EchoMaxConns + l.iperfPlaces()
}

func (l Limits) iperfPlaces() int {
	return 1 + l.IperfMaxStreams + l.IperfMaxPending + l.IperfMaxWaiters
}

// Budget returns the most memory peers can make the services hold under
// l, in bytes (see MemoryBudget): each place's buffers in both
// directions and overhead, plus what its service reads into (the sink's
// 64 KiB, HTTP's headers and bufio, an iperf3 stream's 128 KiB); the
// closed connections that linger without a place (a send buffer each)
// and the endpoints in TIME-WAIT (closer.go). A closed connection that
// lingers with a place is within its place's share.
func (l Limits) Budget() int64 {
	l = l.withDefaults()
	conn := int64(TCPSendBufferSize + TCPReceiveBufferSize + connOverhead)
	source := int64(sourceSendBuffer + sourceReceiveBuffer + connOverhead)
	return int64(l.MaxConns)*(conn+64<<10) + // sink
		int64(l.MaxConns)*source + // source
		int64(l.HTTPMaxConns)*(conn+int64(l.MaxHeaderBytes)+8<<10) + // HTTP
		int64(l.iperfPlaces())*(conn+128<<10) + // iperf3
		int64(l.EchoMaxConns)*(2*echoBufferSize+connOverhead+echoReadSize) + // TCP echo
		int64(l.MaxOrphans)*(TCPSendBufferSize+connOverhead) +
		int64(l.MaxTimeWait)*timeWaitSize +
		fixedBuffers
}
