package bench

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestExpand(t *testing.T) {
	s := Spec{
		Protos:   []string{ProtoH3, ProtoMQTT},
		Modes:    []string{ModeRequest, ModeStream},
		Tunings:  []Tuning{{Name: "default", Profile: "default"}, {Name: "lean", Profile: "lean"}},
		Profiles: []string{"lan", "nbiot"},
		Payloads: []int{16, 256},
		Repeat:   3,
		Count:    10,
	}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	runs := s.Expand()
	// (2 h3 modes + 1 mqtt) x 2 tunings x 2 profiles x 2 payloads x 3 repeats
	if want := 3 * 2 * 2 * 2 * 3; len(runs) != want {
		t.Fatalf("got %d runs, want %d", len(runs), want)
	}
	ids := map[string]bool{}
	for _, r := range runs {
		if ids[r.ID()] {
			t.Fatalf("duplicate run id %s", r.ID())
		}
		ids[r.ID()] = true
		if r.Proto == ProtoMQTT && r.Mode != ModeMQTT {
			t.Errorf("mqtt run with mode %s", r.Mode)
		}
		if r.TuningSpec.Name != r.Tuning {
			t.Errorf("tuning spec %q for tuning %q", r.TuningSpec.Name, r.Tuning)
		}
	}
	// Repeats are the outer loop.
	if runs[0].Repeat != 1 || runs[len(runs)-1].Repeat != 3 || runs[len(runs)/3].Repeat != 2 {
		t.Errorf("repeats not outermost")
	}
}

func TestSpecValidate(t *testing.T) {
	good := func() Spec {
		return Spec{Protos: []string{"h3"}, Modes: []string{"request"}, Tunings: []Tuning{{Name: "lean"}},
			Profiles: []string{"lan"}, Payloads: []int{16}, Repeat: 1, Count: 1}
	}
	tests := []struct {
		name string
		mod  func(*Spec)
		want string
	}{
		{"ok", func(*Spec) {}, ""},
		{"proto", func(s *Spec) { s.Protos = []string{"coap"} }, "unknown protocol"},
		{"mode", func(s *Spec) { s.Modes = []string{"batch"} }, "unknown publish mode"},
		{"dup tuning", func(s *Spec) { s.Tunings = []Tuning{{Name: "a"}, {Name: "a"}} }, "twice"},
		{"payload", func(s *Spec) { s.Payloads = []int{0} }, "out of range"},
		{"repeat", func(s *Spec) { s.Repeat = 0 }, "repeat"},
		{"qos", func(s *Spec) { s.QoS = 2 }, "qos"},
		{"no profiles", func(s *Spec) { s.Profiles = nil }, "no link profiles"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := good()
			tt.mod(&s)
			err := s.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want error containing %q", err, tt.want)
			}
		})
	}
}

func TestParseSizes(t *testing.T) {
	tests := []struct {
		in   string
		want []int
		err  bool
	}{
		{"16,256,1024", []int{16, 256, 1024}, false},
		{" 1k , 2K", []int{1024, 2048}, false},
		{"", nil, true},
		{"abc", nil, true},
		{"-3", nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseSizes(tt.in)
			if (err != nil) != tt.err {
				t.Fatalf("err %v", err)
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) && !tt.err {
				t.Fatalf("got %v want %v", got, tt.want)
			}
		})
	}
}

func TestStats(t *testing.T) {
	if m := Median([]float64{3, 1, 2}); m != 2 {
		t.Errorf("median %v", m)
	}
	if m := Median([]float64{4, 1, 2, 3}); m != 2.5 {
		t.Errorf("median %v", m)
	}
	if !math.IsNaN(Median(nil)) {
		t.Error("median of none")
	}
	// mean 5, sd 1.5811, n 5, t(4)=2.7764 -> half-width 1.9632
	e := CI95([]float64{3, 4, 5, 6, 7})
	if math.Abs(e.Mean-5) > 1e-9 || math.Abs(e.HalfWidth()-1.9632) > 1e-3 {
		t.Errorf("CI95 = %+v", e)
	}
	if one := CI95([]float64{1}); !math.IsNaN(one.Lo) || one.Mean != 1 {
		t.Errorf("CI95 of one = %+v", one)
	}
	d := DiffCI95([]float64{10, 11, 12, 10, 11}, []float64{1, 2, 1, 2, 1})
	if d.Sign() != 1 || math.Abs(d.Mean-9.4) > 1e-9 {
		t.Errorf("diff = %+v", d)
	}
	if DiffCI95([]float64{1, 2, 3}, []float64{1, 2, 3}).Sign() != 0 {
		t.Error("equal samples differ")
	}
}

func TestParseRoleMetrics(t *testing.T) {
	pub := []byte(`{"role":"pub","handshake_ms":12.5,"ttfd_ms":30,"sent":10,"wire_bytes":5000,"wire_datagrams":40,
		"cpu_ms_per_msg":0.5,"cpu_pct":3,"peak_rss_kib":9000,"diag":{"frames_sent":{"STREAM":10,"ACK":5},"pto_count":0}}`)
	sub := []byte(`{"metrics":{"latency_ms":{"p50":5,"p95":7,"p99":9,"max":10},"throughput_msgs_s":100,"completion_s":0.1,"received":10},
		"latencies_ms":[4,5,6]}`)
	p, err := ParseRoleMetrics(pub)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ParseRoleMetrics(sub)
	if err != nil {
		t.Fatal(err)
	}
	var smp Sample
	Combine(&smp, p, s)
	m := smp.Metrics
	if m.HandshakeMs != 12.5 || m.TTFDMs != 30 || m.LatencyMs.P99 != 9 || m.DeliveryRatio != 1 || m.WireBytes != 5000 || m.PeakRSSKiB != 9000 {
		t.Errorf("metrics %+v", m)
	}
	if smp.Diag["pub.diag.frames_sent.ACK"] != 5 || smp.Diag["pub.wire_bytes_per_msg"] != 500 {
		t.Errorf("diag %v", smp.Diag)
	}
	if len(smp.Latencies) != 3 {
		t.Errorf("latencies %v", smp.Latencies)
	}
	for _, bad := range []string{`[1,2]`, `{`, ``} {
		if _, err := ParseRoleMetrics([]byte(bad)); err == nil {
			t.Errorf("no error for %q", bad)
		}
	}
	// A failed role (nil document) gives zeros, not a panic.
	var empty Sample
	Combine(&empty, nil, nil)
}

// synthetic builds samples for a small matrix with plausible values:
// HTTP/3 saves one RTT of TTFD.
func synthetic(repeats int, knobs bool) (*Summary, []Sample, map[string]LinkInfo) {
	links := map[string]LinkInfo{"lan": {Name: "lan"}, "nbiot": {Name: "nbiot", DelayMs: 300, RateKbps: 60, LossPct: 0}}
	tunings := []Tuning{{Name: "default", Profile: "default"}, {Name: "lean", Profile: "lean"}}
	if knobs {
		tunings = append(tunings, Tuning{Name: "lean/max_incoming_streams=10", Knob: "max_incoming_streams", Value: "10"})
	}
	spec := Spec{Protos: []string{ProtoH3, ProtoMQTT}, Modes: []string{ModeRequest, ModeStream}, Tunings: tunings,
		Profiles: []string{"lan", "nbiot"}, Payloads: []int{16, 256}, Repeat: repeats, Count: 20}
	rng := rand.New(rand.NewPCG(1, 2))
	var samples []Sample
	for _, r := range spec.Expand() {
		rtt := links[r.Profile].RTTMs()
		s := Sample{Config: r.Config, Repeat: r.Repeat, OK: true, Sent: 20, Received: 20}
		j := func(v float64) float64 { return v * (1 + 0.05*rng.NormFloat64()) }
		hs := j(2 + rtt)
		s.Metrics = Metrics{HandshakeMs: hs, TTFDMs: j(hs + 1 + rtt), DeliveryRatio: 1, ThroughputMsgsS: j(10), CompletionS: j(2),
			LatencyMs: Latency{P50: j(1 + rtt), P95: j(2 + rtt), P99: j(3 + rtt), Max: j(4 + rtt)},
			WireBytes: int64(j(float64(20 * (r.Payload + 120)))), WireDatagrams: 60, CPUMsPerMsg: j(0.2), CPUPct: j(2), PeakRSSKiB: int64(j(12000))}
		if r.Proto == ProtoMQTT {
			s.Metrics.TTFDMs += rtt
			s.Metrics.WireBytes = int64(j(float64(20 * (r.Payload + 60))))
		}
		s.Diag = map[string]float64{"pub.frames_sent.STREAM": 20, "pub.frames_sent.ACK": j(15)}
		if r.Mode == ModeRequest {
			s.Diag["pub.frames_received.MAX_STREAMS"] = 1
		}
		for i := 0; i < 20; i++ {
			s.Latencies = append(s.Latencies, j(1+rtt))
		}
		samples = append(samples, s)
	}
	// One failed repeat.
	samples = append(samples, Sample{Config: spec.Expand()[0].Config, Repeat: repeats + 1, OK: false, Err: "publisher: exit status 1"})
	sum := &Summary{Runs: Aggregate(samples), Host: HostInfo(), Version: "test", Tunings: tunings,
		Started: time.Unix(0, 0), Finished: time.Unix(60, 0), Workload: Workload{Count: 20, QoS: 1, Repeat: repeats}}
	return sum, samples, links
}

func TestAggregate(t *testing.T) {
	sum, samples, _ := synthetic(3, false)
	// 3 configurations-with-modes x 2 tunings x 2 profiles x 2 payloads.
	if len(sum.Runs) != 24 {
		t.Fatalf("%d summary runs, want 24", len(sum.Runs))
	}
	first := sum.Runs[0]
	if first.Repeat != 3 || first.Diag["runs_failed"] != 1 {
		t.Errorf("first run repeat %d failed %v", first.Repeat, first.Diag["runs_failed"])
	}
	var xs []float64
	for _, s := range samples {
		if s.OK && s.Config == first.Config() {
			xs = append(xs, s.Metrics.TTFDMs)
		}
	}
	if first.Metrics.TTFDMs != Median(xs) {
		t.Errorf("ttfd %v, want median %v", first.Metrics.TTFDMs, Median(xs))
	}
}

func TestCSVRoundTrip(t *testing.T) {
	_, samples, _ := synthetic(2, false)
	var buf bytes.Buffer
	if err := WriteCSV(&buf, samples); err != nil {
		t.Fatal(err)
	}
	head := strings.SplitN(buf.String(), "\n", 2)[0]
	for _, col := range []string{"proto", "publish_mode", "ttfd_ms", "latency_ms.p99", "peak_rss_kib", "diag.pub.frames_sent.ACK"} {
		if !strings.Contains(head, col) {
			t.Errorf("csv header lacks %s: %s", col, head)
		}
	}
	got, err := ReadCSV(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(samples) {
		t.Fatalf("%d rows back, want %d", len(got), len(samples))
	}
	for i := range got {
		a, b := got[i], samples[i]
		if a.Config != b.Config || a.OK != b.OK || a.Err != b.Err || math.Abs(a.Metrics.TTFDMs-b.Metrics.TTFDMs) > 1e-6 ||
			a.Metrics.WireBytes != b.Metrics.WireBytes || a.Diag["pub.frames_sent.ACK"] != b.Diag["pub.frames_sent.ACK"] {
			t.Fatalf("row %d: got %+v want %+v", i, a, b)
		}
	}
	if _, err := ReadCSV(strings.NewReader("a,b\n1,2\n")); err == nil {
		t.Error("no error for a foreign csv")
	}
}

func TestWriteReport(t *testing.T) {
	dir := t.TempDir()
	if d := os.Getenv("QUIOT_BENCH_REPORT_DIR"); d != "" {
		dir = d // keep the synthetic report for a look
	}
	sum, samples, links := synthetic(3, true)
	sum.Partial, sum.PartialReason = true, "interrupted"
	if err := WriteSummary(filepath.Join(dir, "summary.json"), sum); err != nil {
		t.Fatal(err)
	}
	back, err := ReadSummary(filepath.Join(dir, "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(back.Runs) != len(sum.Runs) || !back.Partial {
		t.Fatalf("summary round trip: %d runs partial %v", len(back.Runs), back.Partial)
	}
	if err := WriteReport(ReportInput{Summary: sum, Samples: samples, Links: links, Dir: dir}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	rep := string(b)
	for _, want := range []string{"PARTIAL RESULTS", "## Headline", "(a) Time to first data", "(b) Publish -> deliver",
		"(c) Resources", "lean profile, is HTTP/3 no worse", "Effect of each tuning knob", "lean/max_incoming_streams=10",
		"## Failed runs", "![latency CDF nbiot](latency_cdf_nbiot.png)"} {
		if !strings.Contains(rep, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	// Synthetic HTTP/3 saves exactly one RTT on nbiot: claim (a) holds there.
	if !strings.Contains(rep, "**yes**") {
		t.Error("claim (a) not confirmed on synthetic data")
	}
	for _, png := range []string{"ttfd", "cpu_per_msg", "wire_per_msg", "latency_cdf_lan", "latency_cdf_nbiot"} {
		st, err := os.Stat(filepath.Join(dir, png+".png"))
		if err != nil || st.Size() < 1000 {
			t.Errorf("plot %s: %v", png, err)
		}
	}
	var head bytes.Buffer
	if err := WriteHeadline(&head, sum); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(head.String(), "MQTT/QUIC") || !strings.Contains(head.String(), "HTTP/3 stream") {
		t.Errorf("headline:\n%s", head.String())
	}
}

func TestParseCPUModel(t *testing.T) {
	tests := []struct{ in, want string }{
		{"processor\t: 0\nmodel name\t: Intel(R) Xeon(R)\n", "Intel(R) Xeon(R)"},
		{"processor : 0\nHardware : BCM2835\nModel : Raspberry Pi Zero W Rev 1.1\n", "BCM2835"},
		{"", ""},
	}
	for _, tt := range tests {
		if got := parseCPUModel(tt.in); got != tt.want {
			t.Errorf("parseCPUModel(%q) = %q want %q", tt.in, got, tt.want)
		}
	}
}

func TestWriteComparison(t *testing.T) {
	sum, samples, links := synthetic(3, false)
	var buf bytes.Buffer
	if err := WriteComparison(&buf, sum, samples, links); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	// Synthetic HTTP/3 saves one 600 ms RTT on nbiot.
	if !strings.Contains(out, "nbiot, lean: HTTP/3 request vs MQTT/QUIC") || !strings.Contains(out, " RTT)") {
		t.Errorf("comparison:\n%s", out)
	}
}
