package model

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"testing"
)

// TestNestedReport checks that the figures model.json carries agree with
// each other: r2/rmse_us are the outer means, the optimism is inner minus
// outer, fractions lie in [0, 1], and the report survives a JSON round trip.
func TestNestedReport(t *testing.T) {
	grid := map[string][]float64{"size_bytes": {64, 512, 1500}, "rate_kpps": {1, 5, 10, 20}, "flows": {1, 16}}
	obs := synth(t, map[string]float64{Intercept: 20, "rate_kpps": 0.5, "size_bytes": 0.01}, grid, 1, 3)
	m, err := Fit(obs, FitOptions{Transform: "none", Repeats: 3, Bootstrap: 50})
	if err != nil {
		t.Fatal(err)
	}
	cv := m.CV
	if cv == nil || m.Bootstrap == nil {
		t.Fatalf("no CV or bootstrap report: %+v", m)
	}
	if cv.OuterFolds != 5 || cv.InnerFolds != 5 || cv.Repeats != 3 || cv.R2.N != 3 || cv.FoldRMSEus.N != 15 {
		t.Fatalf("design %d/%d/%d, spreads n %d/%d", cv.OuterFolds, cv.InnerFolds, cv.Repeats, cv.R2.N, cv.FoldRMSEus.N)
	}
	if m.R2 != cv.R2.Mean || m.RMSEus != cv.RMSEus.Mean {
		t.Fatalf("r2/rmse_us %v/%v are not the outer means %v/%v", m.R2, m.RMSEus, cv.R2.Mean, cv.RMSEus.Mean)
	}
	if math.Abs(cv.OptimismR2-(cv.InnerR2-m.R2)) > 1e-12 || math.Abs(cv.OptimismRMSEus-(m.RMSEus-cv.InnerRMSEus)) > 1e-12 {
		t.Fatalf("optimism %+v", cv)
	}
	if !(cv.R2.Min <= cv.R2.Mean && cv.R2.Mean <= cv.R2.Max) || cv.RMSEus.SD < 0 {
		t.Fatalf("spread %+v", cv.R2)
	}
	for _, f := range []map[string]float64{cv.Selected, cv.Transforms, m.Bootstrap.Selected, m.Bootstrap.Transforms} {
		for k, v := range f {
			if v <= 0 || v > 1 {
				t.Fatalf("fraction %s = %v", k, v)
			}
		}
	}
	if len(m.OuterPredictions) != len(obs) {
		t.Fatalf("%d outer predictions for %d conditions", len(m.OuterPredictions), len(obs))
	}
	for _, term := range m.Terms {
		if _, ok := m.CI95[term]; !ok {
			t.Fatalf("no CI for %s", term)
		}
		if _, ok := m.CI95GivenTerms[term]; !ok {
			t.Fatalf("no t-interval for %s", term)
		}
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	m2, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	if m2.CV == nil || m2.CV.R2 != cv.R2 || m2.Bootstrap == nil || m2.Bootstrap.Used != m.Bootstrap.Used {
		t.Fatalf("JSON round trip lost the reports: %s", b)
	}
}

// TestAssignFoldsStratified: conditions sharing a rare factor level (here
// 3 cold conditions among 30) land in different folds, for any seed, so
// that no training part lacks them; copies of one observation share a fold.
func TestAssignFoldsStratified(t *testing.T) {
	var obs []Observation
	for i := range 30 {
		cold := 0.0
		if i >= 27 {
			cold = 1
		}
		obs = append(obs, Observation{X: map[string]float64{"rate_kpps": float64(i % 6), "cold": cold}})
	}
	p := &pipeline{strata: strata(obs, []string{"cold", "rate_kpps"})}
	if p.strata == nil || len(p.strata[0]) != 1 {
		t.Fatalf("strata %v: want cold only", p.strata)
	}
	rows := []int{}
	for i := range obs {
		rows = append(rows, i)
	}
	rows = append(rows, 28, 28, 3)
	for seed := uint64(1); seed <= 20; seed++ {
		f, k := p.assignFolds(rows, 5, seed)
		if k != 5 {
			t.Fatalf("k = %d", k)
		}
		if f[27] == f[28] || f[28] == f[29] || f[27] == f[29] {
			t.Fatalf("seed %d: cold conditions in folds %d %d %d", seed, f[27], f[28], f[29])
		}
		if f[30] != f[28] || f[31] != f[28] || f[32] != f[3] {
			t.Fatalf("seed %d: copies in different folds", seed)
		}
	}
	// Without rare factors the assignment is random: seeds differ.
	q := &pipeline{}
	a, _ := q.assignFolds(rows[:30], 5, 1)
	b, _ := q.assignFolds(rows[:30], 5, 2)
	same := true
	for i := range a {
		same = same && a[i] == b[i]
	}
	if same {
		t.Fatal("different seeds gave the same folds")
	}
}

// TestLSQDropsCollinear: a duplicated or constant column gets coefficient
// 0 and the rest is the ordinary least-squares fit.
func TestLSQDropsCollinear(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	n := 40
	x := make([]float64, n)
	y := make([]float64, n)
	c := make([]float64, n)
	for i := range x {
		x[i] = float64(i)
		y[i] = 3 + 2*x[i] + 0.01*rng.NormFloat64()
		c[i] = 7
	}
	p := &pipeline{cols: [][]float64{x, x, c}, y: y}
	rows := make([]int, n)
	for i := range rows {
		rows[i] = i
	}
	beta := make([]float64, 4)
	if d := p.lsq([]int{0, 1, 2}, rows, y, beta); d != 2 {
		t.Fatalf("dropped %d columns, want 2", d)
	}
	if math.Abs(beta[0]-3) > 0.01 || math.Abs(beta[1]-2) > 0.001 || beta[2] != 0 || beta[3] != 0 {
		t.Fatalf("beta = %v", beta)
	}
	if p.fullRank([]int{0, 1}, rows) || !p.fullRank([]int{0}, rows) {
		t.Fatal("fullRank wrong")
	}
}
