package bench

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/quiot/quiot/broker/auth"
)

// The test binary doubles as a fake quiot for the runner's own tests: with
// QUIOT_BENCH_FAKE_ROLE set it behaves like `quiot broker|pub|sub` just
// enough (readiness lines, metrics files, SIGINT) to exercise process
// management without the real roles.
func TestMain(m *testing.M) {
	if os.Getenv("QUIOT_BENCH_FAKE_ROLE") != "" {
		os.Exit(fakeRole(os.Args[1:]))
	}
	os.Exit(m.Run())
}

func fakeRole(args []string) int {
	if len(args) == 0 {
		return 2
	}
	role := args[0]
	fs := flag.NewFlagSet(role, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	listen := fs.String("listen", "", "")
	mq := fs.String("mqtt-quic", "", "")
	out := fs.String("metrics-out", "", "")
	count := fs.Int("count", 1, "")
	for _, f := range []string{"tuning", "metrics-listen", "broker", "topic", "format", "mode", "rate", "qos", "payload-size", "inflight", "config", "auth", "token"} {
		fs.String(f, "", "")
	}
	fs.Bool("auth-every-request", false, "")
	fs.Bool("dev", false, "")
	fs.Bool("insecure", false, "")
	fs.Bool("quiet", false, "")
	if err := fs.Parse(args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if os.Getenv("QUIOT_BENCH_FAKE_FAIL") == role {
		fmt.Fprintln(os.Stderr, "fake "+role+" failing as asked")
		return 1
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	// The role's arguments go to its log, for tests that check them.
	fmt.Fprintf(os.Stderr, "fake %s args: %s\n", role, strings.Join(args, " "))
	switch role {
	case "broker":
		if f := os.Getenv("QUIOT_BENCH_FAKE_BROKER_FAIL_ONCE"); f != "" {
			if _, err := os.Stat(f); err != nil {
				_ = os.WriteFile(f, nil, 0o644)
				fmt.Fprintln(os.Stderr, "listen udp: address already in use")
				return 1
			}
		}
		fmt.Printf("broker listening: https://%s (HTTP/3, UDP)\n", *listen)
		if *mq != "" {
			fmt.Printf("mqtt listening: mqtt-quic://%s (MQTT over QUIC, UDP)\n", *mq)
		}
		<-sig
		return 0
	case "sub":
		fmt.Fprintln(os.Stderr, "level=INFO msg=subscribed")
		if _, err := os.Stat(os.Getenv("QUIOT_BENCH_FAKE_HANG_FILE")); err == nil {
			<-sig // the bench must stop it
		} else {
			// Wait for the publisher's metrics, then report everything received.
			pub := filepath.Join(filepath.Dir(*out), "pub.json")
			for {
				if _, err := os.Stat(pub); err == nil {
					break
				}
				select {
				case <-sig:
					// A real subscriber stopped by the bench writes what it
					// got; so does this one, once the publisher has finished
					// (a slow, loaded host may be late to notice pub.json).
					if _, err := os.Stat(pub); err == nil {
						break
					}
					return 130
				case <-time.After(5 * time.Millisecond):
				}
			}
		}
		doc := map[string]any{"role": "sub", "received": *count, "latency_ms": map[string]any{"p50": 1.5, "p95": 2, "p99": 3, "max": 4},
			"throughput_msgs_s": 100, "completion_s": 0.2, "latencies_ms": []float64{1, 1.5, 2}}
		return writeFake(*out, doc)
	case "pub":
		doc := map[string]any{"role": "pub", "sent": *count, "handshake_ms": 1.2, "ttfd_ms": 2.5, "wire_bytes": 9000,
			"wire_datagrams": 30, "cpu_ms_per_msg": 0.3, "cpu_pct": 5, "peak_rss_kib": 12000,
			"diag": map[string]any{"frames_sent": map[string]any{"STREAM": *count, "ACK": 4}}}
		return writeFake(*out, doc)
	}
	return 2
}

func writeFake(path string, doc map[string]any) int {
	b, _ := json.Marshal(doc)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// directLink is a Link without impairment: clients talk to the broker.
type directLink struct{}

func (directLink) Info(p string) (LinkInfo, bool) { return LinkInfo{Name: p}, p == "lan" }
func (directLink) Start(_ context.Context, _ string, upstream string, _ int64) (string, io.Closer, error) {
	return upstream, io.NopCloser(nil), nil
}

// fakeOptions runs the test binary as every role; marker tags the
// processes so the test can find leftovers.
func fakeOptions(t *testing.T, marker string, env ...string) Options {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { killMarked(marker) })
	return Options{
		Binary: exe, Out: t.TempDir(), Link: directLink{},
		Env: append([]string{"QUIOT_BENCH_FAKE_ROLE=1", "QUIOT_BENCH_MARKER=" + marker}, env...),
		Spec: Spec{Protos: []string{ProtoH3, ProtoMQTT}, Modes: []string{ModeRequest, ModeStream},
			Tunings: []Tuning{{Name: "lean", Profile: "lean"}}, Profiles: []string{"lan"}, Payloads: []int{16}, Repeat: 2, Count: 5, QoS: 1},
	}
}

// marked lists the PIDs of processes whose environment holds the marker.
func marked(marker string) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		var pid int
		if _, err := fmt.Sscanf(e.Name(), "%d", &pid); err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err == nil && strings.Contains(string(b), "QUIOT_BENCH_MARKER="+marker+"\x00") {
			pids = append(pids, pid)
		}
	}
	return pids
}

func killMarked(marker string) {
	for _, p := range marked(marker) {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
}

// requireNoLeftovers fails when a role process of this test still runs.
func requireNoLeftovers(t *testing.T, marker string) {
	t.Helper()
	if pids := marked(marker); len(pids) > 0 {
		t.Fatalf("role processes left behind: %v", pids)
	}
}

func TestRunFakeRoles(t *testing.T) {
	o := fakeOptions(t, "ok-"+t.Name())
	res, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	requireNoLeftovers(t, "ok-"+t.Name())
	sum, err := ReadSummary(filepath.Join(o.Out, "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	if sum.Partial || len(sum.Runs) != 3 || len(res.Samples) != 6 {
		t.Fatalf("partial %v (%s), %d runs, %d samples", sum.Partial, sum.PartialReason, len(sum.Runs), len(res.Samples))
	}
	for _, r := range sum.Runs {
		if r.Repeat != 2 || r.Metrics.TTFDMs != 2.5 || r.Metrics.DeliveryRatio != 1 || r.Metrics.LatencyMs.P99 != 3 || r.Diag["pub.diag.frames_sent.ACK"] != 4 {
			t.Errorf("run %+v", r)
		}
	}
	for _, f := range []string{"runs.csv", "report.md", "ttfd.png", "runs/h3-request-lean-lan-16-r1/broker.log"} {
		if _, err := os.Stat(filepath.Join(o.Out, f)); err != nil {
			t.Error(err)
		}
	}
}

func TestRunFailedRole(t *testing.T) {
	marker := "fail-" + t.Name()
	o := fakeOptions(t, marker, "QUIOT_BENCH_FAKE_FAIL=pub")
	o.MaxFailures = 2
	res, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	requireNoLeftovers(t, marker)
	if len(res.Samples) != 2 || res.Samples[0].OK || !strings.Contains(res.Samples[0].Err, "failing as asked") {
		t.Fatalf("samples %+v", res.Samples)
	}
	sum, err := ReadSummary(filepath.Join(o.Out, "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !sum.Partial || !strings.Contains(sum.PartialReason, "aborted") {
		t.Fatalf("partial %v %q", sum.Partial, sum.PartialReason)
	}
	rep, err := os.ReadFile(filepath.Join(o.Out, "report.md"))
	if err != nil || !strings.Contains(string(rep), "PARTIAL") || !strings.Contains(string(rep), "## Failed runs") {
		t.Fatalf("report: %v", err)
	}
}

// TestRunInterrupted cancels the bench (as Ctrl-C does) while a subscriber
// hangs: every process must be gone and the results so far written,
// marked partial.
func TestRunInterrupted(t *testing.T) {
	marker := "int-" + t.Name()
	hang := filepath.Join(t.TempDir(), "hang")
	o := fakeOptions(t, marker, "QUIOT_BENCH_FAKE_HANG_FILE="+hang)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	o.OnRun = func(done, total int) {
		if done == 2 {
			// From now on subscribers hang; cancel while the third run waits.
			if err := os.WriteFile(hang, nil, 0o644); err != nil {
				t.Error(err)
			}
			go func() {
				for len(marked(marker)) < 2 { // the broker and the hanging subscriber
					if ctx.Err() != nil {
						return
					}
					time.Sleep(5 * time.Millisecond)
				}
				cancel()
			}()
		}
	}
	res, err := Run(ctx, o)
	if !errors.Is(err, ErrInterrupted) {
		t.Fatalf("err %v, want ErrInterrupted", err)
	}
	requireNoLeftovers(t, marker)
	if len(res.Samples) != 2 {
		t.Fatalf("%d samples, want the 2 finished ones", len(res.Samples))
	}
	sum, err := ReadSummary(filepath.Join(o.Out, "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !sum.Partial || !strings.Contains(sum.PartialReason, "interrupted after 2 of 6") || len(sum.Runs) != 2 {
		t.Fatalf("summary partial %v %q, %d runs", sum.Partial, sum.PartialReason, len(sum.Runs))
	}
	rep, err := os.ReadFile(filepath.Join(o.Out, "report.md"))
	if err != nil || !strings.Contains(string(rep), "PARTIAL RESULTS") {
		t.Fatalf("report not marked partial: %v", err)
	}
}

// TestRunBrokerPortRetry: a broker that loses its port before binding is
// restarted on new ports; the run succeeds.
func TestRunBrokerPortRetry(t *testing.T) {
	marker := "retry-" + t.Name()
	o := fakeOptions(t, marker, "QUIOT_BENCH_FAKE_BROKER_FAIL_ONCE="+filepath.Join(t.TempDir(), "failed-once"))
	o.Spec.Protos, o.Spec.Repeat = []string{ProtoMQTT}, 1
	o.NoReport = true
	res, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	requireNoLeftovers(t, marker)
	if len(res.Samples) != 1 || !res.Samples[0].OK {
		t.Fatalf("samples %+v", res.Samples)
	}
}

// TestRunAuthKnobArgs runs the auth knob's tunings with fake roles and checks
// the role arguments: lean without credentials; both variants with the
// broker on an ACL file in the run directory that lets the token publish and
// subscribe the run's topic, the token for both clients, and
// --auth-every-request only for per-request.
func TestRunAuthKnobArgs(t *testing.T) {
	knobs, err := SelectKnobs([]string{"auth"})
	if err != nil {
		t.Fatal(err)
	}
	o := fakeOptions(t, "auth-"+t.Name())
	o.Spec.Protos, o.Spec.Modes, o.Spec.Repeat = []string{ProtoH3}, []string{ModeRequest}, 1
	o.Spec.Tunings = KnobTunings(knobs)
	if _, err := Run(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		tuning         string
		auth, everyReq bool
	}{
		{"lean", false, false},
		{"lean_auth-per-connection", true, false},
		{"lean_auth-per-request", true, true},
	}
	for _, tt := range tests {
		t.Run(tt.tuning, func(t *testing.T) {
			dir := filepath.Join(o.Out, "runs", "h3-request-"+tt.tuning+"-lan-16-r1")
			read := func(name string) string {
				b, err := os.ReadFile(filepath.Join(dir, name))
				if err != nil {
					t.Fatal(err)
				}
				return string(b)
			}
			broker, pub, sub := read("broker.log"), read("pub.log"), read("sub.log")
			aclPath := filepath.Join(dir, "auth.toml")
			if got := strings.Contains(broker, "--auth "+aclPath); got != tt.auth {
				t.Errorf("broker --auth %s: %v, want %v\n%s", aclPath, got, tt.auth, broker)
			}
			tok := "--token " + benchToken
			if strings.Contains(pub, tok) != tt.auth || strings.Contains(sub, tok) != tt.auth {
				t.Errorf("clients' token: want %v\npub: %s\nsub: %s", tt.auth, pub, sub)
			}
			if got := strings.Contains(pub, "--auth-every-request"); got != tt.everyReq {
				t.Errorf("pub --auth-every-request: %v, want %v\n%s", got, tt.everyReq, pub)
			}
			if !tt.auth {
				return
			}
			acl, err := auth.Load(aclPath)
			if err != nil {
				t.Fatal(err)
			}
			id, ok := acl.Token(benchToken)
			if !ok || !acl.Allow(id, auth.Publish, "bench/1/x") || !acl.Allow(id, auth.Subscribe, "bench/1/x") || acl.Anonymous() {
				t.Errorf("ACL: token -> %q %v, or bench/ not allowed, or anonymous clients allowed", id, ok)
			}
		})
	}
}
