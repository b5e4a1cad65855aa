package stats

import (
	"math"
	"math/rand/v2"
	"testing"
)

// ar1 returns n values of the AR(1) process x_t = phi x_{t-1} + e_t around
// mean mu, e_t ~ N(0, 1), started from its stationary distribution.
func ar1(rng *rand.Rand, n int, phi, mu float64) []float64 {
	x := make([]float64, n)
	v := rng.NormFloat64() / math.Sqrt(1-phi*phi)
	for i := range x {
		v = phi*v + rng.NormFloat64()
		x[i] = mu + v
	}
	return x
}

func TestBlockLength(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	tests := []struct {
		name   string
		x      []float64
		lo, hi int
	}{
		{"short", []float64{1, 5, 2, 8}, 1, 1},
		{"constant", make([]float64, 500), 1, 1},
		{"independent", ar1(rng, 5000, 0, 10), 1, 4},
		{"ar1 0.5", ar1(rng, 5000, 0.5, 10), 15, 35},  // theory: 23.7
		{"ar1 0.9", ar1(rng, 5000, 0.9, 10), 50, 130}, // theory: 87.6
		{"ar1 0.99 capped", ar1(rng, 300, 0.99, 10), 10, 100},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := BlockLength(tt.x)
			if b < tt.lo || b > tt.hi {
				t.Fatalf("BlockLength = %d, want in [%d, %d]", b, tt.lo, tt.hi)
			}
			if b > len(tt.x)/3 && b > 1 {
				t.Fatalf("BlockLength = %d above n/3", b)
			}
		})
	}
}

// TestBlockBootstrapCoverage: on autocorrelated delays (AR(1), phi 0.8) the
// bootstrap of independent packets gives intervals of the mean far too
// narrow, while the block bootstrap covers the true mean at about the
// nominal 95 %. 100 series of 1500 packets, 300 replicates each; the
// tolerance: block coverage in [0.85, 0.99], independent coverage below 0.75
// (its expected coverage is about 0.5: the intervals are sqrt(9) = 3 times
// too narrow).
func TestBlockBootstrapCoverage(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 5))
	const series = 100
	block, iid := 0, 0
	for i := range series {
		x := ar1(rng, 1500, 0.8, 100)
		s, err := Summarize(x, Options{Resamples: 300, Seed: uint64(i + 1)})
		if err != nil {
			t.Fatal(err)
		}
		if s.Block < 5 {
			t.Fatalf("series %d: block length %d for phi 0.8", i, s.Block)
		}
		if s.MeanCI.Lo <= 100 && 100 <= s.MeanCI.Hi {
			block++
		}
		s1, err := Summarize(x, Options{Resamples: 300, Seed: uint64(i + 1), Block: 1})
		if err != nil {
			t.Fatal(err)
		}
		if s1.Block != 1 {
			t.Fatalf("Block 1 option gave block %d", s1.Block)
		}
		if s1.MeanCI.Lo <= 100 && 100 <= s1.MeanCI.Hi {
			iid++
		}
	}
	cb, ci := float64(block)/series, float64(iid)/series
	t.Logf("coverage of the mean: block bootstrap %.3f, independent bootstrap %.3f", cb, ci)
	if cb < 0.85 || cb > 0.99 {
		t.Errorf("block bootstrap coverage %.3f outside [0.85, 0.99]", cb)
	}
	if ci > 0.75 {
		t.Errorf("independent bootstrap coverage %.3f: the test series are not autocorrelated enough", ci)
	}
}

func TestKS(t *testing.T) {
	tests := []struct {
		name string
		a, b []float64
		want float64
	}{
		{"same", []float64{1, 2, 3}, []float64{3, 2, 1}, 0},
		{"disjoint", []float64{1, 2}, []float64{5, 6, 7}, 1},
		{"shifted half", []float64{1, 2, 3, 4}, []float64{3, 4, 5, 6}, 0.5},
		{"ties", []float64{1, 1, 2, 2}, []float64{1, 2, 2, 2}, 0.25},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := KS(tt.a, tt.b); math.Abs(got-tt.want) > 1e-12 {
				t.Fatalf("KS = %v, want %v", got, tt.want)
			}
			if got := KS(tt.b, tt.a); math.Abs(got-tt.want) > 1e-12 {
				t.Fatalf("KS not symmetric: %v", got)
			}
		})
	}
	if !math.IsNaN(KS(nil, []float64{1})) {
		t.Fatal("KS of an empty sample should be NaN")
	}
	// c(0.05) = 1.358: n = m = 1000 gives 1.358 * sqrt(2/1000) = 0.0607.
	if got := KSCritical(1000, 1000, 0.05); math.Abs(got-0.0607) > 5e-4 {
		t.Fatalf("KSCritical = %v", got)
	}
	if !math.IsNaN(KSCritical(0, 5, 0.05)) {
		t.Fatal("KSCritical(0, ...) should be NaN")
	}
}

func TestInverseCDF(t *testing.T) {
	v, p := []float64{10, 20, 40}, []float64{0, 0.5, 1}
	tests := []struct{ u, want float64 }{
		{-1, 10}, {0, 10}, {0.25, 15}, {0.5, 20}, {0.75, 30}, {1, 40}, {2, 40},
	}
	for _, tt := range tests {
		if got := InverseCDF(v, p, tt.u); math.Abs(got-tt.want) > 1e-12 {
			t.Errorf("InverseCDF(%v) = %v, want %v", tt.u, got, tt.want)
		}
	}
	if !math.IsNaN(InverseCDF(nil, nil, 0.5)) || !math.IsNaN(InverseCDF(v, p[:2], 0.5)) {
		t.Fatal("bad tables should give NaN")
	}
	// Sampling a table made by CDF reproduces the sample: KS distance small.
	rng := rand.New(rand.NewPCG(2, 2))
	x := make([]float64, 5000)
	for i := range x {
		x[i] = 30 + 10*rng.ExpFloat64()
	}
	tv, tp := CDF(x, 200)
	y := make([]float64, 5000)
	for i := range y {
		y[i] = InverseCDF(tv, tp, rng.Float64())
	}
	if d := KS(x, y); d > KSCritical(len(x), len(y), 0.01) {
		t.Fatalf("KS(sample, draws from its table) = %.4f, above the 1 %% critical value", d)
	}
}
