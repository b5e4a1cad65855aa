package stats

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestQuantile(t *testing.T) {
	tests := []struct {
		name   string
		sorted []float64
		p      float64
		want   float64
	}{
		{"single", []float64{5}, 0.5, 5},
		{"min", []float64{1, 2, 3, 4}, 0, 1},
		{"max", []float64{1, 2, 3, 4}, 1, 4},
		{"median even", []float64{1, 2, 3, 4}, 0.5, 2.5},
		{"median odd", []float64{1, 2, 3}, 0.5, 2},
		{"p90 of 0..10", []float64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 0.9, 9},
		{"clamped above", []float64{1, 2}, 2, 2},
		{"clamped below", []float64{1, 2}, -1, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Quantile(tt.sorted, tt.p); math.Abs(got-tt.want) > 1e-12 {
				t.Fatalf("Quantile(%v, %v) = %v, want %v", tt.sorted, tt.p, got, tt.want)
			}
		})
	}
	if !math.IsNaN(Quantile(nil, 0.5)) {
		t.Fatal("Quantile(nil) should be NaN")
	}
}

func TestSummarizeErrors(t *testing.T) {
	tests := []struct {
		name    string
		samples []float64
	}{
		{"empty", nil},
		{"nan", []float64{1, math.NaN()}},
		{"inf", []float64{1, math.Inf(1)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Summarize(tt.samples, Options{}); err == nil {
				t.Fatal("want error")
			}
		})
	}
	if _, err := Summarize(nil, Options{}); !errors.Is(err, ErrNoSamples) {
		t.Fatalf("want ErrNoSamples, got %v", err)
	}
}

func TestSummarizeKnown(t *testing.T) {
	x := make([]float64, 1001)
	for i := range x {
		x[i] = float64(1000 - i) // unsorted input, 0..1000
	}
	s, err := Summarize(x, Options{Resamples: -1})
	if err != nil {
		t.Fatal(err)
	}
	want := Summary{N: 1001, Min: 0, P50: 500, P99: 990, P999: 999, Mean: 500, Max: 1000, PDV: 999}
	if s.N != want.N || s.Min != want.Min || s.P50 != want.P50 || s.P99 != want.P99 ||
		s.P999 != want.P999 || s.Mean != want.Mean || s.Max != want.Max || s.PDV != want.PDV {
		t.Fatalf("got %+v, want %+v", s, want)
	}
	if x[0] != 1000 {
		t.Fatal("Summarize modified its input")
	}
}

// TestBootstrapCoverage checks that the bootstrap intervals of the median
// and the mean of normal samples cover the true values in most of the trials,
// and that the intervals are deterministic for a seed.
func TestBootstrapCoverage(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	covered := 0
	const trials = 40
	for trial := range trials {
		x := make([]float64, 400)
		for i := range x {
			x[i] = 100 + 10*rng.NormFloat64()
		}
		s, err := Summarize(x, Options{Resamples: 400, Seed: uint64(trial + 1)})
		if err != nil {
			t.Fatal(err)
		}
		if s.P50CI.Lo <= 100 && 100 <= s.P50CI.Hi && s.MeanCI.Lo <= 100 && 100 <= s.MeanCI.Hi {
			covered++
		}
		if !(s.P50CI.Lo <= s.P50 && s.P50 <= s.P50CI.Hi) {
			t.Fatalf("estimate outside its interval: %+v", s)
		}
		s2, _ := Summarize(x, Options{Resamples: 400, Seed: uint64(trial + 1)})
		if s2 != s {
			t.Fatal("same seed gave different intervals")
		}
	}
	// Nominal 95 % each; both at once well above 75 % over 40 trials.
	if covered < 30 {
		t.Fatalf("coverage %d/%d too low", covered, trials)
	}
}

func TestResampleQuantilesMatchesSort(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 50 {
		n := 1 + rng.IntN(200)
		sorted := make([]float64, n)
		for i := range sorted {
			sorted[i] = rng.Float64() * 100
		}
		slices.Sort(sorted)
		counts := make([]int, n)
		var res []float64
		for range n {
			j := rng.IntN(n)
			counts[j]++
			res = append(res, sorted[j])
		}
		slices.Sort(res)
		out := make([]float64, len(quantiles))
		resampleQuantiles(sorted, counts, quantiles, out)
		for i, p := range quantiles {
			if want := Quantile(res, p); math.Abs(out[i]-want) > 1e-9 {
				t.Fatalf("n=%d p=%v: got %v want %v", n, p, out[i], want)
			}
		}
	}
}

func TestCDFAndMicros(t *testing.T) {
	v, p := CDF(Micros([]time.Duration{3 * time.Microsecond, time.Microsecond, 2 * time.Microsecond}), 2)
	if !slices.Equal(v, []float64{1, 2, 3}) || !slices.Equal(p, []float64{0, 0.5, 1}) {
		t.Fatalf("CDF = %v %v", v, p)
	}
	if v, p := CDF(nil, 10); v != nil || p != nil {
		t.Fatal("CDF(nil) should be empty")
	}
}

func BenchmarkSummarize10k(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 1))
	x := make([]float64, 10000)
	for i := range x {
		x[i] = rng.ExpFloat64()
	}
	for b.Loop() {
		if _, err := Summarize(x, Options{}); err != nil {
			b.Fatal(err)
		}
	}
}
