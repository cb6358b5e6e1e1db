package fec_test

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/tamanic/tamanic/fec"
	"github.com/tamanic/tamanic/fec/fectest"
	"github.com/tamanic/tamanic/internal/pkttest"
	"github.com/tamanic/tamanic/tso"
)

// bigPacket returns the header and payload of one large TCP or UDP packet
// built by gopacket, with gVisor's partial pseudo-header sum replaced by
// garbage (the driver must not trust it).
func bigPacket(t testing.TB, s frameSpec, rng *rand.Rand) (hdr, payload []byte) {
	f := build(t, s, [6]byte{2, 0, 0, 0, 0, 9}, rng)
	p := gopacket.NewPacket(f, layers.LayerTypeEthernet, gopacket.Default)
	n := 0
	for _, l := range p.Layers() {
		n += len(l.LayerContents())
		if l.LayerType() == layers.LayerTypeTCP || l.LayerType() == layers.LayerTypeUDP {
			break
		}
	}
	hdr, payload = bytes.Clone(f[:n]), f[n:n+s.payload]
	_, l4 := csumOffsets(t, f)
	hdr[l4], hdr[l4+1] = 0x12, 0x34
	return hdr, payload
}

func TestTransmitGSOPutsValidSegmentsOnTheWire(t *testing.T) {
	for _, soc := range []fec.SoC{fec.IMX6UL, fec.IMX7D} {
		for _, legacy := range []bool{false, true} {
			for _, sp := range []frameSpec{{payload: 64000}, {v6: true, payload: 30000}, {vlan: true, payload: 5000}, {payload: 0}, {payload: 100}} {
				r, tp := newTapRig(t, fectest.RigOptions{SoC: soc, Config: func(c *fec.Config) { c.LegacyBD = legacy; c.TxRing = 512 }})
				rng := rand.New(rand.NewPCG(uint64(soc), uint64(sp.payload)))
				hdr, pay := bigPacket(t, sp, rng)
				vs := [][]byte{}
				for _, v := range [][]byte{pay[:len(pay)/3], pay[len(pay)/3:]} {
					vs = append(vs, scatter(rng, v, 1)...)
				}
				mss := 1448
				if sp.v6 {
					mss = 1428
				}
				if err := r.NIC.TransmitGSO(hdr, vs, tso.Options{Type: tso.TCP, MSS: mss, NeedsCsum: true}, "pkt"); err != nil {
					t.Fatal(err)
				}
				r.NIC.Reclaim()
				frames := tp.take()
				var got []byte
				for i, f := range frames {
					if len(f) > 1518 {
						t.Fatalf("segment %d is %d bytes", i, len(f))
					}
					if err := pkttest.Checksums(f); err != nil {
						t.Fatalf("%v legacy=%v %+v: segment %d: %v", soc, legacy, sp, i, err)
					}
					tc := gopacket.NewPacket(f, layers.LayerTypeEthernet, gopacket.Default).Layer(layers.LayerTypeTCP).(*layers.TCP)
					got = append(got, tc.Payload...)
				}
				if !bytes.Equal(got, pay) {
					t.Fatalf("%+v: payload does not reassemble (%d of %d)", sp, len(got), len(pay))
				}
				if want := max(1, (len(pay)+mss-1)/mss); len(frames) != want {
					t.Fatalf("%d segments, want %d", len(frames), want)
				}
				d := r.Completions()
				if len(d) != 1 || d[0].Cookie != "pkt" || d[0].Err != nil {
					t.Fatalf("completions %+v", d)
				}
				st := r.NIC.Stats().Tx
				if sp.payload > 10000 && float64(st.Copied)/float64(sp.payload) > 0.02 {
					t.Fatalf("%v: copied %d payload bytes of %d", soc, st.Copied, sp.payload)
				}
				if l := r.Mem.LiveMappings(); len(l) != 0 || r.NIC.TxFree() != 512 {
					t.Fatalf("leak: %v, %d free", l, r.NIC.TxFree())
				}
			}
		}
	}
}

func TestTransmitGSOUDPFragmentsReachAReceiverWhole(t *testing.T) {
	a := fectest.NewRig(t, fectest.RigOptions{})
	b := fectest.NewRig(t, fectest.RigOptions{MAC: [6]byte{2, 0, 0, 0, 0, 9}, Config: func(c *fec.Config) { c.Copybreak = -1 }})
	fectest.Connect(a.Model, b.Model)
	rng := rand.New(rand.NewPCG(1, 1))
	hdr, pay := bigPacket(t, frameSpec{udp: true, payload: 8192}, rng)
	// A datagram to fragment: DF must be clear.
	hdr[14+6] = 0
	if err := a.NIC.TransmitGSO(hdr, [][]byte{pay}, tso.Options{Type: tso.UDPFragment, MSS: 1480}, nil); err != nil {
		t.Fatal(err)
	}
	var data []byte
	for {
		p, err := b.NIC.Receive()
		if err != nil {
			t.Fatal(err)
		}
		if p == nil {
			break
		}
		v4 := gopacket.NewPacket(p.Data, layers.LayerTypeEthernet, gopacket.Default).Layer(layers.LayerTypeIPv4).(*layers.IPv4)
		if int(v4.FragOffset)*8 != len(data) {
			t.Fatalf("fragment at %d, expected %d", v4.FragOffset*8, len(data))
		}
		data = append(data, v4.Payload...)
		p.Release()
	}
	if !bytes.Equal(data[8:], pay) {
		t.Fatalf("reassembled %d bytes", len(data))
	}
}

func TestTransmitGSOBackPressureAndErrors(t *testing.T) {
	r, tp := newTapRig(t, fectest.RigOptions{Config: func(c *fec.Config) { c.TxRing = 64 }})
	rng := rand.New(rand.NewPCG(2, 2))
	hdr, pay := bigPacket(t, frameSpec{payload: 64000}, rng)
	if err := r.NIC.TransmitGSO(hdr, [][]byte{pay}, tso.Options{Type: tso.TCP, MSS: 1448}, nil); !errors.Is(err, fec.ErrFrameTooLong) {
		t.Fatalf("64 KiB on a 64-descriptor ring: %v", err)
	}
	small, spay := bigPacket(t, frameSpec{payload: 20000}, rng)
	r.Model.SetFaults(fectest.Faults{TxStalled: true})
	n := 0
	var err error
	for ; err == nil; n++ {
		err = r.NIC.TransmitGSO(small, [][]byte{spay}, tso.Options{Type: tso.TCP, MSS: 1448}, n)
	}
	if !errors.Is(err, fec.ErrRingFull) {
		t.Fatalf("got %v", err)
	}
	r.Model.SetFaults(fectest.Faults{})
	for r.NIC.TxFree() < 64 {
		r.Model.Write32(fec.ENETx_TDAR, fec.DAR_ACTIVE)
		r.NIC.Reclaim()
	}
	if got := len(tp.take()); got != (n-1)*14 {
		t.Fatalf("%d segments on the wire for %d packets", got, n-1)
	}
	if err := r.NIC.TransmitGSO(small, [][]byte{spay}, tso.Options{Type: tso.TCP, MSS: tso.MinTCPMSS - 1}, nil); !errors.Is(err, tso.ErrMSS) {
		t.Fatalf("tiny MSS: %v", err)
	}
	if err := r.NIC.TransmitGSO(small, [][]byte{spay}, tso.Options{Type: tso.TCP, MSS: 9000}, nil); !errors.Is(err, fec.ErrFrameTooLong) {
		t.Fatalf("MSS above the MTU: %v", err)
	}
	if st := r.NIC.Stats().Tx; st.GSOErrors != 3 || st.GSOPackets != uint64(n-1) {
		t.Fatalf("stats %+v", st)
	}
}
