package model

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"

	"gonum.org/v1/gonum/stat/distuv"
)

// Fit chooses the response transform and the terms by forward selection
// under inner cross-validation, fits them by least squares on all
// conditions, scores the whole procedure by nested cross-validation and
// bootstraps it for coefficient intervals (see the package comment).
func Fit(obs []Observation, opts FitOptions) (*Model, error) {
	opts = opts.withDefaults()
	if err := checkInput(obs, opts); err != nil {
		return nil, err
	}
	r := &fitRun{opts: opts, m: &Model{
		Coefficients: map[string]float64{},
		CI95:         map[string][2]float64{},
		Ranges:       map[string][2]float64{},
		Response:     opts.Response,
		NConditions:  len(obs),
	}}
	if err := r.factors(obs); err != nil {
		return nil, err
	}
	if err := r.candidates(obs); err != nil {
		return nil, err
	}
	if err := r.fitTerms(); err != nil {
		return nil, err
	}
	r.scoreTrain()
	r.scoreCV()
	r.intervals()
	return r.m, nil
}

// fitRun is the state Fit's phases hand on to each other, in the order
// they fill it.
type fitRun struct {
	opts    FitOptions  // with defaults applied
	m       *Model      // the model being filled in
	varying []string    // factors with at least 2 distinct values
	p       *pipeline   // candidates and response, set by candidates
	sel     selection   // the selection on all conditions, set by fitTerms
	cols    [][]float64 // the final design, intercept first, set by fitTerms
	beta    []float64   // its least-squares coefficients
	df      int         // its residual degrees of freedom
	sst     float64     // total sum of squares of the response, set by scoreTrain
}

// checkInput rejects what no fit can use: no conditions, an unknown
// response transform, a response that is not a finite number.
func checkInput(obs []Observation, opts FitOptions) error {
	if len(obs) < 1 {
		return errors.New("no conditions to fit a model to")
	}
	switch opts.Transform {
	case "auto", "none", "log":
	default:
		return fmt.Errorf("unknown response transform %q (none, log, auto)", opts.Transform)
	}
	for i, o := range obs {
		if math.IsNaN(o.Y) || math.IsInf(o.Y, 0) {
			return fmt.Errorf("condition %d: response is %v", i, o.Y)
		}
	}
	return nil
}

// commonFactors returns, sorted, the factors present in every observation.
func commonFactors(obs []Observation) []string {
	var factors []string
	seen := map[string]int{}
	for _, o := range obs {
		for k := range o.X {
			seen[k]++
		}
	}
	for k, c := range seen {
		if c == len(obs) {
			factors = append(factors, k)
		}
	}
	sort.Strings(factors)
	return factors
}

// factors sets the model's factors (the requested ones, or those common to
// all observations) and their ranges, and finds the varying ones. Every
// observation must carry every factor.
func (r *fitRun) factors(obs []Observation) error {
	factors := r.opts.Factors
	if factors == nil {
		factors = commonFactors(obs)
	}
	for _, f := range factors {
		for i, o := range obs {
			if _, ok := o.X[f]; !ok {
				return fmt.Errorf("condition %d lacks factor %q", i, f)
			}
		}
		vals := distinct(obs, f)
		r.m.Ranges[f] = [2]float64{vals[0], vals[len(vals)-1]}
		if len(vals) >= 2 {
			r.varying = append(r.varying, f)
		}
	}
	r.m.Factors = factors
	return nil
}

// candidates builds the pipeline: the response (and its log when every
// value is positive) and the usable candidate terms with their columns.
// The candidates depend on the design (factor levels), not on the
// response: generating them once from all conditions leaks nothing into
// the outer folds.
func (r *fitRun) candidates(obs []Observation) error {
	cands := r.opts.Candidates
	if cands == nil {
		cands = Candidates(obs, r.varying)
	}
	y := make([]float64, len(obs))
	for i, o := range obs {
		y[i] = o.Y
	}
	p := &pipeline{y: y, tr: r.opts.Transform, folds: r.opts.Folds, maxTerms: r.opts.MaxTerms, minGain: r.opts.MinGain,
		strata: strata(obs, r.varying)}
	seen := map[string]bool{}
	for _, c := range cands {
		t, err := ParseTerm(c)
		if err != nil {
			return err
		}
		if seen[t.String()] || len(t.atoms) == 0 {
			continue
		}
		col, err := column(t, obs)
		if err != nil {
			continue // e.g. log of a zero: not a usable candidate
		}
		seen[t.String()] = true
		p.cands = append(p.cands, t)
		p.cols = append(p.cols, col)
	}
	if positive(y) {
		p.ylog = forward("log", y)
	} else if r.opts.Transform == "log" {
		return errors.New("log transform needs a positive response")
	}
	r.p = p
	return nil
}

// fitTerms runs the selection on all conditions and fits the chosen
// transform and terms by least squares: the model's terms, coefficients
// and t-intervals given the terms (when there are residual degrees of
// freedom).
func (r *fitRun) fitTerms() error {
	m, p, n := r.m, r.p, r.m.NConditions
	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	r.sel = p.selectOn(all, r.opts.Seed)
	_, m.Folds = p.assignFolds(all, r.opts.Folds, r.opts.Seed)
	m.Transform = r.sel.transform
	yt := forward(m.Transform, p.y)
	r.cols = [][]float64{ones(n)}
	chosen := []Term{{}}
	for _, c := range r.sel.terms {
		r.cols = append(r.cols, p.cols[c])
		chosen = append(chosen, p.cands[c])
	}
	beta, cov, rssT, err := ols(r.cols, yt)
	if err != nil {
		return err
	}
	r.beta = beta
	r.df = n - len(r.cols)
	var tq float64
	if r.df > 0 {
		tq = distuv.StudentsT{Mu: 0, Sigma: 1, Nu: float64(r.df)}.Quantile(0.975)
		m.CI95GivenTerms = map[string][2]float64{}
	}
	for i, t := range chosen {
		name := t.String()
		m.Terms = append(m.Terms, name)
		m.Coefficients[name] = beta[i]
		if r.df > 0 {
			se := math.Sqrt(cov.At(i, i) * rssT / float64(r.df))
			m.CI95GivenTerms[name] = [2]float64{beta[i] - tq*se, beta[i] + tq*se}
		}
	}
	if m.Transform == "log" {
		m.Notes = append(m.Notes, "terms model ln("+m.Response+"): Predict returns exp(sum of terms); coefficients and CIs are on the log scale")
	}
	return nil
}

// r2 is 1 - press/SST, or 0 when the response does not vary.
func (r *fitRun) r2(press float64) float64 {
	if r.sst > 0 {
		return 1 - press/r.sst
	}
	return 0
}

// scoreTrain sets the in-sample R^2 and RMSE of the final fit, on the
// original scale.
func (r *fitRun) scoreTrain() {
	m, y, n := r.m, r.p.y, r.m.NConditions
	mean := 0.0
	for _, v := range y {
		mean += v
	}
	mean /= float64(n)
	sst, rss := 0.0, 0.0
	for i, v := range y {
		sst += (v - mean) * (v - mean)
		f := inverse(m.Transform, predictRow(r.cols, r.beta, i))
		rss += (v - f) * (v - f)
	}
	r.sst = sst
	m.RMSETrainUS = math.Sqrt(rss / float64(n))
	m.R2Train = r.r2(rss)
	if sst == 0 {
		m.Notes = append(m.Notes, "response does not vary: R^2 undefined, reported as 0")
	}
	if len(r.varying) == 0 {
		m.Notes = append(m.Notes, "no factor varies: intercept-only model")
	}
}

// scoreCV sets the reported R^2 and RMSE: from nested cross-validation,
// or, noted in the model, from the inner folds when the outer loop is
// skipped and in-sample below 3 conditions.
func (r *fitRun) scoreCV() {
	m, n := r.m, r.m.NConditions
	innerRMSE, innerOK := r.sel.innerRMSE, !math.IsInf(r.sel.innerRMSE, 0)
	if !innerOK {
		innerRMSE = m.RMSETrainUS
	}
	innerR2 := r.r2(innerRMSE * innerRMSE * float64(n))

	switch {
	case r.opts.OuterFolds < 0:
		m.R2, m.RMSEus = innerR2, innerRMSE
		m.Notes = append(m.Notes, "outer cross-validation skipped: r2 and rmse_us come from the folds that chose the terms (optimistic)")
	case n < 3:
		m.R2, m.RMSEus = m.R2Train, m.RMSETrainUS
		m.Notes = append(m.Notes, "too few conditions for cross-validation: r2 and rmse_us are in-sample")
	default:
		cv, pred := r.p.nested(r.opts, r.sst)
		cv.InnerR2, cv.InnerRMSEus = innerR2, innerRMSE
		cv.OptimismR2 = innerR2 - cv.R2.Mean
		cv.OptimismRMSEus = cv.RMSEus.Mean - innerRMSE
		m.CV = cv
		m.R2, m.RMSEus = cv.R2.Mean, cv.RMSEus.Mean
		m.OuterPredictions = pred
		if !innerOK {
			m.Notes = append(m.Notes, "too few conditions for inner cross-validation: terms are the intercept only")
		}
	}
}

// intervals sets the coefficient intervals: from the bootstrap of the
// whole pipeline, or, noted in the model, the t-intervals given the
// selected terms when the bootstrap is off or below 3 conditions.
func (r *fitRun) intervals() {
	m := r.m
	if r.opts.Bootstrap > 0 && m.NConditions >= 3 {
		m.Bootstrap = r.p.bootstrap(r.opts, r.sel, m)
		return
	}
	for k, v := range m.CI95GivenTerms {
		m.CI95[k] = v
	}
	switch {
	case r.df <= 0:
		m.Notes = append(m.Notes, "no residual degrees of freedom: confidence intervals omitted")
	default:
		m.Notes = append(m.Notes, "no bootstrap: ci95 are t-intervals given the selected terms (optimistic)")
	}
}

// nested runs the repeated outer cross-validation: for each outer fold the
// whole selection runs on the other conditions only (its own inner folds),
// the chosen model is fitted there and predicts the held-out conditions. It
// returns the report and the first repeat's out-of-fold predictions.
func (p *pipeline) nested(opts FitOptions, sst float64) (*CVReport, []float64) {
	n := len(p.y)
	k := opts.OuterFolds
	reps := opts.Repeats
	if n < 2*k {
		k, reps = n, 1 // leave-one-out: one assignment only
	}
	rep := &CVReport{OuterFolds: k, Repeats: reps, Selected: map[string]float64{}, Transforms: map[string]float64{}}
	if n-(n+k-1)/k >= 2*opts.Folds {
		rep.InnerFolds = opts.Folds
	}
	var r2s, rmses, foldR2, foldRMSE []float64
	var first []float64
	fits := 0
	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	for r := 0; r < reps; r++ {
		foldOf, _ := p.assignFolds(all, k, opts.Seed+uint64(r)*0x9e3779b9+0x07e)
		pred := make([]float64, n)
		for f := 0; f < k; f++ {
			var train, test []int
			for i, fi := range foldOf {
				if fi == f {
					test = append(test, i)
				} else {
					train = append(train, i)
				}
			}
			sel := p.selectOn(train, opts.Seed^uint64(r*k+f+1)*0x2545f491)
			fits++
			rep.Transforms[sel.transform]++
			for _, c := range sel.terms {
				rep.Selected[p.cands[c].String()]++
			}
			yt := p.transformed(sel.transform)
			beta := make([]float64, len(sel.terms)+1)
			p.lsq(sel.terms, train, yt, beta)
			trainMean := 0.0
			for _, i := range train {
				trainMean += p.y[i]
			}
			trainMean /= float64(len(train))
			sse, sst0 := 0.0, 0.0
			for _, i := range test {
				pred[i] = inverse(sel.transform, p.predict(sel.terms, beta, i))
				sse += (p.y[i] - pred[i]) * (p.y[i] - pred[i])
				sst0 += (p.y[i] - trainMean) * (p.y[i] - trainMean)
			}
			foldRMSE = append(foldRMSE, math.Sqrt(sse/float64(len(test))))
			if sst0 > 0 {
				foldR2 = append(foldR2, 1-sse/sst0)
			}
		}
		press := 0.0
		for i := range pred {
			press += (p.y[i] - pred[i]) * (p.y[i] - pred[i])
		}
		rmses = append(rmses, math.Sqrt(press/float64(n)))
		if sst > 0 {
			r2s = append(r2s, 1-press/sst)
		} else {
			r2s = append(r2s, 0)
		}
		if r == 0 {
			first = pred
		}
	}
	for t := range rep.Selected {
		rep.Selected[t] /= float64(fits)
	}
	for t := range rep.Transforms {
		rep.Transforms[t] /= float64(fits)
	}
	rep.R2, rep.RMSEus = spread(r2s), spread(rmses)
	rep.FoldR2, rep.FoldRMSEus = spread(foldR2), spread(foldRMSE)
	return rep, first
}

// bootstrap reruns the whole pipeline on resamples of the conditions and
// sets m.CI95 to the percentile intervals of the final terms' coefficients
// (0 in a replicate that did not select the term). Replicates that chose
// another response transform are counted but do not enter the intervals.
func (p *pipeline) bootstrap(opts FitOptions, final selection, m *Model) *BootReport {
	n := len(p.y)
	b := opts.Bootstrap
	rep := &BootReport{Replicates: b, Selected: map[string]float64{}, Transforms: map[string]float64{}}
	rng := rand.New(rand.NewPCG(opts.Seed, 0xb007))
	// Coefficient draws of each final term, intercept first.
	draws := make([][]float64, len(final.terms)+1)
	pos := map[int]int{}
	for j, c := range final.terms {
		pos[c] = j + 1
	}
	rows := make([]int, n)
	for r := 0; r < b; r++ {
		for i := range rows {
			rows[i] = rng.IntN(n)
		}
		sel := p.selectOn(rows, rng.Uint64()|1)
		rep.Transforms[sel.transform]++
		for _, c := range sel.terms {
			rep.Selected[p.cands[c].String()]++
		}
		if sel.transform != final.transform {
			continue
		}
		rep.Used++
		beta := make([]float64, len(sel.terms)+1)
		p.lsq(sel.terms, rows, p.transformed(sel.transform), beta)
		coef := make([]float64, len(draws))
		coef[0] = beta[0]
		for j, c := range sel.terms {
			if k, ok := pos[c]; ok {
				coef[k] = beta[j+1]
			}
		}
		for k := range draws {
			draws[k] = append(draws[k], coef[k])
		}
	}
	for t := range rep.Selected {
		rep.Selected[t] /= float64(b)
	}
	for t := range rep.Transforms {
		rep.Transforms[t] /= float64(b)
	}
	if rep.Used < 20 {
		m.Notes = append(m.Notes, fmt.Sprintf("only %d of %d bootstrap replicates chose the %s transform: confidence intervals omitted", rep.Used, b, final.transform))
		return rep
	}
	rep.Mean = map[string]float64{}
	for k, d := range draws {
		sum := 0.0
		for _, v := range d {
			sum += v
		}
		rep.Mean[m.Terms[k]] = sum / float64(len(d))
		slices.Sort(d)
		m.CI95[m.Terms[k]] = [2]float64{quantile(d, 0.025), quantile(d, 0.975)}
	}
	if rep.Used < b {
		m.Notes = append(m.Notes, fmt.Sprintf("%d of %d bootstrap replicates chose another response transform and are left out of the intervals", b-rep.Used, b))
	}
	return rep
}

// quantile is the type-7 quantile of sorted.
func quantile(sorted []float64, q float64) float64 {
	h := float64(len(sorted)-1) * q
	lo := int(math.Floor(h))
	if lo >= len(sorted)-1 {
		return sorted[len(sorted)-1]
	}
	return sorted[lo] + (h-float64(lo))*(sorted[lo+1]-sorted[lo])
}

func spread(x []float64) Spread {
	s := Spread{N: len(x)}
	if len(x) == 0 {
		return s
	}
	s.Min, s.Max = math.Inf(1), math.Inf(-1)
	for _, v := range x {
		s.Mean += v
		s.Min, s.Max = math.Min(s.Min, v), math.Max(s.Max, v)
	}
	s.Mean /= float64(len(x))
	if len(x) > 1 {
		for _, v := range x {
			s.SD += (v - s.Mean) * (v - s.Mean)
		}
		s.SD = math.Sqrt(s.SD / float64(len(x)-1))
	}
	return s
}

func positive(y []float64) bool {
	for _, v := range y {
		if v <= 0 {
			return false
		}
	}
	return true
}

func forward(tr string, y []float64) []float64 {
	if tr != "log" {
		return y
	}
	out := make([]float64, len(y))
	for i, v := range y {
		out[i] = math.Log(v)
	}
	return out
}

func inverse(tr string, v float64) float64 {
	if tr == "log" {
		return math.Exp(v)
	}
	return v
}

func ones(n int) []float64 {
	c := make([]float64, n)
	for i := range c {
		c[i] = 1
	}
	return c
}

func column(t Term, obs []Observation) ([]float64, error) {
	c := make([]float64, len(obs))
	for i, o := range obs {
		v, err := t.Eval(o.X)
		if err != nil {
			return nil, err
		}
		c[i] = v
	}
	return c, nil
}
