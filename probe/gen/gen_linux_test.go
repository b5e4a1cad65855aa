//go:build linux

package gen_test

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/quiot/quiot/probe/gen"
	"github.com/quiot/quiot/probe/netns"
	"github.com/quiot/quiot/probe/netns/netnstest"
)

func TestRunInNamespace(t *testing.T) {
	netnstest.NeedRoot(t)
	p := netnstest.NewPath(t, true)
	dst := netip.AddrPortFrom(p.Dst, 9100)
	sink, err := gen.NewSink(p.SinkNS, dst)
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	st, err := gen.Run(context.Background(), gen.Options{Dst: dst, Namespace: p.GenNS, Rate: 5000, Flows: 3,
		Duration: 100 * time.Millisecond, Warmup: 20 * time.Millisecond, Size: 64})
	if err != nil {
		t.Fatal(err)
	}
	if st.Sent < 100 || st.Errors != 0 || st.WarmupSent == 0 || st.WarmupSent >= st.Sent || len(st.Flows) != 3 {
		t.Errorf("stats %+v", st)
	}
	seen := map[netip.AddrPort]bool{}
	for _, f := range st.Flows {
		if f.Addr() != p.Src || seen[f] {
			t.Errorf("flow source %v (want %v, distinct)", f, p.Src)
		}
		seen[f] = true
	}
}

func TestRunNoSink(t *testing.T) {
	netnstest.NeedRoot(t)
	p := netnstest.NewPath(t, true)
	// Nothing listens: ICMP port unreachable makes later writes fail; the
	// generator counts the errors instead of stopping.
	st, err := gen.Run(context.Background(), gen.Options{Dst: netip.AddrPortFrom(p.Dst, 9101), Namespace: p.GenNS,
		Rate: 2000, Duration: 50 * time.Millisecond})
	t.Logf("sent %d errors %d first %v err %v", st.Sent, st.Errors, st.FirstError, err)
	if st.Errors == 0 {
		t.Error("no write errors without a sink")
	}
}

func TestRunBadNamespace(t *testing.T) {
	netnstest.NeedRoot(t)
	_, err := gen.Run(context.Background(), gen.Options{Dst: netip.MustParseAddrPort("10.0.0.1:9"), Namespace: "no-such-ns-x"})
	if err == nil {
		t.Fatal("no error")
	}
	t.Log(err)
}

// BenchmarkMaxRate reports the highest rate the generator reaches from a
// namespace through a veth pair and a bridge into a non-reading sink.
func BenchmarkMaxRate(b *testing.B) { benchMaxRate(b, 9102, false) }

// benchMaxRate is BenchmarkMaxRate sending to port, with the AF_PACKET
// injector when inject is set.
func benchMaxRate(b *testing.B, port uint16, inject bool) {
	netnstest.NeedRoot(b)
	p := netnstest.NewPath(b, true)
	dst := netip.AddrPortFrom(p.Dst, port)
	sink, err := gen.NewSink(p.SinkNS, dst)
	if err != nil {
		b.Fatal(err)
	}
	defer sink.Close()
	o := gen.Options{Dst: dst, Namespace: p.GenNS, Rate: 5e6, Size: 64, Duration: time.Second}
	if inject {
		o.Interface = p.GenDev
	}
	var st gen.Stats
	for b.Loop() {
		st, err = gen.Run(context.Background(), o)
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(st.Sent)/st.End.Sub(st.Start).Seconds(), "pps")
}

// TestInjectInNamespace sends through the AF_PACKET injector (neighbour MAC
// from the namespace's permanent entry) and checks the sink's stack accepts
// the frames: UDP datagrams with the probe header arrive at a reading socket.
func TestInjectInNamespace(t *testing.T) {
	netnstest.NeedRoot(t)
	p := netnstest.NewPath(t, true)
	dst := netip.AddrPortFrom(p.Dst, 9103)
	var conn *net.UDPConn
	err := netns.Do(p.SinkNS, func() error {
		var err error
		conn, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(dst))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	st, err := gen.Run(context.Background(), gen.Options{Dst: dst, Namespace: p.GenNS, Interface: p.GenDev,
		Rate: 2000, Count: 20, Flows: 2, Size: 100, Duration: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if st.Sent != 20 || len(st.Flows) != 2 || st.Flows[0].Addr() != p.Src {
		t.Fatalf("stats %+v", st)
	}
	buf := make([]byte, 2048)
	for i := 0; i < 20; i++ {
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, from, err := conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			t.Fatalf("datagram %d: %v", i, err)
		}
		h, err := gen.Decode(buf[:n])
		if err != nil || n != 100-42 || from.Addr() != p.Src {
			t.Fatalf("datagram %d from %v: %d bytes, %v", i, from, n, err)
		}
		if from.Port() != st.Flows[h.Flow].Port() {
			t.Errorf("seq %d flow %d from port %d", h.Seq, h.Flow, from.Port())
		}
	}
}

func TestInjectErrors(t *testing.T) {
	netnstest.NeedRoot(t)
	p := netnstest.NewPath(t, true)
	tests := []struct {
		name string
		o    gen.Options
	}{
		{"no such interface", gen.Options{Dst: netip.AddrPortFrom(p.Dst, 9), Namespace: p.GenNS, Interface: "nosuch0"}},
		{"no neighbour", gen.Options{Dst: netip.MustParseAddrPort("10.201.0.77:9"), Namespace: p.GenNS, Interface: p.GenDev}},
		{"ipv6", gen.Options{Dst: netip.MustParseAddrPort("[fd00::1]:9"), Namespace: p.GenNS, Interface: p.GenDev}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := gen.Run(context.Background(), tt.o)
			if err == nil {
				t.Fatal("no error")
			}
			t.Log(err)
		})
	}
}

// BenchmarkMaxRateInject is BenchmarkMaxRate with the AF_PACKET injector.
func BenchmarkMaxRateInject(b *testing.B) { benchMaxRate(b, 9104, true) }
