package bench

import (
	"math"
	"slices"

	"gonum.org/v1/gonum/stat"
	"gonum.org/v1/gonum/stat/distuv"
)

// Median returns the median of xs (the mean of the middle two for an even
// count), or NaN for none.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// Estimate is a mean with its two-sided 95 % confidence interval (Student's
// t over the repeats), and the median.
type Estimate struct {
	N      int
	Mean   float64
	Median float64
	Lo, Hi float64
}

// HalfWidth is half the confidence interval's width (NaN when N < 2).
func (e Estimate) HalfWidth() float64 { return (e.Hi - e.Lo) / 2 }

// CI95 returns the mean of xs with a 95 % t confidence interval. With one
// value the interval is NaN (unknown); with none everything is NaN.
func CI95(xs []float64) Estimate {
	e := Estimate{N: len(xs), Mean: math.NaN(), Median: Median(xs), Lo: math.NaN(), Hi: math.NaN()}
	if len(xs) == 0 {
		return e
	}
	e.Mean = stat.Mean(xs, nil)
	if len(xs) < 2 {
		return e
	}
	sd := stat.StdDev(xs, nil)
	t := distuv.StudentsT{Mu: 0, Sigma: 1, Nu: float64(len(xs) - 1)}.Quantile(0.975)
	h := t * sd / math.Sqrt(float64(len(xs)))
	e.Lo, e.Hi = e.Mean-h, e.Mean+h
	return e
}

// Overlap reports whether two estimates' confidence intervals overlap (or
// either is unknown), i.e. whether a difference is not established.
func Overlap(a, b Estimate) bool {
	if math.IsNaN(a.Lo) || math.IsNaN(b.Lo) {
		return true
	}
	return a.Lo <= b.Hi && b.Lo <= a.Hi
}

// Quantile returns the q-quantile (0..1) of xs by linear interpolation.
func Quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return stat.Quantile(q, stat.LinInterp, s, nil)
}

// DiffCI95 estimates mean(a) - mean(b) with a 95 % Welch confidence
// interval; Median holds the difference of the medians.
func DiffCI95(a, b []float64) Estimate {
	e := Estimate{N: min(len(a), len(b)), Mean: math.NaN(), Median: math.NaN(), Lo: math.NaN(), Hi: math.NaN()}
	if len(a) == 0 || len(b) == 0 {
		return e
	}
	e.Mean = stat.Mean(a, nil) - stat.Mean(b, nil)
	e.Median = Median(a) - Median(b)
	if len(a) < 2 || len(b) < 2 {
		return e
	}
	va, vb := stat.Variance(a, nil)/float64(len(a)), stat.Variance(b, nil)/float64(len(b))
	se := math.Sqrt(va + vb)
	if se == 0 {
		e.Lo, e.Hi = e.Mean, e.Mean
		return e
	}
	df := (va + vb) * (va + vb) / (va*va/float64(len(a)-1) + vb*vb/float64(len(b)-1))
	t := distuv.StudentsT{Mu: 0, Sigma: 1, Nu: df}.Quantile(0.975)
	e.Lo, e.Hi = e.Mean-t*se, e.Mean+t*se
	return e
}

// Sign reports whether the interval lies above zero (1), below (-1) or
// includes it or is unknown (0).
func (e Estimate) Sign() int {
	switch {
	case math.IsNaN(e.Lo):
		return 0
	case e.Lo > 0:
		return 1
	case e.Hi < 0:
		return -1
	}
	return 0
}
