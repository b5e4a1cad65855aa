package lab

import (
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quiot/quiot/probe/model"
	"github.com/quiot/quiot/probe/stats"
)

func logf(x float64) float64 { return math.Log(x) }

func TestRowsRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "conditions.csv")
	want := synthRows(2)
	writeRows(t, path, want)
	got, err := ReadRows(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("%d rows, want %d", len(got), len(want))
	}
	for i := range got {
		if got[i].Condition != want[i].Condition || math.Abs(got[i].Stats.P50-want[i].Stats.P50) > 1e-3 {
			t.Fatalf("row %d: got %+v want %+v", i, got[i].Condition, want[i].Condition)
		}
	}
}

func TestParseRowsErrors(t *testing.T) {
	tests := []struct{ name, in string }{
		{"empty", ""},
		{"missing column", "id,path\nc1,ovs\n"},
		{"bad number", "id,path,size_bytes,rate_pps,flows,p50_us\nc1,ovs,abc,1,1,1\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := ParseRows(strings.NewReader(tt.in)); err == nil {
				t.Fatal("want error")
			}
		})
	}
}

func TestAnalyzeSynthetic(t *testing.T) {
	dir := t.TempDir()
	writeRows(t, filepath.Join(dir, "conditions.csv"), synthRows(3))
	// Samples for the CDF plot of two conditions.
	if err := os.MkdirAll(filepath.Join(dir, "samples"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "distributions"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"floor", "c001"} {
		d := []time.Duration{5 * time.Microsecond, 7 * time.Microsecond, 30 * time.Microsecond}
		if err := writeSamples(filepath.Join(dir, "samples", id+".csv"), d); err != nil {
			t.Fatal(err)
		}
		if err := writeDistribution(filepath.Join(dir, "distributions", id+".csv"), stats.Micros(d)); err != nil {
			t.Fatal(err)
		}
	}
	var sum Summary
	if err := Analyze(dir, AnalyzeOptions{Summary: &sum}); err != nil {
		t.Fatal(err)
	}
	m, err := model.Load(filepath.Join(dir, "model.json"))
	if err != nil {
		t.Fatal(err)
	}
	if m.R2 < 0.9 || m.FloorUS != 6 || m.Datapath != "netdev" || m.OVSVersion != "3.1.0" {
		t.Fatalf("model: r2 %.3f floor %v dp %q ver %q terms %v", m.R2, m.FloorUS, m.Datapath, m.OVSVersion, m.Terms)
	}
	if sum.R2 != m.R2 {
		t.Fatal("summary not filled")
	}
	for _, f := range []string{"report.md", "delay_vs_size.png", "delay_vs_rate.png", "delay_vs_flows.png", "delay_vs_rules.png", "delay_vs_memory.png", "cdf.png", "fitted_vs_measured.png", "distributions/index.csv"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s missing or empty: %v", f, err)
		}
	}
	rep, _ := os.ReadFile(filepath.Join(dir, "report.md"))
	for _, want := range []string{"Probe floor", "nested cross-validation", "optimism", "How the delay depends on each factor",
		"### Frame size", "### OpenFlow rules", "### Memory limit", "### Cold vs warm", "Simulator tables checked", "bootstrap mean"} {
		if !strings.Contains(string(rep), want) {
			t.Errorf("report lacks %q:\n%s", want, rep)
		}
	}
	if m.CV == nil || m.Bootstrap == nil || m.CV.OptimismR2 == 0 {
		t.Errorf("model.json lacks the nested CV or bootstrap report: %+v", m)
	}
	if st, err := os.Stat(filepath.Join(dir, "simcheck.csv")); err != nil || st.Size() == 0 {
		t.Errorf("simcheck.csv missing: %v", err)
	}
}

// TestAnalyzeResummarize: --resummarize recomputes a row's statistics from
// its samples with the block bootstrap (an autocorrelated sequence gets a
// block longer than 1 and a wider interval than the independent
// bootstrap's) and rewrites conditions.csv; rows without samples keep theirs.
func TestAnalyzeResummarize(t *testing.T) {
	dir := t.TempDir()
	rows := synthRows(4)
	writeRows(t, filepath.Join(dir, "conditions.csv"), rows)
	if err := os.MkdirAll(filepath.Join(dir, "samples"), 0o755); err != nil {
		t.Fatal(err)
	}
	// c001: 3000 packets whose delay follows a slow AR(1) (queue episodes).
	rng := rand.New(rand.NewPCG(9, 9))
	d := make([]time.Duration, 3000)
	v := 0.0
	for i := range d {
		v = 0.95*v + rng.NormFloat64()
		d[i] = time.Duration((50 + 5*v) * float64(time.Microsecond))
	}
	if err := writeSamples(filepath.Join(dir, "samples", "c001.csv"), d); err != nil {
		t.Fatal(err)
	}
	// A run's warnings (warnings.txt) reach a report redrawn later.
	if err := writeWarnings(filepath.Join(dir, "warnings.txt"), []string{"c009 skipped: memory limit 20 MiB is not above what ovs-vswitchd uses"}); err != nil {
		t.Fatal(err)
	}
	if err := Analyze(dir, AnalyzeOptions{Resummarize: true, Resamples: 200, NoPlots: true, Bootstrap: -1}); err != nil {
		t.Fatal(err)
	}
	if rep, err := os.ReadFile(filepath.Join(dir, "report.md")); err != nil || !strings.Contains(string(rep), "- c009 skipped: memory limit 20 MiB") {
		t.Fatalf("report lacks the run's warning (%v)", err)
	}
	got, err := ReadRows(filepath.Join(dir, "conditions.csv"))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(rows) {
		t.Fatalf("%d rows after resummarize, want %d", len(got), len(rows))
	}
	iid, err := stats.Summarize(stats.Micros(d), stats.Options{Resamples: 200, Block: 1})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range got {
		switch r.ID {
		case "c001":
			if r.Stats.N != 3000 || r.Stats.Block < 5 {
				t.Fatalf("c001 not resummarized: n %d block %d", r.Stats.N, r.Stats.Block)
			}
			if w, wi := r.Stats.MeanCI.Hi-r.Stats.MeanCI.Lo, iid.MeanCI.Hi-iid.MeanCI.Lo; w < 2*wi {
				t.Fatalf("block CI width %.3f not wider than twice the independent one %.3f", w, wi)
			}
		default:
			if r.Stats.N != rows[i].Stats.N || r.Stats.Block != 0 {
				t.Fatalf("row %s changed without samples: %+v", r.ID, r.Stats)
			}
		}
	}
}

func TestRepresentative(t *testing.T) {
	mk := func(id string, rep int, p50 float64) Row {
		return Row{Condition: Condition{ID: id}, Repeat: rep, Stats: stats.Summary{P50: p50}}
	}
	rows := []Row{mk("c1", 1, 50), mk("c2", 1, 10), mk("c1", 2, 9000), mk("c1", 3, 60), mk("c2", 2, 12)}
	got := Representative(rows, "")
	if len(got) != 2 || got[0].ID != "c1" || got[0].Stats.P50 != 60 || got[1].Stats.P50 != 10 {
		t.Fatalf("Representative = %+v", got)
	}
	// A repeat that failed (ovs-vswitchd died: no packets) stands for its
	// condition only when every repeat failed; the error survives the file.
	failed := Row{Condition: Condition{ID: "c3"}, Repeat: 1, Error: "ovs-vswitchd died during the condition"}
	ok := Row{Condition: Condition{ID: "c3"}, Repeat: 2, Stats: stats.Summary{N: 100, P50: 40}}
	if got := Representative([]Row{failed, ok}, ""); len(got) != 1 || got[0].Stats.N != 100 {
		t.Fatalf("Representative picked a failed repeat: %+v", got)
	}
	if got := Representative([]Row{failed}, ""); len(got) != 1 || got[0].Error == "" {
		t.Fatalf("Representative of a failed condition: %+v", got)
	}
	path := filepath.Join(t.TempDir(), "conditions.csv")
	writeRows(t, path, []Row{failed, ok})
	back, err := ReadRows(path)
	if err != nil || len(back) != 2 || back[0].Error != failed.Error || back[1].Error != "" {
		t.Fatalf("error column round trip: %+v %v", back, err)
	}
	if mk("c1", 1, 0).FileID() != "c1" || mk("c1", 3, 0).FileID() != "c1-r3" {
		t.Fatal("FileID")
	}
}

func TestSweep(t *testing.T) {
	q := QuickSweep()
	if err := q.Validate(); err != nil {
		t.Fatal(err)
	}
	conds := q.Conditions()
	if n := len(conds); n < 10 || n > 40 {
		t.Fatalf("quick sweep has %d conditions", n)
	}
	seen := map[Condition]bool{}
	for _, c := range conds {
		k := c
		k.ID = ""
		if seen[k] {
			t.Fatalf("duplicate condition %+v", c)
		}
		seen[k] = true
	}
	if err := FullSweep().Validate(); err != nil {
		t.Fatal(err)
	}
	bad := []Sweep{
		{},
		{Sizes: []int{10}, Rates: []float64{1}, Flows: []int{1}, Duration: time.Second},
		{Sizes: []int{64}, Rates: []float64{-1}, Flows: []int{1}, Duration: time.Second},
		{Sizes: []int{64}, Rates: []float64{1}, Flows: []int{0}, Duration: time.Second},
		{Sizes: []int{64}, Rates: []float64{1}, Flows: []int{1}, Mems: []int64{4 << 20}, Duration: time.Second},
		{Sizes: []int{64}, Rates: []float64{1}, Flows: []int{1}},
	}
	for i, s := range bad {
		if err := s.Validate(); err == nil {
			t.Errorf("sweep %d should be invalid", i)
		}
	}
}

func FuzzParseRows(f *testing.F) {
	f.Add("id,path,size_bytes,rate_pps,flows,p50_us\nc1,ovs,128,1000,1,55.5\n")
	f.Add("id,path,size_bytes,rate_pps,flows,p50_us,cold\nfloor,floor,64,1,1,9,1\n")
	f.Fuzz(func(t *testing.T, s string) {
		rows, err := ParseRows(strings.NewReader(s))
		if err != nil {
			return
		}
		for _, r := range rows {
			_ = FactorValues(r.Condition)
		}
	})
}
