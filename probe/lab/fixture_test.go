package lab

import (
	"flag"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/quiot/quiot/probe/stats"
)

var update = flag.Bool("update", false, "rewrite testdata/conditions.csv")

// synthRows makes the rows of a sweep whose p50 follows a known law:
// 20 + 0.01*size + 1.5*rate_kpps + 3*log(flows) + 0.002*rules + noise.
func synthRows(seed uint64) []Row {
	sw := QuickSweep()
	sw.Rates = []float64{1000, 5000, 10000, 20000}
	sw.Flows = []int{1, 16, 64}
	rng := rand.New(rand.NewPCG(seed, seed))
	rows := []Row{{Condition: Condition{ID: "floor", Path: "floor", Size: 128, Rate: 1000, Flows: 1},
		Stats: stats.Summary{N: 2000, Min: 4, P50: 6, P99: 9, P999: 12, PDV: 8, Mean: 6.2, Max: 15}, Datapath: "none", OVSVersion: "3.1.0"}}
	for _, c := range sw.Conditions() {
		x := FactorValues(c)
		p50 := 20 + 0.01*x["size_bytes"] + 1.5*x["rate_kpps"] + 3*logf(x["flows"]) + 0.002*x["rules"] + rng.NormFloat64()
		if c.Cold {
			p50 += 15
		}
		s := stats.Summary{N: 2000, Min: p50 * 0.6, P50: p50, P99: p50 * 2, P999: p50 * 3, Mean: p50 * 1.1, Max: p50 * 4}
		s.PDV = s.P999 - s.Min
		s.P50CI = stats.CI{Lo: p50 - 0.5, Hi: p50 + 0.5}
		rows = append(rows, Row{Condition: c, DurationS: 2, Sent: 2000, Matched: 2000, Stats: s, Datapath: "netdev", OVSVersion: "3.1.0"})
	}
	return rows
}

func writeRows(t *testing.T, path string, rows []Row) {
	t.Helper()
	w, err := CreateRows(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if err := w.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestFixture keeps testdata/conditions.csv (used by the ovsprobe fit and
// predict tests) in step with the row format; -update rewrites it.
func TestFixture(t *testing.T) {
	path := filepath.Join("..", "testdata", "conditions.csv")
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		writeRows(t, path, synthRows(1))
	}
	rows, err := ReadRows(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != len(synthRows(1)) {
		t.Fatalf("fixture has %d rows, want %d (run go test -run TestFixture -update)", len(rows), len(synthRows(1)))
	}
}
