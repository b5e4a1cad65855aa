package lab

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/quiot/quiot/internal/testenv"
	"github.com/quiot/quiot/probe/measure"
	"github.com/quiot/quiot/probe/model"
	"github.com/quiot/quiot/probe/ovs"
)

// TinySweep is a sweep of a few short conditions for tests.
func tinySweep() Sweep {
	return Sweep{
		Sizes: []int{128, 1024}, Rates: []float64{500, 2000}, Flows: []int{1}, Rules: []int{0},
		Mems: []int64{0}, CPUs: []float64{0}, Cold: true, Repeat: 2,
		Duration: 300 * time.Millisecond, Warmup: 100 * time.Millisecond,
	}
}

func needRoot(t *testing.T) {
	t.Helper()
	if err := ovs.CheckPrerequisites(""); err != nil {
		testenv.Unavailable(t, "lab run cannot run here: %v", err)
	}
}

func TestRunTiny(t *testing.T) {
	needRoot(t)
	out := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sum, err := Run(ctx, Options{Out: out, Sweep: tinySweep(), Resamples: 100})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if left, err := ovs.Leftovers(context.Background(), ovs.CleanupOptions{}); err != nil || len(left) > 0 {
			t.Errorf("left behind: %v (%v)", left, err)
		}
	})
	conds := tinySweep().Conditions()
	rows, err := ReadRows(filepath.Join(out, "conditions.csv"))
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2*len(conds)+1 || rows[0].Path != "floor" {
		t.Fatalf("%d rows, want floor + 2 x %d", len(rows), len(conds))
	}
	for _, r := range rows {
		if r.Stats.N == 0 || r.Matched == 0 || r.Stats.P50 <= 0 {
			t.Errorf("row %s incomplete: %+v", r.ID, r)
		}
		if r.Path == "ovs" && (r.Datapath != "netdev" || r.OVSVersion == "" || r.DPHit+r.DPMissed == 0 || r.OFRules < 2) {
			t.Errorf("row %s lacks OVS counters: %+v", r.ID, r)
		}
		if _, err := os.Stat(filepath.Join(out, "samples", r.FileID()+".csv")); err != nil {
			t.Error(err)
		}
		if _, err := os.Stat(filepath.Join(out, "distributions", r.FileID()+".csv")); err != nil {
			t.Error(err)
		}
	}
	m, err := model.Load(filepath.Join(out, "model.json"))
	if err != nil {
		t.Fatal(err)
	}
	if m.FloorUS <= 0 || m.Datapath != "netdev" || len(m.Terms) == 0 || m.NConditions != len(conds) {
		t.Fatalf("model: %+v", m)
	}
	if d := sum.FloorUS - m.FloorUS; d > 0.001 || d < -0.001 {
		t.Fatalf("summary floor %v, model %v", sum.FloorUS, m.FloorUS)
	}
	if _, err := os.Stat(filepath.Join(out, "report.md")); err != nil {
		t.Fatal(err)
	}
}

// TestRunNoTraffic checks that a path that carries nothing is a clear error
// and that the testbed is still torn down.
func TestRunNoTraffic(t *testing.T) {
	needRoot(t)
	deaf := func(ctx context.Context, o measure.Options, c measure.Condition) (*measure.Result, error) {
		return &measure.Result{Sent: 10}, nil
	}
	_, err := Run(context.Background(), Options{Out: t.TempDir(), Sweep: tinySweep(), Measure: deaf, NoPlots: true})
	if !errors.Is(err, ErrNoTraffic) {
		t.Fatalf("err = %v, want ErrNoTraffic", err)
	}
	if left, err := ovs.Leftovers(context.Background(), ovs.CleanupOptions{}); err != nil || len(left) > 0 {
		t.Errorf("left behind: %v (%v)", left, err)
	}
}

// TestRunCancelled checks that cancelling mid-run tears down.
func TestRunCancelled(t *testing.T) {
	needRoot(t)
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	slow := func(ctx2 context.Context, o measure.Options, c measure.Condition) (*measure.Result, error) {
		calls++
		if calls == 2 {
			cancel()
		}
		return measure.Run(ctx2, o, c)
	}
	_, err := Run(ctx, Options{Out: t.TempDir(), Sweep: tinySweep(), Measure: slow, NoPlots: true, Resamples: 50})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if left, err := ovs.Leftovers(context.Background(), ovs.CleanupOptions{}); err != nil || len(left) > 0 {
		t.Errorf("left behind: %v (%v)", left, err)
	}
}
