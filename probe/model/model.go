// Package model fits an empirical model of packet delay through a switch to
// the factors of a measurement sweep (packet size, rate, flows, OpenFlow
// rules, memory, CPU quota, cold or warm caches) and predicts from it.
//
// The fit is ordinary least squares on terms chosen by forward selection
// under k-fold cross-validation from a candidate set: each varying factor as
// is, its log, 1/memory, hinge ("knee") terms on the rate near saturation,
// and pairwise interactions. Coefficients carry 95 % confidence intervals
// (Student t); R^2 and RMSE are those of held-out conditions (out-of-fold
// predictions). The Model marshals to model.json.
package model

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strings"

	"gonum.org/v1/gonum/mat"
	"gonum.org/v1/gonum/stat/distuv"
)

// Observation is one measured condition: its factor values and response.
type Observation struct {
	X map[string]float64
	Y float64
}

// FitOptions tunes Fit. The zero value is usable.
type FitOptions struct {
	// Factors lists the factors to consider; nil means every factor present
	// in all observations. Factors with fewer than 2 distinct values are
	// dropped (nothing to learn from).
	Factors []string
	// Candidates overrides the generated candidate terms when non-nil.
	Candidates []string
	// Folds is k of k-fold cross-validation; 0 means 5. With fewer
	// observations than 2*Folds, leave-one-out is used.
	Folds int
	// MaxTerms caps the non-intercept terms; 0 means min(8, n/3).
	MaxTerms int
	// MinGain is the relative drop of cross-validated RMSE a new term must
	// bring to be added; 0 means 0.02 (2 %).
	MinGain float64
	// Seed seeds the fold assignment; 0 means 1.
	Seed uint64
	// Response names the modelled quantity in model.json; "" means "p50_us".
	Response string
	// Transform of the response: "none", "log" or "auto" (""; both tried,
	// the lower held-out RMSE on the original scale wins; log only when
	// every response is positive).
	Transform string
}

func (o FitOptions) withDefaults() FitOptions {
	if o.Folds == 0 {
		o.Folds = 5
	}
	if o.MinGain == 0 {
		o.MinGain = 0.02
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	if o.Response == "" {
		o.Response = "p50_us"
	}
	if o.Transform == "" {
		o.Transform = "auto"
	}
	return o
}

// Model is a fitted delay model; its JSON form is model.json.
type Model struct {
	// Factors are the inputs Predict needs.
	Factors []string `json:"factors"`
	// Terms are the chosen terms, "intercept" first.
	Terms []string `json:"terms"`
	// Coefficients maps each term to its coefficient (response units per
	// term unit).
	Coefficients map[string]float64 `json:"coefficients"`
	// CI95 maps each term to its 95 % confidence interval [lo, hi]; absent
	// when the fit has no residual degrees of freedom.
	CI95 map[string][2]float64 `json:"ci95"`
	// R2 and RMSEus are computed on held-out conditions (cross-validation).
	R2     float64 `json:"r2"`
	RMSEus float64 `json:"rmse_us"`
	// R2Train and RMSETrainUS are the in-sample figures.
	R2Train     float64 `json:"r2_train"`
	RMSETrainUS float64 `json:"rmse_train_us"`
	// FloorUS is the probe's own delay through a plain veth pair (p50).
	FloorUS    float64 `json:"floor_us"`
	Datapath   string  `json:"datapath"`
	OVSVersion string  `json:"ovs_version"`
	// Response is the modelled statistic, e.g. "p50_us".
	Response string `json:"response"`
	// Transform is "none" (terms sum to the response) or "log" (terms sum
	// to its natural log: multiplicative effects, typical near saturation).
	Transform string `json:"transform"`
	// NConditions and Folds describe the fit.
	NConditions int `json:"n_conditions"`
	Folds       int `json:"folds"`
	// Ranges are the [min, max] of each factor in the data: predictions
	// outside are extrapolations.
	Ranges map[string][2]float64 `json:"factor_ranges"`
	// Notes explain anything unusual about the fit.
	Notes []string `json:"notes,omitempty"`
}

// Load reads a model.json file.
func Load(path string) (*Model, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read model: %w", err)
	}
	return Parse(b)
}

// Parse decodes and validates model.json content.
func Parse(b []byte) (*Model, error) {
	var m Model
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("decode model: %w", err)
	}
	if len(m.Terms) == 0 {
		return nil, errors.New("model has no terms")
	}
	switch m.Transform {
	case "", "none", "log":
	default:
		return nil, fmt.Errorf("model: unknown transform %q", m.Transform)
	}
	for _, s := range m.Terms {
		if _, err := ParseTerm(s); err != nil {
			return nil, fmt.Errorf("model: %w", err)
		}
		if _, ok := m.Coefficients[s]; !ok {
			return nil, fmt.Errorf("model: no coefficient for term %q", s)
		}
	}
	return &m, nil
}

// Save writes m as indented JSON to path.
func (m *Model) Save(path string) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return fmt.Errorf("encode model: %w", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write model: %w", err)
	}
	return nil
}

// Predict returns the modelled response at x. Factors the model uses must be
// present in x.
func (m *Model) Predict(x map[string]float64) (float64, error) {
	y := 0.0
	for _, s := range m.Terms {
		t, err := ParseTerm(s)
		if err != nil {
			return 0, fmt.Errorf("predict: %w", err)
		}
		v, err := t.Eval(x)
		if err != nil {
			return 0, fmt.Errorf("predict: %w", err)
		}
		y += m.Coefficients[s] * v
	}
	return inverse(m.Transform, y), nil
}

// Extrapolates names the factors of x outside the range seen in the data.
func (m *Model) Extrapolates(x map[string]float64) []string {
	var out []string
	for _, f := range m.Factors {
		r, ok := m.Ranges[f]
		v, has := x[f]
		if ok && has && (v < r[0] || v > r[1]) {
			out = append(out, f)
		}
	}
	return out
}

// Candidates returns the candidate terms for the given factors and data:
// each factor (linear), log or log1p, hinge terms knee(F,K) on rate-like
// factors (named rate*) at each interior distinct value K when there are at
// least 3 distinct values, and every pairwise product. Memory-like factors
// (named mem*, where 0 means unlimited) enter only as inv(F), which maps
// unlimited to 0 and grows as the limit shrinks.
func Candidates(obs []Observation, factors []string) []string {
	var out []string
	base := func(f string) string {
		if strings.HasPrefix(f, "mem") {
			return "inv(" + f + ")"
		}
		return f
	}
	for _, f := range factors {
		vals := distinct(obs, f)
		out = append(out, base(f))
		if strings.HasPrefix(f, "mem") {
			continue
		}
		lo := vals[0]
		switch {
		case lo > 0:
			out = append(out, "log("+f+")")
		case lo == 0 && len(vals) >= 3:
			out = append(out, "log1p("+f+")")
		}
		if strings.HasPrefix(f, "rate") && len(vals) >= 3 {
			for _, k := range vals[1 : len(vals)-1] {
				out = append(out, Term{atoms: []atom{{fn: "knee", factor: f, arg: k}}}.String())
			}
		}
	}
	for i := range factors {
		for j := i + 1; j < len(factors); j++ {
			out = append(out, base(factors[i])+"*"+base(factors[j]))
		}
	}
	return out
}

func distinct(obs []Observation, f string) []float64 {
	var vals []float64
	for _, o := range obs {
		vals = append(vals, o.X[f])
	}
	slices.Sort(vals)
	return slices.Compact(vals)
}

// Fit chooses terms by forward selection under cross-validation and fits
// them by least squares.
func Fit(obs []Observation, opts FitOptions) (*Model, error) {
	opts = opts.withDefaults()
	n := len(obs)
	if n < 1 {
		return nil, errors.New("no conditions to fit a model to")
	}
	switch opts.Transform {
	case "auto", "none", "log":
	default:
		return nil, fmt.Errorf("unknown response transform %q (none, log, auto)", opts.Transform)
	}
	for i, o := range obs {
		if math.IsNaN(o.Y) || math.IsInf(o.Y, 0) {
			return nil, fmt.Errorf("condition %d: response is %v", i, o.Y)
		}
	}
	factors := opts.Factors
	if factors == nil {
		seen := map[string]int{}
		for _, o := range obs {
			for k := range o.X {
				seen[k]++
			}
		}
		for k, c := range seen {
			if c == n {
				factors = append(factors, k)
			}
		}
		sort.Strings(factors)
	}
	m := &Model{
		Coefficients: map[string]float64{},
		CI95:         map[string][2]float64{},
		Ranges:       map[string][2]float64{},
		Response:     opts.Response,
		NConditions:  n,
	}
	var varying []string
	for _, f := range factors {
		for i, o := range obs {
			if _, ok := o.X[f]; !ok {
				return nil, fmt.Errorf("condition %d lacks factor %q", i, f)
			}
		}
		vals := distinct(obs, f)
		m.Ranges[f] = [2]float64{vals[0], vals[len(vals)-1]}
		if len(vals) >= 2 {
			varying = append(varying, f)
		}
	}
	m.Factors = factors
	cands := opts.Candidates
	if cands == nil {
		cands = Candidates(obs, varying)
	}
	candTerms := make([]Term, 0, len(cands))
	for _, c := range cands {
		t, err := ParseTerm(c)
		if err != nil {
			return nil, err
		}
		candTerms = append(candTerms, t)
	}
	y := make([]float64, n)
	for i, o := range obs {
		y[i] = o.Y
	}
	folds := opts.Folds
	if n < 2*folds {
		folds = n
	}
	m.Folds = folds
	foldOf := assignFolds(n, folds, opts.Seed)
	maxTerms := opts.MaxTerms
	if maxTerms == 0 {
		maxTerms = min(8, n/3)
	}

	transforms := []string{opts.Transform}
	if opts.Transform == "auto" {
		transforms = []string{"none"}
		if positive(y) {
			transforms = append(transforms, "log")
		}
	} else if opts.Transform == "log" && !positive(y) {
		return nil, errors.New("log transform needs a positive response")
	}
	var chosen []Term
	var cols [][]float64
	best := math.Inf(1)
	for _, tr := range transforms {
		c, k, v := selectTerms(candTerms, obs, y, tr, foldOf, folds, maxTerms, opts.MinGain)
		if v < best || chosen == nil {
			chosen, cols, best, m.Transform = c, k, v, tr
		}
	}
	yt := forward(m.Transform, y)

	beta, cov, rssT, err := ols(cols, yt)
	if err != nil {
		return nil, err
	}
	p := len(cols)
	df := n - p
	var tq float64
	if df > 0 {
		tq = distuv.StudentsT{Mu: 0, Sigma: 1, Nu: float64(df)}.Quantile(0.975)
	} else {
		m.Notes = append(m.Notes, "no residual degrees of freedom: confidence intervals omitted")
	}
	for i, t := range chosen {
		name := t.String()
		m.Terms = append(m.Terms, name)
		m.Coefficients[name] = beta[i]
		if df > 0 {
			se := math.Sqrt(cov.At(i, i) * rssT / float64(df))
			m.CI95[name] = [2]float64{beta[i] - tq*se, beta[i] + tq*se}
		}
	}
	if m.Transform == "log" {
		m.Notes = append(m.Notes, "terms model ln("+m.Response+"): Predict returns exp(sum of terms); coefficients and CIs are on the log scale")
	}
	mean := 0.0
	for _, v := range y {
		mean += v
	}
	mean /= float64(n)
	sst, rss := 0.0, 0.0
	for i, v := range y {
		sst += (v - mean) * (v - mean)
		f := inverse(m.Transform, predictRow(cols, beta, i))
		rss += (v - f) * (v - f)
	}
	cvPred, ok := cvPredict(cols, yt, foldOf, folds)
	press := 0.0
	if ok {
		for i := range y {
			f := inverse(m.Transform, cvPred[i])
			press += (y[i] - f) * (y[i] - f)
		}
	} else {
		press = rss
		m.Notes = append(m.Notes, "too few conditions for cross-validation: r2 and rmse_us are in-sample")
	}
	m.RMSEus = math.Sqrt(press / float64(n))
	m.RMSETrainUS = math.Sqrt(rss / float64(n))
	if sst > 0 {
		m.R2 = 1 - press/sst
		m.R2Train = 1 - rss/sst
	} else {
		m.Notes = append(m.Notes, "response does not vary: R^2 undefined, reported as 0")
	}
	if len(varying) == 0 {
		m.Notes = append(m.Notes, "no factor varies: intercept-only model")
	}
	return m, nil
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

// selectTerms runs forward selection for one response transform. Terms are
// chosen by cross-validated RMSE on the transform's scale (for log, relative
// error: one saturated condition does not drown the rest); the returned
// score is the cross-validated RMSE on the original scale, which decides
// between transforms.
func selectTerms(candTerms []Term, obs []Observation, y []float64, tr string, foldOf []int, folds, maxTerms int, minGain float64) ([]Term, [][]float64, float64) {
	n := len(y)
	yt := forward(tr, y)
	score := func(cols [][]float64) (float64, bool) {
		pred, ok := cvPredict(cols, yt, foldOf, folds)
		if !ok {
			return math.Inf(1), false
		}
		s := 0.0
		for i := range y {
			d := yt[i] - pred[i]
			s += d * d
		}
		v := math.Sqrt(s / float64(n))
		if math.IsNaN(v) {
			return math.Inf(1), false
		}
		return v, true
	}
	original := func(cols [][]float64) float64 {
		pred, ok := cvPredict(cols, yt, foldOf, folds)
		if !ok {
			return math.Inf(1)
		}
		s := 0.0
		for i := range y {
			d := y[i] - inverse(tr, pred[i])
			s += d * d
		}
		return math.Sqrt(s / float64(n))
	}
	chosen := []Term{{}}
	cols := [][]float64{ones(n)}
	bestCV, _ := score(cols)
	used := map[string]bool{Intercept: true}
	for len(chosen)-1 < maxTerms {
		bestIdx, bestVal := -1, bestCV
		var bestCol []float64
		for ci, t := range candTerms {
			if used[t.String()] {
				continue
			}
			col, err := column(t, obs)
			if err != nil {
				continue // e.g. log of a zero: not a usable candidate
			}
			trial := append(slices.Clone(cols), col)
			if !fullRank(trial) {
				continue
			}
			v, ok := score(trial)
			if !ok {
				continue
			}
			if v < bestVal {
				bestIdx, bestVal, bestCol = ci, v, col
			}
		}
		if bestIdx < 0 || !(bestVal < bestCV*(1-minGain)) {
			break
		}
		chosen = append(chosen, candTerms[bestIdx])
		cols = append(cols, bestCol)
		used[candTerms[bestIdx].String()] = true
		bestCV = bestVal
	}
	return chosen, cols, original(cols)
}

// CVPredictions returns the out-of-fold predictions of m's terms refitted on
// obs with the same fold assignment Fit used, for fitted-vs-measured plots.
func CVPredictions(m *Model, obs []Observation, seed uint64) ([]float64, error) {
	if seed == 0 {
		seed = 1
	}
	cols := make([][]float64, 0, len(m.Terms))
	for _, s := range m.Terms {
		t, err := ParseTerm(s)
		if err != nil {
			return nil, err
		}
		col, err := column(t, obs)
		if err != nil {
			return nil, err
		}
		cols = append(cols, col)
	}
	y := make([]float64, len(obs))
	for i, o := range obs {
		y[i] = o.Y
	}
	folds := m.Folds
	if folds < 2 || folds > len(obs) {
		folds = len(obs)
	}
	pred, _ := cvPredict(cols, forward(m.Transform, y), assignFolds(len(obs), folds, seed), folds)
	for i := range pred {
		pred[i] = inverse(m.Transform, pred[i])
	}
	return pred, nil
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

func assignFolds(n, k int, seed uint64) []int {
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	rng := rand.New(rand.NewPCG(seed, 0xf01d))
	rng.Shuffle(n, func(i, j int) { idx[i], idx[j] = idx[j], idx[i] })
	f := make([]int, n)
	for pos, i := range idx {
		f[i] = pos % k
	}
	return f
}

// standardize returns the design matrix with non-constant columns centred
// and scaled, the scale factors and the means, for a well-conditioned fit.
func design(cols [][]float64, rows []int) (*mat.Dense, []float64, []float64) {
	p := len(cols)
	x := mat.NewDense(len(rows), p, nil)
	scale := make([]float64, p)
	center := make([]float64, p)
	for j, c := range cols {
		if j == 0 {
			scale[j], center[j] = 1, 0
		} else {
			mu, sd := 0.0, 0.0
			for _, r := range rows {
				mu += c[r]
			}
			mu /= float64(len(rows))
			for _, r := range rows {
				sd += (c[r] - mu) * (c[r] - mu)
			}
			sd = math.Sqrt(sd / float64(len(rows)))
			if sd == 0 {
				sd = 1
			}
			scale[j], center[j] = sd, mu
		}
		for i, r := range rows {
			x.Set(i, j, (c[r]-center[j])/scale[j])
		}
	}
	return x, scale, center
}

// fullRank reports whether the columns are linearly independent with a
// comfortable margin.
func fullRank(cols [][]float64) bool {
	n := len(cols[0])
	if len(cols) > n {
		return false
	}
	rows := make([]int, n)
	for i := range rows {
		rows[i] = i
	}
	x, _, _ := design(cols, rows)
	var svd mat.SVD
	if !svd.Factorize(x, mat.SVDNone) {
		return false
	}
	v := svd.Values(nil)
	return v[len(v)-1] > 1e-8*v[0]
}

// solve fits y on cols restricted to rows; it returns the coefficients in
// the original units and (X'X)^-1 in the original units.
func solve(cols [][]float64, y []float64, rows []int) ([]float64, *mat.SymDense, error) {
	x, scale, center := design(cols, rows)
	p := len(cols)
	yv := mat.NewVecDense(len(rows), nil)
	for i, r := range rows {
		yv.SetVec(i, y[r])
	}
	var xtx mat.SymDense
	xtx.SymOuterK(1, x.T())
	var chol mat.Cholesky
	if ok := chol.Factorize(&xtx); !ok {
		return nil, nil, errors.New("singular design: terms are collinear")
	}
	var xty mat.VecDense
	xty.MulVec(x.T(), yv)
	var bz mat.VecDense
	if err := chol.SolveVecTo(&bz, &xty); err != nil {
		return nil, nil, fmt.Errorf("least squares: %w", err)
	}
	var covZ mat.SymDense
	if err := chol.InverseTo(&covZ); err != nil {
		return nil, nil, fmt.Errorf("least squares: %w", err)
	}
	// b = A bz with A[0][0]=1, A[0][j]=-center_j/scale_j, A[j][j]=1/scale_j.
	a := mat.NewDense(p, p, nil)
	a.Set(0, 0, 1)
	for j := 1; j < p; j++ {
		a.Set(0, j, -center[j]/scale[j])
		a.Set(j, j, 1/scale[j])
	}
	var b mat.VecDense
	b.MulVec(a, &bz)
	var tmp, cov mat.Dense
	tmp.Mul(a, &covZ)
	cov.Mul(&tmp, a.T())
	sym := mat.NewSymDense(p, nil)
	for i := 0; i < p; i++ {
		for j := i; j < p; j++ {
			sym.SetSym(i, j, cov.At(i, j))
		}
	}
	return b.RawVector().Data, sym, nil
}

func ols(cols [][]float64, y []float64) (beta []float64, cov *mat.SymDense, rss float64, err error) {
	rows := make([]int, len(y))
	for i := range rows {
		rows[i] = i
	}
	beta, cov, err = solve(cols, y, rows)
	if err != nil {
		return nil, nil, 0, err
	}
	for i := range y {
		r := y[i] - predictRow(cols, beta, i)
		rss += r * r
	}
	return beta, cov, rss, nil
}

func predictRow(cols [][]float64, beta []float64, i int) float64 {
	v := 0.0
	for j, c := range cols {
		v += beta[j] * c[i]
	}
	return v
}

func cvPredict(cols [][]float64, y []float64, foldOf []int, k int) ([]float64, bool) {
	pred := make([]float64, len(y))
	for f := 0; f < k; f++ {
		var train, test []int
		for i, fi := range foldOf {
			if fi == f {
				test = append(test, i)
			} else {
				train = append(train, i)
			}
		}
		if len(train) < len(cols) {
			return nil, false
		}
		beta, _, err := solve(cols, y, train)
		if err != nil {
			return nil, false
		}
		for _, i := range test {
			pred[i] = predictRow(cols, beta, i)
		}
	}
	return pred, true
}
