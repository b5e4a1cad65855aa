// Package model fits an empirical model of packet delay through a switch to
// the factors of a measurement sweep (packet size, rate, flows, OpenFlow
// rules, memory, CPU quota, cold or warm caches) and predicts from it.
//
// The fit is ordinary least squares on terms chosen by forward selection
// under k-fold cross-validation from a candidate set: each varying factor as
// is, its log, 1/memory, hinge ("knee") terms on the rate near saturation,
// and pairwise interactions; the response is modelled as is or as its log,
// whichever predicts held-out conditions better.
//
// Because the folds that choose the terms and the transform would flatter
// the model if they also scored it, the reported R^2 and RMSE come from
// nested cross-validation: repeated outer folds whose conditions never take
// part in the selection, which is rerun from scratch on each outer training
// set (its own inner folds). Coefficient intervals come from a bootstrap of
// the whole pipeline: conditions resampled with replacement, selection and
// fit rerun on each resample, with how often each term was selected. The
// Model marshals to model.json.
package model

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
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
	// Folds is k of the inner k-fold cross-validation that chooses terms
	// and transform; 0 means 5. A set of fewer than 2*Folds conditions
	// uses leave-one-out.
	Folds int
	// OuterFolds is k of the outer cross-validation that scores the whole
	// selection procedure; 0 means 5 (leave-one-out below 2*OuterFolds
	// conditions). Negative skips the outer loop: r2 and rmse_us are then
	// the inner, optimistic figures (noted in the model).
	OuterFolds int
	// Repeats is how many times the outer cross-validation is run, each
	// with a fresh random fold assignment; 0 means 5 (1 for leave-one-out).
	Repeats int
	// Bootstrap is the number of bootstrap replicates of the whole
	// pipeline behind the coefficient intervals; 0 means 200. Negative
	// skips it: ci95 are then the t-intervals given the selected terms
	// (noted in the model).
	Bootstrap int
	// MaxTerms caps the non-intercept terms; 0 means min(8, n/3) for a set
	// of n conditions.
	MaxTerms int
	// MinGain is the relative drop of cross-validated RMSE a new term must
	// bring to be added; 0 means 0.02 (2 %).
	MinGain float64
	// Seed seeds the fold assignments and the bootstrap; 0 means 1.
	Seed uint64
	// Response names the modelled quantity in model.json; "" means "p50_us".
	Response string
	// Transform of the response: "none", "log" or "auto" (""; both tried,
	// the lower inner cross-validated RMSE on the original scale wins; log
	// only when every response is positive).
	Transform string
}

func (o FitOptions) withDefaults() FitOptions {
	if o.Folds == 0 {
		o.Folds = 5
	}
	if o.OuterFolds == 0 {
		o.OuterFolds = 5
	}
	if o.Repeats == 0 {
		o.Repeats = 5
	}
	if o.Bootstrap == 0 {
		o.Bootstrap = 200
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
	// term unit), fitted by least squares on all conditions.
	Coefficients map[string]float64 `json:"coefficients"`
	// CI95 maps each term to its 95 % confidence interval [lo, hi]: the
	// percentile interval of the term's coefficient over bootstrap
	// replicates of the whole pipeline (0 in replicates that did not
	// select the term). Absent when the bootstrap did not run and the fit
	// has no residual degrees of freedom.
	CI95 map[string][2]float64 `json:"ci95"`
	// CI95GivenTerms are the Student t intervals of least squares given
	// the selected terms, which ignore that the terms were chosen on the
	// same data: narrower than CI95, for reference only.
	CI95GivenTerms map[string][2]float64 `json:"ci95_given_terms,omitempty"`
	// R2 and RMSEus are the honest held-out figures: nested
	// cross-validation, the mean over the outer repeats of the pooled
	// out-of-fold R^2 and RMSE (original scale). CV has their spread.
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
	// NConditions describes the fit; Folds is k of the inner
	// cross-validation that chose the terms on all conditions.
	NConditions int `json:"n_conditions"`
	Folds       int `json:"folds"`
	// CV reports the nested cross-validation; nil when it did not run.
	CV *CVReport `json:"cv,omitempty"`
	// Bootstrap reports the bootstrap of the pipeline; nil when it did not
	// run.
	Bootstrap *BootReport `json:"bootstrap,omitempty"`
	// Ranges are the [min, max] of each factor in the data: predictions
	// outside are extrapolations.
	Ranges map[string][2]float64 `json:"factor_ranges"`
	// Notes explain anything unusual about the fit.
	Notes []string `json:"notes,omitempty"`
	// OuterPredictions are the out-of-fold predictions of the first outer
	// repeat, one per observation in Fit's order (original scale), for
	// predicted-vs-measured plots. Not saved.
	OuterPredictions []float64 `json:"-"`
}

// Spread summarises a figure over folds or repeats.
type Spread struct {
	Mean float64 `json:"mean"`
	SD   float64 `json:"sd"`
	Min  float64 `json:"min"`
	Max  float64 `json:"max"`
	N    int     `json:"n"`
}

// CVReport describes the nested cross-validation behind Model.R2 and
// Model.RMSEus.
type CVReport struct {
	// OuterFolds, InnerFolds and Repeats describe the design (k of the
	// outer and of the inner cross-validation, outer repeats).
	// InnerFolds 0 means leave-one-out (outer training sets smaller than
	// twice FitOptions.Folds).
	OuterFolds int `json:"outer_folds"`
	InnerFolds int `json:"inner_folds"`
	Repeats    int `json:"repeats"`
	// R2 and RMSEus: per outer repeat, the pooled out-of-fold figure; their
	// mean is Model.R2 and Model.RMSEus.
	R2     Spread `json:"r2"`
	RMSEus Spread `json:"rmse_us"`
	// FoldR2 and FoldRMSEus: per outer fold (over all repeats), the figure
	// on that fold's held-out conditions; a fold's R^2 compares with
	// predicting the training conditions' mean.
	FoldR2     Spread `json:"fold_r2"`
	FoldRMSEus Spread `json:"fold_rmse_us"`
	// InnerR2 and InnerRMSEus are what the selection's own folds report
	// for the final terms on all conditions: the figures an un-nested
	// cross-validation would publish.
	InnerR2     float64 `json:"inner_r2"`
	InnerRMSEus float64 `json:"inner_rmse_us"`
	// OptimismR2 is InnerR2 - R2; OptimismRMSEus is RMSEus - InnerRMSEus:
	// positive values are how much the un-nested figures flatter the model.
	OptimismR2     float64 `json:"optimism_r2"`
	OptimismRMSEus float64 `json:"optimism_rmse_us"`
	// Selected is the fraction of outer training sets whose selection
	// chose each term (terms never chosen are absent); Transforms the
	// fraction that chose each response transform.
	Selected   map[string]float64 `json:"selected"`
	Transforms map[string]float64 `json:"transforms"`
}

// BootReport describes the bootstrap of the whole pipeline behind
// Model.CI95.
type BootReport struct {
	// Replicates is the number of resamples of the conditions (with
	// replacement); Used how many chose the final model's transform and so
	// enter the intervals (coefficients on another scale cannot mix).
	Replicates int `json:"replicates"`
	Used       int `json:"used"`
	// Selected is the fraction of replicates whose selection chose each
	// term (terms never chosen are absent); Transforms the fraction that
	// chose each response transform.
	Selected   map[string]float64 `json:"selected"`
	Transforms map[string]float64 `json:"transforms"`
	// Mean is each final term's mean coefficient over the used replicates
	// (0 where not selected): the bagged estimate. Far from the
	// coefficient, or a CI that excludes the coefficient, means the
	// selection is unstable on these data.
	Mean map[string]float64 `json:"mean,omitempty"`
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
