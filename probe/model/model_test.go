package model

import (
	"math"
	"math/rand/v2"
	"path/filepath"
	"sort"
	"testing"
)

// synth builds a factorial design and a response from known terms plus
// Gaussian noise.
func synth(t *testing.T, truth map[string]float64, grid map[string][]float64, noise float64, seed uint64) []Observation {
	t.Helper()
	obs := []Observation{{X: map[string]float64{}}}
	names := make([]string, 0, len(grid))
	for f := range grid {
		names = append(names, f)
	}
	sort.Strings(names)
	for _, f := range names {
		vals := grid[f]
		var next []Observation
		for _, o := range obs {
			for _, v := range vals {
				x := map[string]float64{f: v}
				for k, w := range o.X {
					x[k] = w
				}
				next = append(next, Observation{X: x})
			}
		}
		obs = next
	}
	rng := rand.New(rand.NewPCG(seed, seed))
	for i := range obs {
		y := 0.0
		for s, c := range truth {
			term, err := ParseTerm(s)
			if err != nil {
				t.Fatal(err)
			}
			v, err := term.Eval(obs[i].X)
			if err != nil {
				t.Fatal(err)
			}
			y += c * v
		}
		obs[i].Y = y + noise*rng.NormFloat64()
	}
	return obs
}

func TestFitRecoversKnownCoefficients(t *testing.T) {
	grid := map[string][]float64{
		"size_bytes": {64, 256, 512, 1024, 1500},
		"rate_kpps":  {1, 5, 10, 20, 40, 60},
		"flows":      {1, 16, 256},
	}
	tests := []struct {
		name       string
		truth      map[string]float64
		candidates []string // nil = generated
	}{
		{"given terms", map[string]float64{Intercept: 20, "size_bytes": 0.01, "rate_kpps": 0.5, "log(flows)": 4},
			[]string{"size_bytes", "rate_kpps", "log(flows)"}},
		{"selected terms", map[string]float64{Intercept: 20, "size_bytes": 0.01, "rate_kpps": 0.5, "log(flows)": 4}, nil},
		{"knee", map[string]float64{Intercept: 30, "rate_kpps": 0.3, "knee(rate_kpps,20)": 2}, nil},
		{"interaction", map[string]float64{Intercept: 10, "size_bytes": 0.005, "rate_kpps": 0.2, "size_bytes*rate_kpps": 0.001}, nil},
	}
	// Each case is fitted on 10 noise draws: the true terms must be chosen
	// in nearly all, and the 95 % intervals must cover the true coefficients
	// in about 95 % of (term, draw) pairs.
	const draws = 10
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			chosen, covered, total := 0, 0, 0
			for seed := uint64(1); seed <= draws; seed++ {
				obs := synth(t, tt.truth, grid, 0.5, seed)
				m, err := Fit(obs, FitOptions{Candidates: tt.candidates, MaxTerms: 6, Transform: "none", Repeats: 2, Bootstrap: 100})
				if err != nil {
					t.Fatal(err)
				}
				all := true
				for raw, want := range tt.truth {
					parsed, _ := ParseTerm(raw)
					term := parsed.String()
					if _, ok := m.Coefficients[term]; !ok {
						all = false
						continue
					}
					total++
					if ci := m.CI95[term]; ci[0] <= want && want <= ci[1] {
						covered++
					}
				}
				if all {
					chosen++
				}
				if m.R2 < 0.95 {
					t.Errorf("seed %d: held-out R2 = %.3f, want >= 0.95 (terms %v)", seed, m.R2, m.Terms)
				}
				if m.RMSEus > 1.0 {
					t.Errorf("seed %d: held-out RMSE = %.3f, want about the noise 0.5", seed, m.RMSEus)
				}
				x := map[string]float64{"size_bytes": 700, "rate_kpps": 30, "flows": 50}
				want := 0.0
				for s, c := range tt.truth {
					term, _ := ParseTerm(s)
					v, _ := term.Eval(x)
					want += c * v
				}
				got, err := m.Predict(x)
				if err != nil {
					t.Fatal(err)
				}
				if math.Abs(got-want) > 1.0 {
					t.Errorf("seed %d: Predict = %.2f, want %.2f", seed, got, want)
				}
			}
			if chosen < draws-1 {
				t.Errorf("true terms chosen in %d/%d draws", chosen, draws)
			}
			if float64(covered) < 0.85*float64(total) {
				t.Errorf("CI coverage %d/%d, want about 95 %%", covered, total)
			}
			t.Logf("true terms chosen %d/%d, CI coverage %d/%d", chosen, draws, covered, total)
		})
	}
}

func TestFitSmallAndDegenerate(t *testing.T) {
	tests := []struct {
		name    string
		obs     []Observation
		wantErr bool
	}{
		{"no condition", nil, true},
		{"one condition", []Observation{{X: map[string]float64{"a": 1}, Y: 1}}, false},
		{"nan response", []Observation{{X: map[string]float64{"a": 1}, Y: 1}, {X: map[string]float64{"a": 2}, Y: math.NaN()}}, true},
		{"two conditions", []Observation{{X: map[string]float64{"a": 1}, Y: 1}, {X: map[string]float64{"a": 2}, Y: 3}}, false},
		{"constant factor", []Observation{{X: map[string]float64{"a": 1}, Y: 1}, {X: map[string]float64{"a": 1}, Y: 2}, {X: map[string]float64{"a": 1}, Y: 3}}, false},
		{"constant response", []Observation{{X: map[string]float64{"a": 1}, Y: 2}, {X: map[string]float64{"a": 2}, Y: 2}, {X: map[string]float64{"a": 3}, Y: 2}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := Fit(tt.obs, FitOptions{})
			if tt.wantErr {
				if err == nil {
					t.Fatal("want error")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if math.IsNaN(m.R2) || math.IsNaN(m.RMSEus) {
				t.Fatalf("NaN in model: %+v", m)
			}
			if m.Terms[0] != Intercept {
				t.Fatalf("terms %v", m.Terms)
			}
		})
	}
}

// TestFitLogTransform checks that a multiplicative law is fitted on the log
// scale when that predicts held-out conditions better.
func TestFitLogTransform(t *testing.T) {
	grid := map[string][]float64{"size_bytes": {64, 256, 512, 1024, 1500}, "rate_kpps": {0.5, 1, 2, 5, 10}}
	obs := synth(t, map[string]float64{Intercept: 3, "rate_kpps": 0.4, "log(size_bytes)": 0.2}, grid, 0.02, 1)
	for i := range obs {
		obs[i].Y = math.Exp(obs[i].Y) // y = exp(3 + 0.4 rate + 0.2 ln size) * noise
	}
	m, err := Fit(obs, FitOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if m.Transform != "log" {
		t.Fatalf("transform %q, want log (terms %v)", m.Transform, m.Terms)
	}
	ci := m.CI95["rate_kpps"]
	if ci[0] > 0.4 || ci[1] < 0.4 {
		t.Fatalf("rate_kpps CI %v excludes 0.4", ci)
	}
	x := map[string]float64{"size_bytes": 700, "rate_kpps": 4}
	want := math.Exp(3 + 0.4*4 + 0.2*math.Log(700))
	got, err := m.Predict(x)
	if err != nil || math.Abs(got-want)/want > 0.05 {
		t.Fatalf("Predict = %v, %v; want %v", got, err, want)
	}
	if _, err := Fit(obs, FitOptions{Transform: "sqrt"}); err == nil {
		t.Fatal("unknown transform should fail")
	}
	obs[0].Y = -1
	if _, err := Fit(obs, FitOptions{Transform: "log"}); err == nil {
		t.Fatal("log of a negative response should fail")
	}
}

func TestSaveLoadPredict(t *testing.T) {
	m := &Model{
		Factors:      []string{"size_bytes", "mem_mib"},
		Terms:        []string{Intercept, "size_bytes", "inv(mem_mib)"},
		Coefficients: map[string]float64{Intercept: 10, "size_bytes": 0.01, "inv(mem_mib)": 100},
		CI95:         map[string][2]float64{},
		Ranges:       map[string][2]float64{"size_bytes": {64, 1500}, "mem_mib": {0, 64}},
	}
	path := filepath.Join(t.TempDir(), "model.json")
	if err := m.Save(path); err != nil {
		t.Fatal(err)
	}
	m2, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		x    map[string]float64
		want float64
	}{
		{map[string]float64{"size_bytes": 100, "mem_mib": 0}, 11},
		{map[string]float64{"size_bytes": 100, "mem_mib": 50}, 13},
	}
	for _, tt := range tests {
		got, err := m2.Predict(tt.x)
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(got-tt.want) > 1e-9 {
			t.Fatalf("Predict(%v) = %v, want %v", tt.x, got, tt.want)
		}
	}
	if _, err := m2.Predict(map[string]float64{"size_bytes": 1}); err == nil {
		t.Fatal("missing factor should fail")
	}
	if ex := m2.Extrapolates(map[string]float64{"size_bytes": 9000, "mem_mib": 1}); len(ex) != 1 || ex[0] != "size_bytes" {
		t.Fatalf("Extrapolates = %v", ex)
	}
	for _, bad := range []string{`{`, `{"terms":["intercept"],"coefficients":{"intercept":1},"transform":"cube"}`, `{"terms":[]}`, `{"terms":["x"],"coefficients":{}}`, `{"terms":["sqrt(x)"],"coefficients":{"sqrt(x)":1}}`} {
		if _, err := Parse([]byte(bad)); err == nil {
			t.Fatalf("Parse(%s) should fail", bad)
		}
	}
}
