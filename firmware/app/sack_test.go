package app

import (
	"encoding/binary"
	"io"
	"sync"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/link/nested"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// tailDropper loses, once each, the data segments sent in the last 100 KiB
// of an n-byte stream but those reaching its last 200 bytes: a burst lost
// to a full RX ring except its short last segment.
type tailDropper struct {
	nested.Endpoint
	n       int64
	mu      sync.Mutex
	isn     uint32
	seen    map[uint32]bool
	dropped int
}

func (d *tailDropper) WritePackets(pkts stack.PacketBufferList) (int, tcpip.Error) {
	var keep stack.PacketBufferList
	for _, p := range pkts.AsSlice() {
		if d.lose(p) {
			continue
		}
		p.IncRef()
		keep.PushBack(p)
	}
	defer keep.DecRef()
	if keep.Len() == 0 {
		return pkts.Len(), nil
	}
	if _, err := d.Endpoint.WritePackets(keep); err != nil {
		return 0, err
	}
	return pkts.Len(), nil
}

func (d *tailDropper) lose(p *stack.PacketBuffer) bool {
	th := p.TransportHeader().Slice()
	if p.NetworkProtocolNumber != ipv4.ProtocolNumber || len(th) < 20 {
		return false
	}
	seq := binary.BigEndian.Uint32(th[4:])
	d.mu.Lock()
	defer d.mu.Unlock()
	if th[13]&0x02 != 0 {
		d.isn = seq + 1
		return false
	}
	size := int64(p.Data().Size())
	off := int64(seq - d.isn)
	if size == 0 || off < d.n-100<<10 || off+size > d.n-200 || d.seen[seq] {
		return false
	}
	d.seen[seq] = true
	d.dropped++
	return true
}

// TestTailLossRecoversAtOnce: the firmware's stack recovers from the loss
// that stalled the host soak's transfers for minutes (issue 17) with one
// retransmission timeout. gVisor turns SACK on by default, and after a
// timeout its SACK recovery counts the lost flight as still in the pipe
// and sends a segment or two per timeout (34 timeouts here; netstack's
// TestGVisorTailLossCrawlsWithSACK on gVisor's own endpoints). NewStack
// turns SACK off, so the timeout resends the flight in slow start.
func TestTailLossRecoversAtOnce(t *testing.T) {
	const total = 1 << 20
	d := &tailDropper{n: total, seen: map[uint32]bool{}}
	s2, l, dial := stackPair(t, func(e stack.LinkEndpoint) stack.LinkEndpoint {
		d.Endpoint.Init(e, d)
		return d
	})
	got := make(chan int64, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			got <- -1
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(time.Minute))
		n, _ := io.Copy(io.Discard, c)
		got <- n
	}()
	c := dial()
	if _, err := c.Write(make([]byte, total)); err != nil {
		t.Fatal(err)
	}
	c.Close()
	if n := <-got; n != total {
		t.Fatalf("received %d of %d bytes", n, total)
	}
	st := s2.Stats().TCP
	d.mu.Lock()
	dropped := d.dropped
	d.mu.Unlock()
	t.Logf("%d segments lost once; sender: %d retransmission timeouts, %d retransmits, %d SACK recoveries",
		dropped, st.Timeouts.Value(), st.Retransmits.Value(), st.SACKRecovery.Value())
	if dropped < 50 {
		t.Fatalf("only %d segments dropped: the loss pattern did not happen", dropped)
	}
	if to := st.Timeouts.Value(); to > 3 {
		t.Errorf("the sender crawled on %d retransmission timeouts after the loss (one expected)", to)
	}
}
