package app

import (
	"errors"
	"fmt"
	"net"
	"sync"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"
	"gvisor.dev/gvisor/pkg/waiter"
)

// endpoint creates an IPv4 endpoint of proto bound to port on the server's
// NIC: the socket is bound to that device (SO_BINDTODEVICE), so every
// interface of a stack runs its own services on the same ports, and to
// s.Addr, which may be unspecified (any address the NIC has, so a new DHCP
// lease needs no rebind). A NIC in a FullAddress alone does not reserve
// the port per device: a wildcard bind on one NIC would collide with any
// other NIC's bind of the same port.
func (s *Server) endpoint(proto tcpip.TransportProtocolNumber, port uint16) (tcpip.Endpoint, *waiter.Queue, error) {
	wq := new(waiter.Queue)
	ep, terr := s.Stack.NewEndpoint(proto, ipv4.ProtocolNumber, wq)
	if terr != nil {
		return nil, nil, errors.New(terr.String())
	}
	if s.NIC != 0 {
		if terr := ep.SocketOptions().SetBindToDevice(int32(s.NIC)); terr != nil {
			ep.Close()
			return nil, nil, fmt.Errorf("bind to NIC %d: %s", s.NIC, terr)
		}
	}
	if terr := ep.Bind(tcpip.FullAddress{NIC: s.NIC, Addr: s.Addr, Port: port}); terr != nil {
		ep.Close()
		return nil, nil, fmt.Errorf("bind %v:%d on NIC %d: %s", s.Addr, port, s.NIC, terr)
	}
	return ep, wq, nil
}

// listenTCP listens on TCP port of the server's NIC (see endpoint).
func (s *Server) listenTCP(port uint16) (net.Listener, error) {
	return s.listenTCPBuf(port, 0, 0)
}

// listenTCPBuf is listenTCP with the receive buffer of every accepted
// connection set to rcvBuf (0: the stack's default): gVisor gives an
// accepted connection its listener's receive buffer; and its send buffer
// to sndBuf (0: the stack's default), which gVisor does not inherit, so
// Accept sets it on each connection. Accepted connections close through
// the server's reaper (closer.go).
func (s *Server) listenTCPBuf(port uint16, rcvBuf, sndBuf int) (net.Listener, error) {
	ep, wq, err := s.endpoint(tcp.ProtocolNumber, port)
	if err != nil {
		return nil, fmt.Errorf("app: listen TCP %d: %w", port, err)
	}
	if rcvBuf > 0 {
		ep.SocketOptions().SetReceiveBufferSize(int64(rcvBuf), true)
	}
	if terr := ep.Listen(Backlog); terr != nil {
		ep.Close()
		return nil, fmt.Errorf("app: listen TCP %d: %s", port, terr)
	}
	if sndBuf <= 0 {
		sndBuf = TCPSendBufferSize
	}
	return &tcpListener{ep: ep, wq: wq, rcvBuf: int64(rcvBuf), sndBuf: int64(sndBuf), reap: s.reaper(), closed: make(chan struct{})}, nil
}

// tcpListener is gonet's TCPListener whose Accept sets each accepted
// connection's send buffer and returns it as a *tcpConn.
type tcpListener struct {
	ep     tcpip.Endpoint
	wq     *waiter.Queue
	rcvBuf int64 // 0: the stack's default
	sndBuf int64
	reap   *reaper
	once   sync.Once
	closed chan struct{}
}

// Accept waits for a connection and returns it.
func (l *tcpListener) Accept() (net.Conn, error) {
	we, ready := waiter.NewChannelEntry(waiter.ReadableEvents)
	l.wq.EventRegister(&we)
	defer l.wq.EventUnregister(&we)
	for {
		n, wq, err := l.ep.Accept(nil)
		if err == nil {
			// Set on every connection, not only where it differs from the
			// stack's default: gVisor auto-tunes a send buffer nobody set
			// up to the stack's maximum (the source's 1 MiB), past what
			// the budget counts (a review found 1 MiB orphans).
			n.SocketOptions().SetSendBufferSize(l.sndBuf, true)
			if l.rcvBuf > 0 {
				// The listener's size reaches the connection without the
				// flag that stops gVisor's receive-buffer auto-tuning
				// (accept.go): a peer that sends fast grew the echo's
				// 16 KiB towards the stack's 512 KiB maximum (a review
				// measured 164 KiB).
				n.SocketOptions().SetReceiveBufferSize(l.rcvBuf, true)
			}
			return &tcpConn{TCPConn: gonet.NewTCPConn(wq, n), ep: n, r: l.reap}, nil
		}
		if _, ok := err.(*tcpip.ErrWouldBlock); !ok {
			return nil, fmt.Errorf("app: accept: %s", err)
		}
		select {
		case <-ready:
		case <-l.closed:
			return nil, net.ErrClosed
		}
	}
}

// Close stops listening.
func (l *tcpListener) Close() error {
	l.once.Do(func() { close(l.closed); l.ep.Close() })
	return nil
}

// Addr returns the listening address.
func (l *tcpListener) Addr() net.Addr {
	a, _ := l.ep.GetLocalAddress()
	return &net.TCPAddr{IP: net.IP(a.Addr.AsSlice()), Port: int(a.Port)}
}

// listenUDP binds UDP port of the server's NIC (see endpoint).
func (s *Server) listenUDP(port uint16) (*gonet.UDPConn, error) {
	ep, wq, err := s.endpoint(udp.ProtocolNumber, port)
	if err != nil {
		return nil, fmt.Errorf("app: bind UDP %d: %w", port, err)
	}
	return gonet.NewUDPConn(wq, ep), nil
}
