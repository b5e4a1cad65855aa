package promexport

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/procfs"
	"github.com/quic-go/quic-go/http3"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/auth"
	"github.com/quiot/quiot/broker/brokertest"
	"github.com/quiot/quiot/broker/space"
	"github.com/quiot/quiot/internal/lograte"
	"github.com/quiot/quiot/internal/qmetrics"
	itest "github.com/quiot/quiot/internal/testutil"
)

func collect(c Collector) string {
	var b bytes.Buffer
	c.WritePrometheus(&b)
	return b.String()
}

func TestBrokerCollectorStats(t *testing.T) {
	st := broker.Stats{
		Protocols: map[string]broker.ProtoStats{
			"mqtt": {ConnsOpen: 1, ConnsTotal: 1, MessagesIn: 3, MessagesOut: 4, Refused: map[string]uint64{"forbidden": 2, "unauthenticated": 1}},
			"h3":   {ConnsOpen: 2, ConnsTotal: 5, MessagesIn: 10, MessagesOut: 20, Refused: map[string]uint64{"payload_too_large": 4, "too_many": 6}},
		},
		Stats: space.Stats{
			Retained: 2, RetainedBytes: 345,
			Subscriptions: 3, Dropped: 7, CutOff: 1, QueueDepthSum: 12, QueueDepthMax: 9,
			Topics: 4, HistoryMessages: 30, HistoryBytes: 3000, LastSeq: 16777216,
		},
		Requests: 2, StreamInflightWaits: 3, Refused: map[string]uint64{broker.RefusedConnsPerAddr: 5, broker.RefusedConns: 1},
	}
	got := collect(NewBrokerCollector(func() broker.Stats { return st }))
	want := `# HELP quiot_broker_connections Open client connections.
# TYPE quiot_broker_connections gauge
quiot_broker_connections{proto="h3"} 2
quiot_broker_connections{proto="mqtt"} 1
# HELP quiot_broker_connections_total Client connections accepted.
# TYPE quiot_broker_connections_total counter
quiot_broker_connections_total{proto="h3"} 5
quiot_broker_connections_total{proto="mqtt"} 1
# HELP quiot_broker_messages_in_total Messages accepted from publishers.
# TYPE quiot_broker_messages_in_total counter
quiot_broker_messages_in_total{proto="h3"} 10
quiot_broker_messages_in_total{proto="mqtt"} 3
# HELP quiot_broker_messages_out_total Messages delivered to subscribers.
# TYPE quiot_broker_messages_out_total counter
quiot_broker_messages_out_total{proto="h3"} 20
quiot_broker_messages_out_total{proto="mqtt"} 4
# HELP quiot_broker_subscriptions Live HTTP/3 pub-sub subscriptions.
# TYPE quiot_broker_subscriptions gauge
quiot_broker_subscriptions 3
# HELP quiot_broker_dropped_messages_total Messages discarded from full subscriber queues.
# TYPE quiot_broker_dropped_messages_total counter
quiot_broker_dropped_messages_total 7
# HELP quiot_broker_subscriptions_cut_off_total Subscriptions ended because their queue was full (disconnect policy).
# TYPE quiot_broker_subscriptions_cut_off_total counter
quiot_broker_subscriptions_cut_off_total 1
# HELP quiot_broker_queue_depth_messages Messages waiting in all subscriber queues.
# TYPE quiot_broker_queue_depth_messages gauge
quiot_broker_queue_depth_messages 12
# HELP quiot_broker_queue_depth_max_messages Messages waiting in the fullest subscriber queue.
# TYPE quiot_broker_queue_depth_max_messages gauge
quiot_broker_queue_depth_max_messages 9
# HELP quiot_broker_topics Topics with history or a retained message.
# TYPE quiot_broker_topics gauge
quiot_broker_topics 4
# HELP quiot_broker_history_messages Messages held for resume.
# TYPE quiot_broker_history_messages gauge
quiot_broker_history_messages 30
# HELP quiot_broker_history_bytes Payload bytes held for resume.
# TYPE quiot_broker_history_bytes gauge
quiot_broker_history_bytes 3000
# HELP quiot_broker_last_sequence Last sequence number assigned.
# TYPE quiot_broker_last_sequence gauge
quiot_broker_last_sequence 16777216
# HELP quiot_broker_stream_inflight_waits_total Times a publish stream waited for its QoS 0 frames to be stored (Limits.StreamInflight).
# TYPE quiot_broker_stream_inflight_waits_total counter
quiot_broker_stream_inflight_waits_total 3
# HELP quiot_broker_quic_retries_total HTTP/3 connection attempts asked to prove their source address with a Retry (Limits.QUICRetryAbove).
# TYPE quiot_broker_quic_retries_total counter
quiot_broker_quic_retries_total 0
# HELP quiot_broker_quic_half_open HTTP/3 handshakes in progress from addresses not yet validated.
# TYPE quiot_broker_quic_half_open gauge
quiot_broker_quic_half_open 0
# HELP quiot_broker_http_requests HTTP requests being handled (subscriptions and publish streams included).
# TYPE quiot_broker_http_requests gauge
quiot_broker_http_requests 2
# HELP quiot_broker_retained_messages Retained messages held.
# TYPE quiot_broker_retained_messages gauge
quiot_broker_retained_messages 2
# HELP quiot_broker_retained_bytes Bytes of the retained messages held (as Limits.RetainedBytes counts them).
# TYPE quiot_broker_retained_bytes gauge
quiot_broker_retained_bytes 345
# HELP quiot_broker_refused_total Connections, requests, publishes and subscriptions refused, by protocol and reason.
# TYPE quiot_broker_refused_total counter
quiot_broker_refused_total{proto="h3",reason="unauthenticated"} 0
quiot_broker_refused_total{proto="h3",reason="forbidden"} 0
quiot_broker_refused_total{proto="h3",reason="payload_too_large"} 4
quiot_broker_refused_total{proto="h3",reason="bad_topic"} 0
quiot_broker_refused_total{proto="h3",reason="too_many"} 6
quiot_broker_refused_total{proto="h3",reason="shutting_down"} 0
quiot_broker_refused_total{proto="h3",reason="storage_full"} 0
quiot_broker_refused_total{proto="h3",reason="throttled"} 0
quiot_broker_refused_total{proto="mqtt",reason="unauthenticated"} 1
quiot_broker_refused_total{proto="mqtt",reason="forbidden"} 2
quiot_broker_refused_total{proto="mqtt",reason="payload_too_large"} 0
quiot_broker_refused_total{proto="mqtt",reason="bad_topic"} 0
quiot_broker_refused_total{proto="mqtt",reason="too_many"} 0
quiot_broker_refused_total{proto="mqtt",reason="shutting_down"} 0
quiot_broker_refused_total{proto="mqtt",reason="storage_full"} 0
quiot_broker_refused_total{proto="mqtt",reason="throttled"} 0
# HELP quiot_broker_limit_refused_total Connections and subscriptions of the HTTP side refused by a limit (broker.Limits), by limit.
# TYPE quiot_broker_limit_refused_total counter
quiot_broker_limit_refused_total{limit="conns"} 1
quiot_broker_limit_refused_total{limit="conns_per_addr"} 5
`
	if got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
	if err := checkExposition(got); err != nil {
		t.Error(err)
	}
}

// TestBrokerCollectorNoProtocols: a family without series is left out,
// as client_golang did.
func TestBrokerCollectorNoProtocols(t *testing.T) {
	got := collect(NewBrokerCollector(func() broker.Stats { return broker.Stats{} }))
	if strings.Contains(got, "{proto=") || strings.Contains(got, "quiot_broker_connections ") {
		t.Errorf("per-protocol families without protocols:\n%s", got)
	}
	if n := samples(got); n != 15 {
		t.Errorf("%d samples, want 15:\n%s", n, got)
	}
	if err := checkExposition(got); err != nil {
		t.Error(err)
	}
}

func TestQUICCollector(t *testing.T) {
	wire := func() qmetrics.WireStats {
		return qmetrics.WireStats{BytesSent: 100, BytesReceived: 200, DatagramsSent: 3, DatagramsReceived: 4}
	}
	trace := func() qmetrics.TraceStats {
		return qmetrics.TraceStats{
			Connections: 1, HandshakesCompleted: 1, PacketsSent: 5, PTOCount: 2,
			FramesSent:       map[string]uint64{"STREAM": 4, "ACK": 3, "PING": 1},
			FramesReceived:   map[string]uint64{"ACK": 2},
			H3FramesReceived: map[string]uint64{`we"ird\`: 1},
		}
	}
	tests := []struct {
		name        string
		wire        func() qmetrics.WireStats
		trace       func() qmetrics.TraceStats
		samples     int
		contains    []string
		notContains []string
	}{
		{name: "no sources"},
		{name: "wire only", wire: wire, samples: 4,
			contains: []string{
				"# HELP quiot_quic_udp_bytes_total UDP payload bytes at the broker's QUIC socket.\n# TYPE quiot_quic_udp_bytes_total counter\n" +
					"quiot_quic_udp_bytes_total{direction=\"sent\"} 100\nquiot_quic_udp_bytes_total{direction=\"received\"} 200\n",
				`quiot_quic_udp_datagrams_total{direction="received"} 4`,
			},
			notContains: []string{"quiot_quic_pto_total"}},
		{name: "both", wire: wire, trace: trace, samples: 4 + 2 + 2*2 + 5 + 4 + 1,
			contains: []string{
				"# TYPE quiot_quic_frames_total counter\n" +
					"quiot_quic_frames_total{direction=\"sent\",type=\"ACK\"} 3\n" +
					"quiot_quic_frames_total{direction=\"sent\",type=\"PING\"} 1\n" +
					"quiot_quic_frames_total{direction=\"sent\",type=\"STREAM\"} 4\n" +
					"quiot_quic_frames_total{direction=\"received\",type=\"ACK\"} 2\n",
				`quiot_quic_h3_frames_total{direction="received",type="we\"ird\\"} 1`,
				"quiot_quic_pto_total 2\n",
				"quiot_quic_packets_total{direction=\"sent\"} 5\n",
			}},
		{name: "trace without frames", trace: func() qmetrics.TraceStats { return qmetrics.TraceStats{} }, samples: 2 + 2*2 + 5,
			notContains: []string{"frames_total", "udp_"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := collect(NewQUICCollector(tt.wire, tt.trace))
			if n := samples(got); n != tt.samples {
				t.Errorf("%d samples, want %d:\n%s", n, tt.samples, got)
			}
			for _, s := range tt.contains {
				if !strings.Contains(got, s) {
					t.Errorf("no %q in:\n%s", s, got)
				}
			}
			for _, s := range tt.notContains {
				if strings.Contains(got, s) {
					t.Errorf("%q in:\n%s", s, got)
				}
			}
			if err := checkExposition(got); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestRegistryExposition checks a whole registry's output (quiot, process
// and Go families) against the text format's rules.
func TestRegistryExposition(t *testing.T) {
	reg := NewRegistry(NewBrokerCollector(func() broker.Stats { return broker.Stats{} }), NewQUICCollector(nil, nil))
	got := collect(reg)
	if err := checkExposition(got); err != nil {
		t.Fatalf("%v\n%s", err, got)
	}
	for _, s := range []string{"\nquiot_build_info{version=", "\n# TYPE process_cpu_seconds_total counter\n",
		"\n# TYPE process_resident_memory_bytes gauge\n", "\nprocess_open_fds ", "\n# TYPE go_goroutines gauge\n",
		"\n# TYPE go_gc_duration_seconds summary\n"} {
		if !strings.Contains(got, s) {
			t.Errorf("no %q in:\n%s", s, got)
		}
	}
}

func TestAcceptsGzip(t *testing.T) {
	tests := []struct {
		header string
		want   bool
	}{
		{"", false},
		{"gzip", true},
		{"identity", false},
		{"deflate, gzip;q=0.5", true},
		{"GZIP", true},
		{"gzip;q=0", false},
		{"gzip; q=0.0", false},
		{"xgzip", false},
		{"gzip;q=bad", false},
	}
	for _, tt := range tests {
		t.Run(tt.header, func(t *testing.T) {
			if got := acceptsGzip(tt.header); got != tt.want {
				t.Errorf("acceptsGzip(%q) = %v, want %v", tt.header, got, tt.want)
			}
		})
	}
}

func TestServeHTTPGzip(t *testing.T) {
	reg := NewRegistry(NewBrokerCollector(func() broker.Stats { return broker.Stats{Stats: space.Stats{LastSeq: 42}} }))
	for _, gz := range []bool{false, true} {
		t.Run(fmt.Sprintf("gzip=%v", gz), func(t *testing.T) {
			req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
			if gz {
				req.Header.Set("Accept-Encoding", "gzip")
			}
			rec := httptest.NewRecorder()
			reg.ServeHTTP(rec, req)
			if ct := rec.Header().Get("Content-Type"); ct != ContentType {
				t.Errorf("Content-Type %q", ct)
			}
			var body io.Reader = rec.Body
			if enc := rec.Header().Get("Content-Encoding"); (enc == "gzip") != gz {
				t.Fatalf("Content-Encoding %q", enc)
			}
			if gz {
				zr, err := gzip.NewReader(rec.Body)
				if err != nil {
					t.Fatal(err)
				}
				body = zr
			}
			text, err := io.ReadAll(body)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Contains(text, []byte("\nquiot_broker_last_sequence 42\n")) {
				t.Errorf("no last_sequence in:\n%s", text)
			}
		})
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
	b := brokertest.Start(t, nil, &broker.Options{PacketConn: pc, Tracer: tracer.ConnectionTracer, DisableTCP: true})

	reg := NewRegistry(NewBrokerCollector(b.Stats), NewQUICCollector(pc.Stats, tracer.Stats))
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

	// net/http asks for gzip and decompresses transparently.
	resp, err := http.Get("http://" + srv.Addr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape: %s", resp.Status)
	}
	if ct := resp.Header.Get("Content-Type"); ct != ContentType {
		t.Errorf("Content-Type %q", ct)
	}
	text := string(body)
	if err := checkExposition(text); err != nil {
		t.Errorf("%v\n%s", err, text)
	}
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
		`process_resident_memory_bytes`, `process_open_fds`, `process_start_time_seconds`, `go_goroutines`} {
		if v := value(s); v <= 0 {
			t.Errorf("%s = %v, want > 0", s, v)
		}
	}
	// CPU time comes from /proc in clock ticks (10 ms): a fast host runs
	// this test within one tick, so zero is a correct reading. Check it
	// against the kernel's own figure read after the scrape instead.
	cpu := value(`process_cpu_seconds_total`)
	proc, err := procfs.Self()
	if err != nil {
		t.Fatal(err)
	}
	st, err := proc.Stat()
	if err != nil {
		t.Fatal(err)
	}
	if after := st.CPUTime(); cpu < 0 || cpu > after+1e-9 {
		t.Errorf("process_cpu_seconds_total = %v, want within [0, %v] (/proc after the scrape)", cpu, after)
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
	if _, err := Listen("256.0.0.1:99999", NewRegistry()); err == nil {
		t.Error("bad address accepted")
	}
}

// samples counts the sample lines of an exposition.
func samples(text string) int {
	n := 0
	for line := range strings.Lines(text) {
		if !strings.HasPrefix(line, "#") {
			n++
		}
	}
	return n
}

// The text exposition format's lines (version 0.0.4).
var (
	expoName = `[a-zA-Z_:][a-zA-Z0-9_:]*`
	expoPair = `[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*"`
	helpLine = regexp.MustCompile(`^# HELP (` + expoName + `)(?: .*)?$`)
	typeLine = regexp.MustCompile(`^# TYPE (` + expoName + `) (counter|gauge|histogram|summary|untyped)$`)
	sampLine = regexp.MustCompile(`^(` + expoName + `)(\{\s*(?:` + expoPair + `(?:\s*,\s*` + expoPair + `)*\s*,?\s*)?\}) ?(\S+)$|^(` +
		expoName + `) (\S+)$`)
)

// checkExposition checks text against the rules of the Prometheus text
// format that a scraper enforces: line syntax, numeric values, at most one
// # HELP and # TYPE per family and before its samples, a family's samples
// together, no series twice.
func checkExposition(text string) error {
	if text == "" {
		return nil
	}
	if !strings.HasSuffix(text, "\n") {
		return fmt.Errorf("no final newline")
	}
	types := map[string]string{}
	helped := map[string]bool{}
	seenSamples := map[string]bool{} // families with samples
	series := map[string]bool{}
	current := ""
	family := func(name string) string {
		if _, ok := types[name]; ok {
			return name
		}
		for _, suf := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(name, suf); ok {
				if ty := types[base]; ty == "histogram" || (ty == "summary" && suf != "_bucket") {
					return base
				}
			}
		}
		return name
	}
	for n, line := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		n++
		if m := helpLine.FindStringSubmatch(line); m != nil {
			if helped[m[1]] || seenSamples[m[1]] {
				return fmt.Errorf("line %d: second or late # HELP for %s", n, m[1])
			}
			helped[m[1]] = true
			continue
		}
		if m := typeLine.FindStringSubmatch(line); m != nil {
			if _, ok := types[m[1]]; ok || seenSamples[m[1]] {
				return fmt.Errorf("line %d: second or late # TYPE for %s", n, m[1])
			}
			types[m[1]] = m[2]
			continue
		}
		if strings.HasPrefix(line, "#") {
			return fmt.Errorf("line %d: bad comment %q", n, line)
		}
		m := sampLine.FindStringSubmatch(line)
		if m == nil {
			return fmt.Errorf("line %d: bad sample %q", n, line)
		}
		name, labels, value := m[1], m[2], m[3]
		if name == "" {
			name, value = m[4], m[5]
		}
		if _, err := strconv.ParseFloat(value, 64); err != nil {
			return fmt.Errorf("line %d: value %q: %w", n, value, err)
		}
		key := name + strings.ReplaceAll(labels, " ", "")
		if series[key] {
			return fmt.Errorf("line %d: series %s twice", n, key)
		}
		series[key] = true
		f := family(name)
		if f != current && seenSamples[f] {
			return fmt.Errorf("line %d: samples of %s not together", n, f)
		}
		current = f
		seenSamples[f] = true
	}
	return nil
}

// refusalACL lets anonymous clients use public/# and alice (token
// tok-alice) a/# as well.
const refusalACL = `
[anonymous]
publish   = ["public/#"]
subscribe = ["public/#"]

[[user]]
name      = "alice"
token     = "tok-alice"
publish   = ["a/#", "public/#"]
subscribe = ["a/#", "public/#"]
`

// TestScrapeRefusalsAndRetained: real HTTP/3 requests refused with 401,
// 403 and 413 show in quiot_broker_refused_total{proto="h3"} under their
// reasons, the 401 and 403 are logged at Info without the credential, and
// quiot_broker_retained_messages and _bytes follow a retained message
// being set and cleared.
func TestScrapeRefusalsAndRetained(t *testing.T) {
	a, err := auth.Parse([]byte(refusalACL))
	if err != nil {
		t.Fatal(err)
	}
	var logs itest.SyncBuffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	b := brokertest.Start(t, nil, &broker.Options{Auth: a, DisableTCP: true, Logger: log, Limits: broker.Limits{MaxPayload: 16}})
	reg := NewRegistry(NewBrokerCollector(b.Stats))
	client := itest.H3Client(b.PKI.Pool(), nil)
	t.Cleanup(func() { client.Transport.(*http3.Transport).Close() })

	scrape := func() string {
		t.Helper()
		var buf bytes.Buffer
		reg.WritePrometheus(&buf)
		if err := checkExposition(buf.String()); err != nil {
			t.Fatalf("%v\n%s", err, buf.String())
		}
		return buf.String()
	}
	value := func(text, series string) string {
		t.Helper()
		m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindStringSubmatch(text)
		if m == nil {
			t.Fatalf("no series %s in scrape:\n%s", series, text)
		}
		return m[1]
	}
	refused := func(text, reason string) string {
		t.Helper()
		return value(text, `quiot_broker_refused_total{proto="h3",reason="`+reason+`"}`)
	}
	publish := func(path, token, payload string, want int) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, b.URL+path, strings.NewReader(payload))
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("POST %s: %s, want %d", path, resp.Status, want)
		}
	}

	// Before any refusal every reason is there, at zero.
	text := scrape()
	for _, r := range broker.Reasons() {
		if v := refused(text, r.String()); v != "0" {
			t.Errorf("reason %s = %s before any refusal", r, v)
		}
	}
	if v := value(text, "quiot_broker_retained_messages"); v != "0" {
		t.Errorf("retained messages = %s at start", v)
	}

	steps := []struct {
		name, path, token, payload string
		status                     int
		reason                     string
		logged                     string // the Info line's message, "" when none
	}{
		{"bad token", "/v1/topics/public/x", "not-a-token-secret", "1", http.StatusUnauthorized, "unauthenticated", "http request refused"},
		{"acl denies", "/v1/topics/a/x", "", "1", http.StatusForbidden, "forbidden", "http request refused"},
		{"payload too large", "/v1/topics/public/x", "", strings.Repeat("x", 17), http.StatusRequestEntityTooLarge, "payload_too_large", ""},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			publish(s.path, s.token, s.payload, s.status)
			if v := refused(scrape(), s.reason); v != "1" {
				t.Errorf("refused_total{reason=%q} = %s, want 1", s.reason, v)
			}
			if s.logged == "" {
				return
			}
			want := fmt.Sprintf(`level=INFO msg=%q reason=%s status=%d`, s.logged, s.reason, s.status)
			if !strings.Contains(logs.String(), want) {
				t.Errorf("no log line with %s:\n%s", want, logs.String())
			}
		})
	}
	if !strings.Contains(logs.String(), `path=/v1/topics/a/x`) {
		t.Errorf("the 403 line names no path:\n%s", logs.String())
	}
	if strings.Contains(logs.String(), "not-a-token-secret") {
		t.Errorf("a credential in the log:\n%s", logs.String())
	}
	// A client refused in a loop: every refusal counted, the log bounded.
	for range 2 * lograte.DefaultBurst {
		publish("/v1/topics/public/x", "not-a-token", "1", http.StatusUnauthorized)
	}
	if v := refused(scrape(), "unauthenticated"); v != strconv.Itoa(1+2*lograte.DefaultBurst) {
		t.Errorf("refused_total{reason=\"unauthenticated\"} = %s after a loop of 401s, want %d", v, 1+2*lograte.DefaultBurst)
	}
	if n := strings.Count(logs.String(), "reason=unauthenticated"); n > lograte.DefaultBurst {
		t.Errorf("%d lines for 401s in a loop, want at most %d", n, lograte.DefaultBurst)
	}

	// The retained gauges follow a retained message set, then cleared.
	publish("/v1/topics/public/r?retain=1", "", "21.5", http.StatusNoContent)
	text = scrape()
	if v := value(text, "quiot_broker_retained_messages"); v != "1" {
		t.Errorf("retained messages = %s after a retained publish, want 1", v)
	}
	if v, _ := strconv.Atoi(value(text, "quiot_broker_retained_bytes")); v < len("21.5") {
		t.Errorf("retained bytes = %d, want at least the payload", v)
	}
	publish("/v1/topics/public/r?retain=1", "", "", http.StatusNoContent)
	text = scrape()
	if v := value(text, "quiot_broker_retained_messages"); v != "0" {
		t.Errorf("retained messages = %s after clearing, want 0", v)
	}
	if v := value(text, "quiot_broker_retained_bytes"); v != "0" {
		t.Errorf("retained bytes = %s after clearing, want 0", v)
	}
}
