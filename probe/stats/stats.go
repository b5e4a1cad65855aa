// Package stats summarises per-packet delays of one measurement condition:
// min, p50, p99, p99.9, mean, max and the packet delay variation
// PDV = p99.9 - min (RFC 8219), each with a seeded bootstrap 95 % confidence
// interval.
//
// Consecutive packets' delays are autocorrelated (a queue that builds up
// delays a run of packets), so the bootstrap resamples blocks of
// consecutive packets, not single packets: a circular block bootstrap
// (Politis and Romano 1992) whose block length is chosen from the sample's
// autocorrelation by the rule of Politis and White (2004) with the
// correction of Patton, Politis and White (2009); see BlockLength. Samples
// must therefore be given in packet sequence order.
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
	// Block is the block length of the circular block bootstrap, in
	// packets; 0 means automatic (BlockLength of the samples), 1 means
	// the ordinary bootstrap of independent packets.
	Block int
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
	// Block is the bootstrap's block length in packets (1 = independent
	// packets; 0 when no bootstrap ran).
	Block int
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
	block := opts.Block
	if block <= 0 {
		block = BlockLength(samples)
	}
	block = min(block, n)
	s.Block = block
	// rank[i] is the position of samples[i] in sorted: a resample is kept
	// as counts over sorted positions, so its quantiles need no sort.
	rank := ranks(samples)
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
		for drawn := 0; drawn < n; {
			start := rng.IntN(n)
			for k := 0; k < block && drawn < n; k++ {
				j := rank[(start+k)%n]
				counts[j]++
				sum += sorted[j]
				drawn++
			}
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

// ranks returns, for each x[i], its position in the stably sorted x.
func ranks(x []float64) []int {
	idx := make([]int, len(x))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		switch {
		case x[a] < x[b]:
			return -1
		case x[a] > x[b]:
			return 1
		}
		return 0
	})
	r := make([]int, len(x))
	for pos, i := range idx {
		r[i] = pos
	}
	return r
}

// MinBlockSamples is the smallest sample BlockLength estimates a block
// length for; shorter samples get 1 (too few to judge autocorrelation).
const MinBlockSamples = 20

// BlockLength returns the block length, in samples, of a circular block
// bootstrap of the sequence x, chosen from x's autocorrelation by the
// automatic rule of Politis and White (2004) with the correction of Patton,
// Politis and White (2009):
//
//   - m is the smallest lag after which K = max(5, log10 n) consecutive
//     autocorrelations all lie within ±2 sqrt(log10(n)/n) (insignificant);
//     M = 2 max(m, 1), at most sqrt(n) + K.
//   - With the flat-top lag window λ(t) = 1 for |t| <= 1/2, 2(1-|t|) up to
//     1, and autocovariances R(k): G = Σ_{|k|<=M} λ(k/M) |k| R(k) and the
//     long-run variance g = Σ_{|k|<=M} λ(k/M) R(k).
//   - b = (2 G² / ((4/3) g²))^(1/3) n^(1/3), rounded up, within
//     [1, min(3 sqrt(n), n/3)].
//
// Independent samples give 1 or 2; a delay sequence in which queueing
// episodes span many packets gives longer blocks (for an AR(1) sequence
// with coefficient phi the rule's target is
// (6 phi² / ((1-phi)²(1+phi)²))^(1/3) n^(1/3): 24 packets for phi 0.5 and
// n 5000, 88 for phi 0.9). It returns 1 for fewer
// than MinBlockSamples samples or a constant sequence.
func BlockLength(x []float64) int {
	n := len(x)
	if n < MinBlockSamples {
		return 1
	}
	mu := mean(x)
	eps := make([]float64, n)
	for i, v := range x {
		eps[i] = v - mu
	}
	acov := func(k int) float64 {
		s := 0.0
		for i := k; i < n; i++ {
			s += eps[i] * eps[i-k]
		}
		return s / float64(n)
	}
	r0 := acov(0)
	if r0 == 0 {
		return 1
	}
	fn := float64(n)
	kn := max(5, int(math.Log10(fn)))
	mMax := int(math.Ceil(math.Sqrt(fn))) + kn
	bMax := math.Ceil(math.Min(3*math.Sqrt(fn), fn/3))
	crit := 2 * math.Sqrt(math.Log10(fn)/fn)
	r := make([]float64, mMax+1)
	r[0] = r0
	for k := 1; k <= mMax && k < n; k++ {
		r[k] = acov(k)
	}
	mHat := -1
	run := 0
	for k := 1; k <= mMax; k++ {
		if math.Abs(r[k]/r0) < crit {
			run++
			if run == kn {
				mHat = k - kn
				break
			}
		} else {
			run = 0
		}
	}
	bigM := mMax
	if mHat >= 0 {
		bigM = min(2*max(mHat, 1), mMax)
	}
	g, lr := 0.0, r0
	for k := 1; k <= bigM; k++ {
		t := float64(k) / float64(bigM)
		lam := 1.0
		if t > 0.5 {
			lam = 2 * (1 - t)
		}
		g += 2 * lam * float64(k) * r[k]
		lr += 2 * lam * r[k]
	}
	if lr <= 0 || g == 0 {
		return 1
	}
	dcb := 4.0 / 3.0 * lr * lr
	b := math.Cbrt(2*g*g/dcb) * math.Cbrt(fn)
	b = math.Min(math.Ceil(b), bMax)
	if b < 1 || math.IsNaN(b) {
		return 1
	}
	return int(b)
}

// KS returns the two-sample Kolmogorov-Smirnov distance between samples a
// and b: the largest vertical gap between their empirical CDFs (0 = same
// distribution of values, 1 = disjoint). Neither slice is modified; it
// returns NaN when either is empty.
func KS(a, b []float64) float64 {
	if len(a) == 0 || len(b) == 0 {
		return math.NaN()
	}
	x, y := slices.Clone(a), slices.Clone(b)
	slices.Sort(x)
	slices.Sort(y)
	na, nb := float64(len(x)), float64(len(y))
	i, j := 0, 0
	d := 0.0
	for i < len(x) && j < len(y) {
		v := math.Min(x[i], y[j])
		for i < len(x) && x[i] <= v {
			i++
		}
		for j < len(y) && y[j] <= v {
			j++
		}
		d = math.Max(d, math.Abs(float64(i)/na-float64(j)/nb))
	}
	return d
}

// KSCritical returns the two-sample Kolmogorov-Smirnov distance that
// samples of sizes n and m drawn from one distribution exceed with
// probability alpha (asymptotic: c(alpha) sqrt((n+m)/(n m)) with
// c(alpha) = sqrt(-ln(alpha/2)/2)).
func KSCritical(n, m int, alpha float64) float64 {
	if n <= 0 || m <= 0 || alpha <= 0 || alpha >= 1 {
		return math.NaN()
	}
	c := math.Sqrt(-math.Log(alpha/2) / 2)
	return c * math.Sqrt(float64(n+m)/(float64(n)*float64(m)))
}

// InverseCDF evaluates a table of (value, probability) points, probability
// ascending from 0 to 1 (the shape CDF returns), at u in [0, 1] by linear
// interpolation: drawing u uniformly samples the tabulated distribution,
// the way ns-3's EmpiricalRandomVariable does with interpolation on. It
// returns NaN for an empty or mismatched table.
func InverseCDF(values, probs []float64, u float64) float64 {
	n := len(values)
	if n == 0 || n != len(probs) {
		return math.NaN()
	}
	if u <= probs[0] {
		return values[0]
	}
	if u >= probs[n-1] {
		return values[n-1]
	}
	// First point with probability >= u.
	k, _ := slices.BinarySearch(probs, u)
	if probs[k] == u || k == 0 {
		return values[k]
	}
	p0, p1 := probs[k-1], probs[k]
	if p1 == p0 {
		return values[k]
	}
	return values[k-1] + (u-p0)/(p1-p0)*(values[k]-values[k-1])
}
