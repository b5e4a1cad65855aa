package bench

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"sort"
	"strconv"
)

// Latency holds latency percentiles in milliseconds.
type Latency struct {
	// P50, P95, P99 and Max are the percentiles and the maximum.
	P50 float64 `json:"p50"`
	P95 float64 `json:"p95"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

// Metrics are the eight metrics of docs/BENCH.md for one run. The connection
// and resource figures (handshake, TTFD, wire, CPU, RSS) are the
// publisher's, the constrained device of the study; latency, throughput,
// delivery and completion are measured at the subscriber. The subscriber's
// and other figures are in the run's diagnostics.
type Metrics struct {
	// The fields are metrics 1-8 of docs/BENCH.md, named as in summary.json.
	HandshakeMs float64 `json:"handshake_ms"`
	TTFDMs      float64 `json:"ttfd_ms"`
	LatencyMs   Latency `json:"latency_ms"`
	// LatencyAppMs is the latency from the application's publish call
	// (issue 12's common clock: both protocols start at the same event,
	// before any connection setup), where LatencyMs starts at the
	// message's send-time stamp, taken once the connection is up: each
	// subscriber latency plus the publisher's wait before the stamp,
	// matched in order (QoS 1 keeps it; with several publishes in flight
	// only the first window waits for the connection).
	LatencyAppMs    Latency `json:"latency_app_ms"`
	ThroughputMsgsS float64 `json:"throughput_msgs_s"`
	DeliveryRatio   float64 `json:"delivery_ratio"`
	CompletionS     float64 `json:"completion_s"`
	WireBytes       int64   `json:"wire_bytes"`
	WireDatagrams   int64   `json:"wire_datagrams"`
	CPUMsPerMsg     float64 `json:"cpu_ms_per_msg"`
	CPUPct          float64 `json:"cpu_pct"`
	PeakRSSKiB      int64   `json:"peak_rss_kib"`
}

// metricField describes one scalar metric: its name (as in runs.csv and
// summary.json, latency flattened to latency_ms.p50 etc.), how to read it
// from and write it to Metrics.
type metricField struct {
	Name string
	Unit string
	Get  func(*Metrics) float64
	Set  func(*Metrics, float64)
}

// MetricFields lists every scalar metric in schema order.
var MetricFields = []metricField{
	{"handshake_ms", "ms", func(m *Metrics) float64 { return m.HandshakeMs }, func(m *Metrics, v float64) { m.HandshakeMs = v }},
	{"ttfd_ms", "ms", func(m *Metrics) float64 { return m.TTFDMs }, func(m *Metrics, v float64) { m.TTFDMs = v }},
	{"latency_ms.p50", "ms", func(m *Metrics) float64 { return m.LatencyMs.P50 }, func(m *Metrics, v float64) { m.LatencyMs.P50 = v }},
	{"latency_ms.p95", "ms", func(m *Metrics) float64 { return m.LatencyMs.P95 }, func(m *Metrics, v float64) { m.LatencyMs.P95 = v }},
	{"latency_ms.p99", "ms", func(m *Metrics) float64 { return m.LatencyMs.P99 }, func(m *Metrics, v float64) { m.LatencyMs.P99 = v }},
	{"latency_ms.max", "ms", func(m *Metrics) float64 { return m.LatencyMs.Max }, func(m *Metrics, v float64) { m.LatencyMs.Max = v }},
	{"latency_app_ms.p50", "ms", func(m *Metrics) float64 { return m.LatencyAppMs.P50 }, func(m *Metrics, v float64) { m.LatencyAppMs.P50 = v }},
	{"latency_app_ms.p95", "ms", func(m *Metrics) float64 { return m.LatencyAppMs.P95 }, func(m *Metrics, v float64) { m.LatencyAppMs.P95 = v }},
	{"latency_app_ms.p99", "ms", func(m *Metrics) float64 { return m.LatencyAppMs.P99 }, func(m *Metrics, v float64) { m.LatencyAppMs.P99 = v }},
	{"latency_app_ms.max", "ms", func(m *Metrics) float64 { return m.LatencyAppMs.Max }, func(m *Metrics, v float64) { m.LatencyAppMs.Max = v }},
	{"throughput_msgs_s", "msg/s", func(m *Metrics) float64 { return m.ThroughputMsgsS }, func(m *Metrics, v float64) { m.ThroughputMsgsS = v }},
	{"delivery_ratio", "", func(m *Metrics) float64 { return m.DeliveryRatio }, func(m *Metrics, v float64) { m.DeliveryRatio = v }},
	{"completion_s", "s", func(m *Metrics) float64 { return m.CompletionS }, func(m *Metrics, v float64) { m.CompletionS = v }},
	{"wire_bytes", "B", func(m *Metrics) float64 { return float64(m.WireBytes) }, func(m *Metrics, v float64) { m.WireBytes = int64(math.Round(v)) }},
	{"wire_datagrams", "", func(m *Metrics) float64 { return float64(m.WireDatagrams) }, func(m *Metrics, v float64) { m.WireDatagrams = int64(math.Round(v)) }},
	{"cpu_ms_per_msg", "ms", func(m *Metrics) float64 { return m.CPUMsPerMsg }, func(m *Metrics, v float64) { m.CPUMsPerMsg = v }},
	{"cpu_pct", "%", func(m *Metrics) float64 { return m.CPUPct }, func(m *Metrics, v float64) { m.CPUPct = v }},
	{"peak_rss_kib", "KiB", func(m *Metrics) float64 { return float64(m.PeakRSSKiB) }, func(m *Metrics, v float64) { m.PeakRSSKiB = int64(math.Round(v)) }},
}

// metricByName returns the field of a metric name.
func metricByName(name string) (metricField, bool) {
	for _, f := range MetricFields {
		if f.Name == name {
			return f, true
		}
	}
	return metricField{}, false
}

// Sample is one repeat of one configuration: the row of runs.csv.
type Sample struct {
	Config
	// Repeat is the repeat index, from 1.
	Repeat int `json:"repeat"`
	// OK is false when a role failed; Err says why.
	OK  bool   `json:"ok"`
	Err string `json:"error,omitempty"`
	// Sent is the number of messages the publisher sent (acknowledged for
	// QoS 1); Received the number the subscriber got.
	Sent     int64 `json:"sent"`
	Received int64 `json:"received"`
	// Metrics are the eight metrics.
	Metrics Metrics `json:"metrics"`
	// Diag are diagnostics, flattened: "pub.frames_sent.ACK", "sub.cpu_ms_per_msg", ...
	Diag map[string]float64 `json:"diag,omitempty"`
	// Latencies are the subscriber's per-message latencies in ms when it
	// reported them (for CDF plots); not written to runs.csv.
	Latencies []float64 `json:"-"`
	// WallS is the run's wall-clock duration.
	WallS float64 `json:"wall_s"`
}

// flatten turns a decoded JSON document into dotted keys with numeric
// values (booleans as 0/1); strings and nulls are dropped, arrays are
// indexed.
func flatten(prefix string, v any, out map[string]float64) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			key := k
			if prefix != "" {
				key = prefix + "." + k
			}
			flatten(key, e, out)
		}
	case []any:
		for i, e := range x {
			flatten(prefix+"."+strconv.Itoa(i), e, out)
		}
	case float64:
		out[prefix] = x
	case json.Number:
		if f, err := x.Float64(); err == nil {
			out[prefix] = f
		}
	case bool:
		if x {
			out[prefix] = 1
		} else {
			out[prefix] = 0
		}
	}
}

// RoleDoc is a role's --metrics-out document, flattened to dotted keys.
type RoleDoc struct {
	// Values are the numeric fields by dotted path.
	Values map[string]float64
	// Latencies are per-message latencies in ms, when the role wrote them.
	Latencies []float64
	// StampDelays are a publisher's per-call waits before the send-time
	// stamp in ms (qmetrics.RoleMetrics.StampDelaysMs).
	StampDelays []float64
}

// ParseRoleMetrics reads a role's metrics JSON. It accepts the eight
// metrics at the top level or under "metrics", with diagnostics anywhere.
func ParseRoleMetrics(b []byte) (*RoleDoc, error) {
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, fmt.Errorf("bad role metrics JSON: %w", err)
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("bad role metrics JSON: want an object, got %T", v)
	}
	d := &RoleDoc{Values: map[string]float64{}}
	for _, k := range []string{"latencies_ms", "latency_samples_ms"} {
		if arr, ok := m[k].([]any); ok {
			for _, e := range arr {
				if f, ok := e.(float64); ok {
					d.Latencies = append(d.Latencies, f)
				}
			}
			delete(m, k)
		}
	}
	if arr, ok := m["stamp_delays_ms"].([]any); ok {
		for _, e := range arr {
			if f, ok := e.(float64); ok {
				d.StampDelays = append(d.StampDelays, f)
			}
		}
		delete(m, "stamp_delays_ms")
	}
	flatten("", m, d.Values)
	return d, nil
}

// ReadRoleMetrics reads and parses a role's metrics file.
func ReadRoleMetrics(path string) (*RoleDoc, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("couldn't read role metrics: %w", err)
	}
	return ParseRoleMetrics(b)
}

// Get returns the first present of the given keys, also looked up under
// "metrics.".
func (d *RoleDoc) Get(keys ...string) (float64, bool) {
	if d == nil {
		return 0, false
	}
	for _, k := range keys {
		if v, ok := d.Values[k]; ok {
			return v, true
		}
		if v, ok := d.Values["metrics."+k]; ok {
			return v, true
		}
	}
	return 0, false
}

// get is Get without the presence flag.
func (d *RoleDoc) get(keys ...string) float64 {
	v, _ := d.Get(keys...)
	return v
}

// Combine builds a sample's metrics and diagnostics from the publisher's
// and subscriber's documents (either may be nil when that role failed).
// sent overrides the publisher's count when >= 0.
func Combine(s *Sample, pub, sub *RoleDoc) {
	s.Sent = int64(pub.get("sent", "messages_sent", "count"))
	s.Received = int64(sub.get("received", "messages_received", "delivered", "count"))
	m := &s.Metrics
	m.HandshakeMs = pub.get("handshake_ms")
	m.TTFDMs = pub.get("ttfd_ms")
	m.LatencyMs = Latency{
		P50: sub.get("latency_ms.p50"),
		P95: sub.get("latency_ms.p95"),
		P99: sub.get("latency_ms.p99"),
		Max: sub.get("latency_ms.max"),
	}
	m.ThroughputMsgsS = sub.get("throughput_msgs_s")
	m.CompletionS = sub.get("completion_s")
	if s.Sent > 0 {
		m.DeliveryRatio = float64(s.Received) / float64(s.Sent)
	} else {
		m.DeliveryRatio = sub.get("delivery_ratio")
	}
	m.WireBytes = int64(pub.get("wire_bytes"))
	m.WireDatagrams = int64(pub.get("wire_datagrams"))
	m.CPUMsPerMsg = pub.get("cpu_ms_per_msg")
	m.CPUPct = pub.get("cpu_pct")
	m.PeakRSSKiB = int64(pub.get("peak_rss_kib"))
	if sub != nil {
		s.Latencies = sub.Latencies
		m.LatencyAppMs = appLatency(sub.Latencies, pub)
	}
	s.Diag = map[string]float64{}
	for role, d := range map[string]*RoleDoc{"pub": pub, "sub": sub} {
		if d == nil {
			continue
		}
		for k, v := range d.Values {
			s.Diag[role+"."+trimPrefix(k, "metrics.")] = v
		}
	}
	if s.Sent > 0 {
		s.Diag["pub.wire_bytes_per_msg"] = float64(m.WireBytes) / float64(s.Sent)
		s.Diag["pub.wire_datagrams_per_msg"] = float64(m.WireDatagrams) / float64(s.Sent)
	}
}

func trimPrefix(s, p string) string {
	if len(s) >= len(p) && s[:len(p)] == p {
		return s[len(p):]
	}
	return s
}

// diagKeys returns the union of the samples' diagnostic keys, sorted.
func diagKeys(samples []Sample) []string {
	set := map[string]bool{}
	for _, s := range samples {
		for k := range s.Diag {
			set[k] = true
		}
	}
	keys := make([]string, 0, len(set))
	for k := range set {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// WireBytesPerMsg is the publisher's wire bytes per sent message.
func (s *Sample) WireBytesPerMsg() float64 {
	if s.Sent == 0 {
		return 0
	}
	return float64(s.Metrics.WireBytes) / float64(s.Sent)
}

// appLatency is the latency from the publish call: the subscriber's
// latencies (arrival order) each plus the publisher's wait before the
// stamp of the message sent in the same place (call order). Without the
// publisher's waits it is the stamped latency (a role that wrote none: no
// wait recorded is no wait known).
func appLatency(lat []float64, pub *RoleDoc) Latency {
	if len(lat) == 0 {
		return Latency{}
	}
	xs := make([]float64, len(lat))
	for i, l := range lat {
		xs[i] = l
		if pub != nil && i < len(pub.StampDelays) {
			xs[i] += pub.StampDelays[i]
		}
	}
	return Latency{P50: Quantile(xs, 0.5), P95: Quantile(xs, 0.95), P99: Quantile(xs, 0.99), Max: Quantile(xs, 1)}
}
