package bench

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/quiot/quiot/internal/netimpair"
	"github.com/quiot/quiot/internal/testenv"
)

// buildQuiot builds the quiot binary for end-to-end tests.
func buildQuiot(t *testing.T) string {
	t.Helper()
	goBin := testenv.RequireTool(t, "go")
	bin := filepath.Join(t.TempDir(), "quiot")
	cmd := exec.Command(goBin, "build", "-o", bin, "github.com/quiot/quiot/device")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// e2eLink has a clean link and one with 25 ms each way.
func e2eLink() *ImpairLink {
	d := netimpair.Direction{Delay: 25 * time.Millisecond}
	return &ImpairLink{Profiles: map[string]LinkProfile{
		"lan":     {Info: LinkInfo{Name: "lan", Desc: "no impairment"}},
		"delay25": {Info: LinkInfo{Name: "delay25", DelayMs: 25, Desc: "25 ms each way"}, Up: d, Down: d},
	}}
}

// TestBenchEndToEnd runs a tiny matrix with the real roles (broker, pub,
// sub as processes of a freshly built quiot) through the link emulator and
// checks that summary.json holds every run and every metric with sane
// values.
func TestBenchEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds quiot and runs real roles")
	}
	bin := buildQuiot(t)
	marker := "e2e-" + t.Name()
	t.Cleanup(func() { killMarked(marker) })
	const count, payload, delay = 5, 64, 25.0
	o := Options{
		Binary: bin, Out: t.TempDir(), Link: e2eLink(), Env: []string{"QUIOT_BENCH_MARKER=" + marker},
		Spec: Spec{Protos: []string{ProtoH3, ProtoMQTT}, Modes: []string{ModeRequest, ModeStream},
			Tunings: []Tuning{{Name: "lean", Profile: "lean"}}, Profiles: []string{"lan", "delay25"},
			Payloads: []int{payload}, Repeat: 1, Count: count, QoS: 1},
	}
	if d := os.Getenv("QUIOT_BENCH_E2E_OUT"); d != "" {
		o.Out = d // keep the results for a look
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := Run(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	requireNoLeftovers(t, marker)
	for _, s := range res.Samples {
		if !s.OK {
			t.Errorf("run %s failed: %s", s.Key(), s.Err)
		}
	}
	sum, err := ReadSummary(filepath.Join(o.Out, "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	if sum.Partial || len(sum.Runs) != 6 {
		t.Fatalf("partial %v (%s), %d runs, want 6", sum.Partial, sum.PartialReason, len(sum.Runs))
	}
	for _, r := range sum.Runs {
		m := r.Metrics
		name := r.Config().Key()
		check := func(what string, ok bool) {
			if !ok {
				t.Errorf("%s: %s (metrics %+v)", name, what, m)
			}
		}
		check("handshake_ms > 0", m.HandshakeMs > 0)
		check("ttfd_ms >= handshake_ms", m.TTFDMs >= m.HandshakeMs)
		check("latency percentiles ordered and positive", m.LatencyMs.P50 > 0 && m.LatencyMs.P95 >= m.LatencyMs.P50 && m.LatencyMs.P99 >= m.LatencyMs.P95 && m.LatencyMs.Max >= m.LatencyMs.P99)
		check("throughput > 0", m.ThroughputMsgsS > 0)
		check("completion_s > 0", m.CompletionS > 0)
		check("wire_bytes above the payload sent", m.WireBytes > count*payload)
		check("wire_datagrams >= count", m.WireDatagrams >= count)
		check("cpu figures not negative", m.CPUMsPerMsg >= 0 && m.CPUPct >= 0)
		check("peak_rss_kib of a Go process", m.PeakRSSKiB > 1000)
		check("delivery_ratio 1", m.DeliveryRatio == 1)
		if r.Profile == "delay25" {
			// Publisher uplink and subscriber downlink each add the delay.
			check("latency p50 >= both one-way delays", m.LatencyMs.P50 >= 2*delay)
			check("handshake >= one RTT", m.HandshakeMs >= 2*delay)
			check("ttfd >= two RTTs", m.TTFDMs >= 4*delay)
		}
	}
	for _, f := range []string{"runs.csv", "report.md", "ttfd.png", "latency_cdf_delay25.png"} {
		if _, err := os.Stat(filepath.Join(o.Out, f)); err != nil {
			t.Error(err)
		}
	}
}
