package promexport

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/quic-go/quic-go/http3"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/internal/qmetrics"
	"github.com/quiot/quiot/internal/quictune"
	itest "github.com/quiot/quiot/internal/testutil"
)

func TestBrokerCollectorStats(t *testing.T) {
	st := broker.Stats{
		Protocols: map[string]broker.ProtoStats{
			"h3":   {ConnsOpen: 2, ConnsTotal: 5, MessagesIn: 10, MessagesOut: 20},
			"mqtt": {ConnsOpen: 1, ConnsTotal: 1, MessagesIn: 3, MessagesOut: 4},
		},
		Subscriptions: 3, Dropped: 7, CutOff: 1, QueueDepthSum: 12, QueueDepthMax: 9,
		Topics: 4, HistoryMessages: 30, HistoryBytes: 3000, LastSeq: 13,
	}
	c := NewBrokerCollector(func() broker.Stats { return st })
	want := `
# HELP quiot_broker_messages_in_total Messages accepted from publishers.
# TYPE quiot_broker_messages_in_total counter
quiot_broker_messages_in_total{proto="h3"} 10
quiot_broker_messages_in_total{proto="mqtt"} 3
# HELP quiot_broker_connections Open client connections.
# TYPE quiot_broker_connections gauge
quiot_broker_connections{proto="h3"} 2
quiot_broker_connections{proto="mqtt"} 1
# HELP quiot_broker_dropped_messages_total Messages discarded from full subscriber queues.
# TYPE quiot_broker_dropped_messages_total counter
quiot_broker_dropped_messages_total 7
# HELP quiot_broker_queue_depth_max_messages Messages waiting in the fullest subscriber queue.
# TYPE quiot_broker_queue_depth_max_messages gauge
quiot_broker_queue_depth_max_messages 9
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want),
		"quiot_broker_messages_in_total", "quiot_broker_connections", "quiot_broker_dropped_messages_total",
		"quiot_broker_queue_depth_max_messages"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(c); n != 4*2+9 {
		t.Errorf("%d metrics, want %d", n, 4*2+9)
	}
	if probs, err := testutil.CollectAndLint(c); err != nil || len(probs) > 0 {
		t.Errorf("lint: %v %v", err, probs)
	}
}

func TestQUICCollectorNilSources(t *testing.T) {
	if n := testutil.CollectAndCount(NewQUICCollector(nil, nil)); n != 0 {
		t.Errorf("%d metrics from no sources", n)
	}
}

// TestScrapeRealBroker runs a broker with a counting socket and the QUIC
// tracer, publishes over HTTP/3, and scrapes /metrics over HTTP.
func TestScrapeRealBroker(t *testing.T) {
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { udp.Close() })
	pc := qmetrics.NewCountingPacketConn(udp)
	tracer := qmetrics.NewTracer(nil)
	qc := quictune.Default().QUICConfig()
	qc.Tracer = tracer.ConnectionTracer
	b := itest.StartBroker(t, nil, &broker.Options{PacketConn: pc, QUIC: qc, DisableTCP: true})

	reg, err := NewRegistry(NewBrokerCollector(b.Stats), NewQUICCollector(pc.Stats, tracer.Stats))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := Listen("127.0.0.1:0", reg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Error(err)
		}
	})

	client := itest.H3Client(b.PKI.Pool(), nil)
	t.Cleanup(func() { client.Transport.(*http3.Transport).Close() })
	for i := 0; i < 3; i++ {
		resp, err := client.Post(b.URL+"/v1/topics/pi/temp", "application/octet-stream", bytes.NewReader([]byte("21.5")))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent {
			t.Fatalf("publish: %s", resp.Status)
		}
	}

	resp, err := http.Get("http://" + srv.Addr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape: %s", resp.Status)
	}
	text := string(body)
	value := func(series string) float64 {
		t.Helper()
		m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindStringSubmatch(text)
		if m == nil {
			t.Fatalf("no series %s in scrape:\n%s", series, text)
		}
		v, err := strconv.ParseFloat(m[1], 64)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if v := value(`quiot_broker_messages_in_total{proto="h3"}`); v != 3 {
		t.Errorf("messages in = %v, want 3", v)
	}
	if v := value(`quiot_broker_connections_total{proto="h3"}`); v < 1 {
		t.Errorf("connections total = %v", v)
	}
	if v := value(`quiot_broker_last_sequence`); v != 3 {
		t.Errorf("last sequence = %v, want 3", v)
	}
	for _, s := range []string{`quiot_quic_udp_datagrams_total{direction="received"}`, `quiot_quic_udp_bytes_total{direction="sent"}`,
		`quiot_quic_handshakes_completed_total`, `quiot_quic_packets_total{direction="received"}`,
		`quiot_quic_frames_total{direction="sent",type="ACK"}`,
		`process_cpu_seconds_total`, `process_resident_memory_bytes`} {
		if v := value(s); v <= 0 {
			t.Errorf("%s = %v, want > 0", s, v)
		}
	}
	if !strings.Contains(text, `quiot_build_info{version=`) {
		t.Error("no build info")
	}
	// The index answers too.
	r2, err := http.Get("http://" + srv.Addr().String() + "/")
	if err != nil {
		t.Fatal(err)
	}
	r2.Body.Close()
	if r2.StatusCode != http.StatusOK {
		t.Errorf("index: %s", r2.Status)
	}
}

func TestListenError(t *testing.T) {
	reg, err := NewRegistry()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Listen("256.0.0.1:99999", reg); err == nil {
		t.Error("bad address accepted")
	}
}
