package qmetrics

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/quiot/quiot/internal/certs"
	"github.com/quiot/quiot/internal/sysstat"
)

// endpoint is one side of a loopback QUIC test: its counted socket, its
// transport and its tracer.
type endpoint struct {
	conn   CountingPacketConn
	tr     *quic.Transport
	tracer *Tracer
}

func newEndpoint(t *testing.T) *endpoint {
	t.Helper()
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	cc := NewCountingPacketConn(udp)
	e := &endpoint{conn: cc, tr: &quic.Transport{Conn: cc}, tracer: NewTracer(nil)}
	t.Cleanup(func() { e.tr.Close(); udp.Close() })
	return e
}

func tlsConfigs(t testing.TB, alpn string) (server, client *tls.Config) {
	t.Helper()
	cert, err := certs.SelfSigned(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert.TLS.Leaf)
	return &tls.Config{Certificates: []tls.Certificate{cert.TLS}, NextProtos: []string{alpn}},
		&tls.Config{RootCAs: pool, ServerName: "localhost", NextProtos: []string{alpn}}
}

// eventually polls cond until it holds or 5 s pass (a readiness wait for
// datagrams still in flight on loopback, not a timing assertion).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestQUICCounting runs an echo over real quic-go connections on loopback
// with counted sockets and tracers on both sides.
func TestQUICCounting(t *testing.T) {
	srv, cli := newEndpoint(t), newEndpoint(t)
	stls, ctls := tlsConfigs(t, "qmetrics-test")
	const streams = 150 // more than quic-go's default MaxIncomingStreams (100): forces MAX_STREAMS
	const payload = 64 << 10

	ln, err := srv.tr.Listen(stls, &quic.Config{Tracer: srv.tracer.ConnectionTracer})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	srvDone := make(chan *quic.Conn, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		conn, err := ln.Accept(context.Background())
		if err != nil {
			return
		}
		srvDone <- conn
		for {
			s, err := conn.AcceptStream(context.Background())
			if err != nil {
				return
			}
			go func() {
				defer s.Close()
				_, _ = io.Copy(s, s)
			}()
		}
	}()

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn, err := cli.tr.Dial(ctx, srv.conn.LocalAddr(), ctls, &quic.Config{Tracer: cli.tracer.ConnectionTracer})
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, payload)
	for i := range streams {
		s, err := conn.OpenStreamSync(ctx)
		if err != nil {
			t.Fatal(err)
		}
		n := 100
		if i == 0 {
			n = payload // one big transfer, to give GSO something to batch
		}
		if _, err := s.Write(buf[:n]); err != nil {
			t.Fatal(err)
		}
		s.Close()
		got, err := io.ReadAll(s)
		if err != nil || len(got) != n {
			t.Fatalf("stream %d: echoed %d bytes, err %v; want %d", i, len(got), err, n)
		}
	}
	sconn := <-srvDone
	if err := conn.CloseWithError(0, "done"); err != nil {
		t.Fatal(err)
	}
	<-sconn.Context().Done()
	ln.Close()
	wg.Wait()

	// Every datagram one side sent reaches the other on loopback.
	eventually(t, "both sides to agree", func() bool {
		c, s := cli.conn.Stats(), srv.conn.Stats()
		return c.BytesSent == s.BytesReceived && s.BytesSent == c.BytesReceived &&
			c.DatagramsSent == s.DatagramsReceived && s.DatagramsSent == c.DatagramsReceived
	})
	cw, sw := cli.conn.Stats(), srv.conn.Stats()
	t.Logf("client wire %+v", cw)
	t.Logf("server wire %+v", sw)
	if cw.BytesSent < streams*100+payload || cw.DatagramsSent == 0 || cw.BytesReceived < streams*100+payload {
		t.Errorf("client wire stats too small: %+v", cw)
	}

	ct, st := cli.tracer.Stats(), srv.tracer.Stats()
	t.Logf("client trace %+v", ct)
	t.Logf("server trace %+v", st)
	for name, ts := range map[string]TraceStats{"client": ct, "server": st} {
		if ts.Connections != 1 || ts.HandshakesCompleted != 1 {
			t.Errorf("%s: connections %d, handshakes %d; want 1, 1", name, ts.Connections, ts.HandshakesCompleted)
		}
		for _, f := range []string{"ACK", "STREAM", "CRYPTO"} {
			if ts.FramesSent[f] == 0 || ts.FramesReceived[f] == 0 {
				t.Errorf("%s: no %s frames sent/received: %v / %v", name, f, ts.FramesSent, ts.FramesReceived)
			}
		}
	}
	if st.FramesSent["MAX_STREAMS"] == 0 || ct.FramesReceived["MAX_STREAMS"] == 0 {
		t.Errorf("no MAX_STREAMS from server to client: server sent %d, client received %d",
			st.FramesSent["MAX_STREAMS"], ct.FramesReceived["MAX_STREAMS"])
	}
	if ct.FramesSent["HANDSHAKE_DONE"] != 0 || st.FramesSent["HANDSHAKE_DONE"] == 0 {
		t.Errorf("HANDSHAKE_DONE: client sent %d, server sent %d; want 0, >= 1", ct.FramesSent["HANDSHAKE_DONE"], st.FramesSent["HANDSHAKE_DONE"])
	}
	// Without loss, what one side's tracer sent the other's received,
	// except for packets the receiver dropped (duplicates after a PTO).
	for f, n := range ct.FramesSent {
		got := st.FramesReceived[f]
		if got > n || (got != n && st.PacketsDropped == 0) {
			t.Errorf("frame %s: client sent %d, server received %d (server dropped %d packets)", f, n, got, st.PacketsDropped)
		}
	}
	// QUIC packet bytes (tracer) and UDP payload bytes (socket) agree, up
	// to padding that belongs to no logged packet.
	if ct.PacketBytesSent > cw.BytesSent || float64(ct.PacketBytesSent) < 0.99*float64(cw.BytesSent) {
		t.Errorf("client: tracer packet bytes sent %d, socket bytes sent %d", ct.PacketBytesSent, cw.BytesSent)
	}
	if ct.Retransmitted > ct.PacketsLost+ct.PTOCount*2 || st.Retransmitted > st.PacketsLost+st.PTOCount*2 {
		t.Errorf("retransmissions without loss or PTO: client %d (lost %d, pto %d), server %d (lost %d, pto %d)",
			ct.Retransmitted, ct.PacketsLost, ct.PTOCount, st.Retransmitted, st.PacketsLost, st.PTOCount)
	}
	if gsoSupported(t) && cw.GSOWrites == 0 && sw.GSOWrites == 0 {
		t.Error("GSO is supported here but no GSO writes were counted: the wrapper disabled quic-go's fast path?")
	}
}

// TestHTTP3Frames checks that HTTP/3 frames are counted through the same
// tracer, on a real http3 server and client.
func TestHTTP3Frames(t *testing.T) {
	srv, cli := newEndpoint(t), newEndpoint(t)
	stls, ctls := tlsConfigs(t, http3.NextProtoH3)
	ln, err := srv.tr.ListenEarly(stls, &quic.Config{Tracer: srv.tracer.ConnectionTracer})
	if err != nil {
		t.Fatal(err)
	}
	hs := &http3.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Write(b)
	})}
	go hs.ServeListener(ln)
	t.Cleanup(func() { hs.Close() })

	rt := &http3.Transport{
		TLSClientConfig: ctls,
		QUICConfig:      &quic.Config{Tracer: cli.tracer.ConnectionTracer},
		Dial: func(ctx context.Context, addr string, tc *tls.Config, qc *quic.Config) (*quic.Conn, error) {
			ua, err := net.ResolveUDPAddr("udp", addr)
			if err != nil {
				return nil, err
			}
			return cli.tr.DialEarly(ctx, ua, tc, qc)
		},
	}
	t.Cleanup(func() { rt.Close() })
	client := &http.Client{Transport: rt, Timeout: 10 * time.Second}
	url := "https://localhost:" + itoa(srv.conn.LocalAddr().(*net.UDPAddr).Port) + "/x"
	for range 5 {
		resp, err := client.Post(url, "application/octet-stream", http.NoBody)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	ct := cli.tracer.Stats()
	if ct.H3FramesSent["HEADERS"] < 5 || ct.H3FramesReceived["HEADERS"] < 5 || ct.H3HeaderBytesSent == 0 {
		t.Errorf("client HTTP/3 frames: sent %v (%d header bytes), received %v", ct.H3FramesSent, ct.H3HeaderBytesSent, ct.H3FramesReceived)
	}
	// The client's control stream (SETTINGS) is written asynchronously.
	eventually(t, "the client's SETTINGS frame", func() bool { return cli.tracer.Stats().H3FramesSent["SETTINGS"] == 1 })
}

func itoa(i int) string { return net.JoinHostPort("", itoaDec(i))[1:] }

func itoaDec(i int) string {
	if i == 0 {
		return "0"
	}
	var b []byte
	for ; i > 0; i /= 10 {
		b = append([]byte{byte('0' + i%10)}, b...)
	}
	return string(b)
}

// TestPlainPacketConn checks the fallback wrapper for a non-UDPConn.
func TestPlainPacketConn(t *testing.T) {
	a, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ca := NewCountingPacketConn(struct{ net.PacketConn }{a}) // hides *net.UDPConn
	if _, ok := ca.(interface{ ReadBatch() }); ok {
		t.Fatal("plain wrapper must not claim batch reads")
	}
	if ca.Unwrap() == nil {
		t.Fatal("Unwrap returned nil")
	}
	for range 3 {
		if _, err := ca.WriteTo(make([]byte, 100), b.LocalAddr()); err != nil {
			t.Fatal(err)
		}
	}
	buf := make([]byte, 2000)
	for range 3 {
		if _, _, err := b.ReadFrom(buf); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.WriteTo(make([]byte, 50), a.LocalAddr()); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ca.ReadFrom(buf); err != nil {
		t.Fatal(err)
	}
	want := WireStats{BytesSent: 300, DatagramsSent: 3, BytesReceived: 50, DatagramsReceived: 1}
	if got := ca.Stats(); got != want {
		t.Errorf("Stats() = %+v, want %+v", got, want)
	}
	if got := want.Sub(WireStats{BytesSent: 100, DatagramsSent: 1}); got.Bytes() != 250 || got.Datagrams() != 3 {
		t.Errorf("Sub: %+v", got)
	}
}

func TestLatency(t *testing.T) {
	l := NewLatency(10)
	if got := l.Summary(); got != (LatencyMs{}) {
		t.Errorf("empty Summary() = %+v", got)
	}
	for i := 1; i <= 100; i++ {
		l.Record(time.Duration(i) * time.Millisecond)
	}
	l.Record(-time.Millisecond)
	l.Record(2 * time.Hour)
	s := l.Summary()
	tests := []struct {
		name      string
		got, want float64
	}{
		{"p50", s.P50, 50},
		// 102 values: 0 (the negative one), 1..100 ms, 1 h (clamped).
		{"p95", s.P95, 96},
		{"p99", s.P99, 100},
		{"max", s.Max, 3600_000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if d := tt.got - tt.want; d < -tt.want*0.002 || d > tt.want*0.002 {
				t.Errorf("%s = %v ms, want %v ms (+-0.2%%)", tt.name, tt.got, tt.want)
			}
		})
	}
	if l.Count() != 102 || l.Negatives() != 1 {
		t.Errorf("count %d negatives %d", l.Count(), l.Negatives())
	}
	if got := l.Samples(); len(got) != 10 || got[0] != 1 {
		t.Errorf("Samples() = %v", got)
	}
	m := NewLatency(0)
	m.Merge(l)
	m.Merge(m)
	if m.Count() != 102 || m.Summary() != s || len(m.Samples()) != 0 {
		t.Errorf("merged: count %d summary %+v", m.Count(), m.Summary())
	}
}

func TestRoleMetricsFile(t *testing.T) {
	m := NewRoleMetrics("pub", "h3")
	m.SetWire(WireStats{BytesSent: 10, BytesReceived: 5, DatagramsSent: 2, DatagramsReceived: 1})
	m.SetTrace(TraceStats{PacketsLost: 3, PTOCount: 1, FramesSent: map[string]uint64{"ACK": 4}, FramesReceived: map[string]uint64{}})
	now := time.Now()
	m.SetUsage(sysstat.Between(sysstat.Snapshot{Time: now}, sysstat.Snapshot{Time: now.Add(time.Second), User: 200 * time.Millisecond, PeakRSSKiB: 900}), 100)
	l := NewLatency(-1)
	l.Record(5 * time.Millisecond)
	m.SetLatency(l, true)
	m.SetDelivery(100, 50, 2*time.Second)
	m.HandshakeMs = Ms(1500 * time.Microsecond)
	path := filepath.Join(t.TempDir(), "m.json")
	if err := m.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	got, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		name      string
		got, want float64
	}{
		{"wire_bytes", float64(got.WireBytes), 15},
		{"wire_datagrams", float64(got.WireDatagrams), 3},
		{"cpu_ms_per_msg", got.CPUMsPerMsg, 2},
		{"cpu_pct", got.CPUPct, 20},
		{"peak_rss_kib", float64(got.PeakRSSKiB), 900},
		{"latency p50", got.LatencyMs.P50, 5},
		{"throughput", got.ThroughputMsgsS, 25},
		{"delivery_ratio", got.DeliveryRatio, 0.5},
		{"completion_s", got.CompletionS, 2},
		{"handshake_ms", got.HandshakeMs, 1.5},
		{"packets_lost", float64(got.Diag.PacketsLost), 3},
		{"frames_sent.ACK", float64(got.Diag.FramesSent["ACK"]), 4},
		{"latencies", float64(len(got.LatenciesMs)), 1},
	}
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			if d := c.got - c.want; d < -c.want*0.002 || d > c.want*0.002 {
				t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
			}
		})
	}
	if err := m.WriteFile(filepath.Join(t.TempDir(), "missing", "m.json")); err == nil {
		t.Error("WriteFile into a missing directory: no error")
	}
	if _, err := ReadFile(filepath.Join(t.TempDir(), "none.json")); err == nil {
		t.Error("ReadFile of a missing file: no error")
	}
}

func TestSpansAdd(t *testing.T) {
	tests := []struct {
		name        string
		ranges      [][2]int64
		want        spans
		wantOverlap []bool
	}{
		{"in order", [][2]int64{{0, 10}, {10, 20}, {20, 25}}, spans{{0, 25}}, []bool{false, false, false}},
		{"scrambled", [][2]int64{{64, 1224}, {0, 64}, {1224, 1530}}, spans{{0, 1530}}, []bool{false, false, false}},
		{"gap then fill", [][2]int64{{0, 10}, {20, 30}, {10, 20}}, spans{{0, 30}}, []bool{false, false, false}},
		{"resend", [][2]int64{{0, 100}, {0, 100}}, spans{{0, 100}}, []bool{false, true}},
		{"partial overlap", [][2]int64{{0, 10}, {20, 30}, {5, 25}}, spans{{0, 30}}, []bool{false, false, true}},
		{"disjoint", [][2]int64{{50, 60}, {0, 10}, {30, 40}}, spans{{0, 10}, {30, 40}, {50, 60}}, []bool{false, false, false}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s spans
			for i, r := range tt.ranges {
				var ov bool
				s, ov = s.add(r[0], r[1])
				if ov != tt.wantOverlap[i] {
					t.Errorf("add %v: overlap %v, want %v", r, ov, tt.wantOverlap[i])
				}
			}
			if len(s) != len(tt.want) {
				t.Fatalf("spans = %v, want %v", s, tt.want)
			}
			for i := range s {
				if s[i] != tt.want[i] {
					t.Fatalf("spans = %v, want %v", s, tt.want)
				}
			}
		})
	}
}
