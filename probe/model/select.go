package model

import (
	"math"
	"math/rand/v2"
	"slices"
)

// pipeline is the whole selection procedure (response transform and terms
// by forward selection under inner cross-validation) over a fixed set of
// observations; selectOn runs it on any subset or resample of them, so that
// nested cross-validation and the bootstrap repeat exactly what Fit does.
type pipeline struct {
	cands    []Term      // usable candidate terms
	cols     [][]float64 // cols[c][i]: candidate c at observation i
	y        []float64   // response, original scale
	ylog     []float64   // ln y, nil unless every y > 0
	tr       string      // "auto", "none" or "log"
	folds    int         // inner k (requested)
	maxTerms int         // 0: min(8, rows/3)
	minGain  float64
	strata   [][]float64 // per observation, see strata; nil: none
}

// selection is the outcome of the pipeline on one set of rows.
type selection struct {
	transform string
	terms     []int   // candidate indices, in the order chosen
	innerRMSE float64 // inner cross-validated RMSE, original scale
	innerPred []float64
}

// pivotTol is the smallest pivot, relative to the diagonal of the
// standardized normal equations, of a column kept in a least-squares fit:
// a column whose R^2 on the columns before it exceeds 1 - pivotTol is
// treated as collinear.
const pivotTol = 1e-9

// transformed returns the response on the scale of transform tr.
func (p *pipeline) transformed(tr string) []float64 {
	if tr == "log" {
		return p.ylog
	}
	return p.y
}

// transforms lists the response transforms the pipeline tries on rows.
func (p *pipeline) transforms(rows []int) []string {
	switch p.tr {
	case "none":
		return []string{"none"}
	case "log":
		return []string{"log"}
	}
	out := []string{"none"}
	if p.ylog != nil {
		out = append(out, "log")
	}
	return out
}

// assignFolds deals the rows into k folds by observation, so that copies
// of one observation in a bootstrap resample share a fold (a copy in the
// training part would otherwise predict its twin), and stratified by the
// design's rare factor levels (see strata), so that conditions sharing a
// rare level land in different folds and every training part keeps some
// of them. It returns the fold of each row position and k (leave-one-out
// over observations when there are fewer than 2*k distinct ones).
func (p *pipeline) assignFolds(rows []int, k int, seed uint64) ([]int, int) {
	groups := slices.Clone(rows)
	slices.Sort(groups)
	groups = slices.Compact(groups)
	if len(groups) < 2*k {
		k = len(groups)
	}
	rng := rand.New(rand.NewPCG(seed, 0x1a7e))
	rng.Shuffle(len(groups), func(i, j int) { groups[i], groups[j] = groups[j], groups[i] })
	if p.strata != nil {
		slices.SortStableFunc(groups, func(a, b int) int { return slices.Compare(p.strata[a], p.strata[b]) })
	}
	foldOfObs := make(map[int]int, len(groups))
	for pos, g := range groups {
		foldOfObs[g] = pos % k
	}
	f := make([]int, len(rows))
	for i, r := range rows {
		f[i] = foldOfObs[r]
	}
	return f, k
}

// strata returns each observation's stratification key for fold
// assignment: its values of the rare factors, those at one level in at
// least two thirds of the conditions (in a sweep: rules, memory, CPU quota,
// cold), rarest first. Sorting by the key puts conditions that share a
// rare level next to each other, and dealing them round-robin spreads them
// over the folds. The key depends on the design only, never on the
// response. It returns nil when no factor is rare.
func strata(obs []Observation, factors []string) [][]float64 {
	type rare struct {
		name  string
		other int
	}
	var keys []rare
	n := len(obs)
	for _, f := range factors {
		count := map[float64]int{}
		for _, o := range obs {
			count[o.X[f]]++
		}
		modal := 0
		for _, c := range count {
			modal = max(modal, c)
		}
		if other := n - modal; other > 0 && 3*modal >= 2*n {
			keys = append(keys, rare{f, other})
		}
	}
	if len(keys) == 0 {
		return nil
	}
	slices.SortStableFunc(keys, func(a, b rare) int { return a.other - b.other })
	out := make([][]float64, n)
	for i, o := range obs {
		out[i] = make([]float64, len(keys))
		for j, k := range keys {
			out[i][j] = o.X[k.name]
		}
	}
	return out
}

// selectOn runs the selection on rows (observation indices; repeats
// allowed), its inner folds seeded by seed.
func (p *pipeline) selectOn(rows []int, seed uint64) selection {
	foldOf, k := p.assignFolds(rows, p.folds, seed)
	maxTerms := p.maxTerms
	if maxTerms == 0 {
		maxTerms = min(8, len(rows)/3)
	}
	var best selection
	best.innerRMSE = math.Inf(1)
	for _, tr := range p.transforms(rows) {
		s := p.forward(rows, tr, foldOf, k, maxTerms)
		if best.transform == "" || s.innerRMSE < best.innerRMSE {
			best = s
		}
	}
	return best
}

// forward runs forward selection for one transform. Terms are chosen by
// cross-validated RMSE on the transform's scale (for log, relative error:
// one saturated condition does not drown the rest); the returned score is
// the cross-validated RMSE on the original scale, which decides between
// transforms.
func (p *pipeline) forward(rows []int, tr string, foldOf []int, k, maxTerms int) selection {
	yt := p.transformed(tr)
	score := func(terms []int) (float64, []float64) {
		pred, ok := p.cvPredict(terms, rows, yt, foldOf, k)
		if !ok {
			return math.Inf(1), nil
		}
		s := 0.0
		for i, r := range rows {
			d := yt[r] - pred[i]
			s += d * d
		}
		v := math.Sqrt(s / float64(len(rows)))
		if math.IsNaN(v) {
			return math.Inf(1), nil
		}
		return v, pred
	}
	var chosen []int
	bestCV, bestPred := score(chosen)
	used := make([]bool, len(p.cands))
	for len(chosen) < maxTerms {
		bestIdx, bestVal := -1, bestCV
		var bp []float64
		for c := range p.cands {
			if used[c] {
				continue
			}
			trial := append(slices.Clip(chosen), c)
			if !p.fullRank(trial, rows) {
				continue
			}
			if v, pred := score(trial); v < bestVal {
				bestIdx, bestVal, bp = c, v, pred
			}
		}
		if bestIdx < 0 || !(bestVal < bestCV*(1-p.minGain)) {
			break
		}
		chosen = append(chosen, bestIdx)
		used[bestIdx] = true
		bestCV, bestPred = bestVal, bp
	}
	sel := selection{transform: tr, terms: chosen, innerRMSE: math.Inf(1)}
	if bestPred != nil {
		s := 0.0
		sel.innerPred = make([]float64, len(rows))
		for i, r := range rows {
			f := inverse(tr, bestPred[i])
			sel.innerPred[i] = f
			s += (p.y[r] - f) * (p.y[r] - f)
		}
		sel.innerRMSE = math.Sqrt(s / float64(len(rows)))
		if math.IsNaN(sel.innerRMSE) {
			sel.innerRMSE = math.Inf(1)
		}
	}
	return sel
}

// cvPredict returns the out-of-fold predictions (transform scale) of the
// intercept and terms at each row position. A term that is constant or
// collinear within a fold's training rows gets coefficient 0 in that fold.
func (p *pipeline) cvPredict(terms []int, rows []int, yt []float64, foldOf []int, k int) ([]float64, bool) {
	if k < 2 {
		return nil, false
	}
	pred := make([]float64, len(rows))
	train := make([]int, 0, len(rows))
	beta := make([]float64, len(terms)+1)
	for f := 0; f < k; f++ {
		train = train[:0]
		for i, r := range rows {
			if foldOf[i] != f {
				train = append(train, r)
			}
		}
		if len(train) == 0 {
			return nil, false
		}
		p.lsq(terms, train, yt, beta)
		for i, r := range rows {
			if foldOf[i] == f {
				pred[i] = p.predict(terms, beta, r)
			}
		}
	}
	return pred, true
}

func (p *pipeline) predict(terms []int, beta []float64, r int) float64 {
	v := beta[0]
	for j, c := range terms {
		v += beta[j+1] * p.cols[c][r]
	}
	return v
}

// fullRank reports whether the intercept and terms are linearly
// independent over rows.
func (p *pipeline) fullRank(terms []int, rows []int) bool {
	beta := make([]float64, len(terms)+1)
	return p.lsq(terms, rows, p.y, beta) == 0
}

// lsq fits yt (indexed by observation) on the intercept and terms over rows
// by least squares on standardized columns (normal equations, Cholesky).
// It writes the coefficients in original units to beta (intercept first);
// a column that is constant or collinear with the ones before it (pivot
// below pivotTol) gets 0. It returns how many columns it dropped.
func (p *pipeline) lsq(terms []int, rows []int, yt []float64, beta []float64) int {
	q := len(terms)
	m := float64(len(rows))
	ybar := 0.0
	for _, r := range rows {
		ybar += yt[r]
	}
	ybar /= m
	mu := make([]float64, q)
	sd := make([]float64, q)
	for j, c := range terms {
		col := p.cols[c]
		s := 0.0
		for _, r := range rows {
			s += col[r]
		}
		mu[j] = s / m
		v := 0.0
		for _, r := range rows {
			d := col[r] - mu[j]
			v += d * d
		}
		sd[j] = math.Sqrt(v / m)
	}
	// a = Z'Z (lower triangle used), b = Z'(y - ybar), Z standardized.
	a := make([]float64, q*q)
	b := make([]float64, q)
	z := make([]float64, q)
	for _, r := range rows {
		for j, c := range terms {
			if sd[j] > 0 {
				z[j] = (p.cols[c][r] - mu[j]) / sd[j]
			} else {
				z[j] = 0
			}
		}
		dy := yt[r] - ybar
		for j := 0; j < q; j++ {
			b[j] += z[j] * dy
			for l := 0; l <= j; l++ {
				a[j*q+l] += z[j] * z[l]
			}
		}
	}
	// Cholesky a = L L' in place (lower), skipping collinear columns.
	dropped := make([]bool, q)
	nd := 0
	for j := 0; j < q; j++ {
		d := a[j*q+j]
		for l := 0; l < j; l++ {
			d -= a[j*q+l] * a[j*q+l]
		}
		if sd[j] == 0 || !(d > pivotTol*m) {
			dropped[j] = true
			nd++
			for i := j; i < q; i++ {
				a[i*q+j] = 0
			}
			continue
		}
		d = math.Sqrt(d)
		a[j*q+j] = d
		for i := j + 1; i < q; i++ {
			s := a[i*q+j]
			for l := 0; l < j; l++ {
				s -= a[i*q+l] * a[j*q+l]
			}
			a[i*q+j] = s / d
		}
	}
	// Solve L w = b, then L' g = w.
	w := make([]float64, q)
	for j := 0; j < q; j++ {
		if dropped[j] {
			continue
		}
		s := b[j]
		for l := 0; l < j; l++ {
			s -= a[j*q+l] * w[l]
		}
		w[j] = s / a[j*q+j]
	}
	g := make([]float64, q)
	for j := q - 1; j >= 0; j-- {
		if dropped[j] {
			continue
		}
		s := w[j]
		for i := j + 1; i < q; i++ {
			s -= a[i*q+j] * g[i]
		}
		g[j] = s / a[j*q+j]
	}
	beta[0] = ybar
	for j := range terms {
		if dropped[j] {
			beta[j+1] = 0
			continue
		}
		beta[j+1] = g[j] / sd[j]
		beta[0] -= beta[j+1] * mu[j]
	}
	return nd
}
