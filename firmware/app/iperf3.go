package app

import (
	"fmt"

	"github.com/tamanic/tamanic/iperf3"
)

// IperfPort is where the iperf3 server listens, on TCP and UDP alike, so
// that `iperf3 -c <board>` works with the stock client.
const IperfPort = 5201

// StartIperf3 serves iperf3 tests on TCP and UDP IperfPort in a background
// goroutine. The CPU utilisation it reports to clients is the board's
// own: wall-clock time minus Controls.IdleNanoseconds over the test, all
// of it reported as user time (bare metal has no user/kernel split).
func (s *Server) StartIperf3() (*iperf3.Server, error) {
	l, err := s.listenTCP(IperfPort)
	if err != nil {
		return nil, fmt.Errorf("app: iperf3: %w", err)
	}
	u, err := s.listenUDP(IperfPort)
	if err != nil {
		l.Close()
		return nil, fmt.Errorf("app: iperf3: %w", err)
	}
	lim := s.limits()
	srv := iperf3.NewServer(l, u, iperf3.Config{
		CPU:        iperf3.IdleCPU{Boot: s.Boot, Idle: s.Ctl.IdleNanoseconds},
		MaxStreams: lim.IperfMaxStreams,
		MaxPending: lim.IperfMaxPending,
		MaxWaiters: lim.IperfMaxWaiters,
	})
	go srv.Serve()
	return srv, nil
}
