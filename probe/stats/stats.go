// Package stats summarises per-packet delays of one measurement condition:
// min, p50, p99, p99.9, mean, max and the packet delay variation
// PDV = p99.9 - min (RFC 8219), each with a seeded bootstrap 95 % confidence
// interval.
//
// Quantiles use the linear interpolation between order statistics that R
// calls type 7 (h = (n-1)p), for point estimates and bootstrap replicates alike.
package stats

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"time"
)

// ErrNoSamples is returned when there is nothing to summarise.
var ErrNoSamples = errors.New("no samples")

// Options tunes Summarize. The zero value is usable.
type Options struct {
	// Resamples is the number of bootstrap replicates; 0 means 1000. A
	// negative value disables the bootstrap (every CI equals its estimate).
	Resamples int
	// Seed seeds the bootstrap's random source; 0 means 1. The same seed and
	// samples give the same intervals.
	Seed uint64
	// Confidence is the two-sided confidence level; 0 means 0.95.
	Confidence float64
}

func (o Options) withDefaults() Options {
	if o.Resamples == 0 {
		o.Resamples = 1000
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	if o.Confidence == 0 {
		o.Confidence = 0.95
	}
	return o
}

// CI is a confidence interval [Lo, Hi].
type CI struct {
	Lo, Hi float64
}

// Summary holds the statistics of one sample, in the sample's unit
// (ovsprobe uses microseconds).
type Summary struct {
	N                                  int
	Min, P50, P99, P999, Mean, Max     float64
	PDV                                float64 // P999 - Min
	MinCI, P50CI, P99CI, P999CI, PDVCI CI
	MeanCI                             CI
}

// Micros converts delays to float microseconds.
func Micros(d []time.Duration) []float64 {
	out := make([]float64, len(d))
	for i, v := range d {
		out[i] = float64(v) / float64(time.Microsecond)
	}
	return out
}

// Quantile returns the p-quantile (0 <= p <= 1) of sorted (ascending) by
// linear interpolation between order statistics (R type 7). It returns NaN
// for an empty slice.
func Quantile(sorted []float64, p float64) float64 {
	n := len(sorted)
	if n == 0 {
		return math.NaN()
	}
	p = math.Min(math.Max(p, 0), 1)
	h := float64(n-1) * p
	lo := int(math.Floor(h))
	if lo >= n-1 {
		return sorted[n-1]
	}
	return sorted[lo] + (h-float64(lo))*(sorted[lo+1]-sorted[lo])
}

// quantiles are the probabilities reported, in the order of the estimates
// slice used by Summarize: min, p50, p99, p99.9.
var quantiles = []float64{0, 0.5, 0.99, 0.999}

// Summarize computes the Summary of samples (not modified) with bootstrap
// confidence intervals.
func Summarize(samples []float64, opts Options) (Summary, error) {
	opts = opts.withDefaults()
	n := len(samples)
	if n == 0 {
		return Summary{}, ErrNoSamples
	}
	sorted := slices.Clone(samples)
	slices.Sort(sorted)
	for _, v := range sorted {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return Summary{}, errors.New("samples contain NaN or Inf")
		}
	}
	var s Summary
	s.N = n
	s.Min = sorted[0]
	s.Max = sorted[n-1]
	s.P50 = Quantile(sorted, 0.5)
	s.P99 = Quantile(sorted, 0.99)
	s.P999 = Quantile(sorted, 0.999)
	s.PDV = s.P999 - s.Min
	s.Mean = mean(sorted)
	s.MinCI, s.P50CI, s.P99CI, s.P999CI = CI{s.Min, s.Min}, CI{s.P50, s.P50}, CI{s.P99, s.P99}, CI{s.P999, s.P999}
	s.PDVCI, s.MeanCI = CI{s.PDV, s.PDV}, CI{s.Mean, s.Mean}
	if opts.Resamples < 0 || n < 2 {
		return s, nil
	}
	rng := rand.New(rand.NewPCG(opts.Seed, 0x5eed))
	counts := make([]int, n)
	reps := make([][]float64, 6) // min, p50, p99, p999, pdv, mean
	for i := range reps {
		reps[i] = make([]float64, opts.Resamples)
	}
	est := make([]float64, len(quantiles))
	for r := 0; r < opts.Resamples; r++ {
		clear(counts)
		sum := 0.0
		for range n {
			j := rng.IntN(n)
			counts[j]++
			sum += sorted[j]
		}
		resampleQuantiles(sorted, counts, quantiles, est)
		reps[0][r], reps[1][r], reps[2][r], reps[3][r] = est[0], est[1], est[2], est[3]
		reps[4][r] = est[3] - est[0]
		reps[5][r] = sum / float64(n)
	}
	alpha := (1 - opts.Confidence) / 2
	ci := func(x []float64) CI {
		slices.Sort(x)
		return CI{Quantile(x, alpha), Quantile(x, 1-alpha)}
	}
	s.MinCI, s.P50CI, s.P99CI, s.P999CI = ci(reps[0]), ci(reps[1]), ci(reps[2]), ci(reps[3])
	s.PDVCI, s.MeanCI = ci(reps[4]), ci(reps[5])
	return s, nil
}

// resampleQuantiles computes the type-7 quantiles ps (ascending) of the
// bootstrap resample that takes sorted[j] counts[j] times, without sorting:
// the resample's order statistics are found by walking the counts. It is
// O(n) per resample.
func resampleQuantiles(sorted []float64, counts []int, ps []float64, out []float64) {
	n := 0
	for _, c := range counts {
		n += c
	}
	// ranks needed: floor(h) and floor(h)+1 for each p, visited in rank order.
	ranks := make([]int, 0, 2*len(ps))
	for _, p := range ps {
		lo := int(math.Floor(float64(n-1) * p))
		ranks = append(ranks, lo, min(lo+1, n-1))
	}
	order := make([]int, len(ranks))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return ranks[a] - ranks[b] })
	vals := make([]float64, len(ranks))
	k, cum := 0, 0
	for j, c := range counts {
		if c == 0 {
			continue
		}
		cum += c
		for k < len(order) && ranks[order[k]] < cum {
			vals[order[k]] = sorted[j]
			k++
		}
		if k == len(order) {
			break
		}
	}
	for i, p := range ps {
		h := float64(n-1) * p
		out[i] = vals[2*i] + (h-math.Floor(h))*(vals[2*i+1]-vals[2*i])
	}
}

func mean(x []float64) float64 {
	s := 0.0
	for _, v := range x {
		s += v
	}
	return s / float64(len(x))
}

// CDF returns n+1 points (value, probability) of the empirical inverse CDF of
// samples at probabilities 0, 1/n, ..., 1: a table a simulator can sample by
// drawing u in [0,1) and interpolating. n < 1 means 100.
func CDF(samples []float64, n int) (values, probs []float64) {
	if len(samples) == 0 {
		return nil, nil
	}
	if n < 1 {
		n = 100
	}
	sorted := slices.Clone(samples)
	slices.Sort(sorted)
	values = make([]float64, n+1)
	probs = make([]float64, n+1)
	for i := 0; i <= n; i++ {
		p := float64(i) / float64(n)
		probs[i] = p
		values[i] = Quantile(sorted, p)
	}
	return values, probs
}
