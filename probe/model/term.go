package model

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

// Intercept is the name of the constant term.
const Intercept = "intercept"

// atom is one factor, optionally transformed.
type atom struct {
	fn     string // "", "log", "log1p", "inv", "knee"
	factor string
	arg    float64 // knee point for "knee"
}

// Term is a parsed model term: the product of one or more atoms, or the
// intercept (no atoms). Its String form is what model.json stores.
type Term struct {
	atoms []atom
}

// ParseTerm parses a term expression:
//
//	intercept          the constant 1
//	F                  factor F as is
//	log(F)             natural log of F (F > 0)
//	log1p(F)           log(1+F) (F >= 0), for counts that may be 0
//	inv(F)             1/F, and 0 when F is 0 (used for memory: 0 = unlimited)
//	knee(F,K)          max(0, F-K): a hinge whose slope starts at K
//	A*B                product (interaction) of two or more of the above
func ParseTerm(s string) (Term, error) {
	s = strings.TrimSpace(s)
	if s == Intercept {
		return Term{}, nil
	}
	if s == "" {
		return Term{}, errors.New("empty term")
	}
	var t Term
	for _, part := range strings.Split(s, "*") {
		a, err := parseAtom(strings.TrimSpace(part))
		if err != nil {
			return Term{}, fmt.Errorf("term %q: %w", s, err)
		}
		t.atoms = append(t.atoms, a)
	}
	return t, nil
}

func validName(s string) bool {
	if s == "" || s == Intercept {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_') {
			return false
		}
	}
	return true
}

func parseAtom(s string) (atom, error) {
	open := strings.IndexByte(s, '(')
	if open < 0 {
		if !validName(s) {
			return atom{}, fmt.Errorf("bad factor name %q", s)
		}
		return atom{factor: s}, nil
	}
	if !strings.HasSuffix(s, ")") {
		return atom{}, fmt.Errorf("missing ')' in %q", s)
	}
	fn, inner := s[:open], s[open+1:len(s)-1]
	a := atom{fn: fn}
	switch fn {
	case "log", "log1p", "inv":
		a.factor = strings.TrimSpace(inner)
	case "knee":
		name, k, ok := strings.Cut(inner, ",")
		if !ok {
			return atom{}, fmt.Errorf("knee needs a factor and a knee point: %q", s)
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(k), 64)
		if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
			return atom{}, fmt.Errorf("bad knee point in %q", s)
		}
		a.factor, a.arg = strings.TrimSpace(name), v
	default:
		return atom{}, fmt.Errorf("unknown function %q", fn)
	}
	if !validName(a.factor) {
		return atom{}, fmt.Errorf("bad factor name %q", a.factor)
	}
	return a, nil
}

func (a atom) String() string {
	switch a.fn {
	case "":
		return a.factor
	case "knee":
		return fmt.Sprintf("knee(%s,%s)", a.factor, strconv.FormatFloat(a.arg, 'g', -1, 64))
	default:
		return a.fn + "(" + a.factor + ")"
	}
}

// String returns the canonical expression of t (atoms sorted).
func (t Term) String() string {
	if len(t.atoms) == 0 {
		return Intercept
	}
	parts := make([]string, len(t.atoms))
	for i, a := range t.atoms {
		parts[i] = a.String()
	}
	sort.Strings(parts)
	return strings.Join(parts, "*")
}

// Factors returns the factor names t uses.
func (t Term) Factors() []string {
	var out []string
	for _, a := range t.atoms {
		out = append(out, a.factor)
	}
	return out
}

// Eval evaluates t at the factor values x.
func (t Term) Eval(x map[string]float64) (float64, error) {
	v := 1.0
	for _, a := range t.atoms {
		f, ok := x[a.factor]
		if !ok {
			return 0, fmt.Errorf("missing factor %q", a.factor)
		}
		switch a.fn {
		case "":
		case "log":
			if f <= 0 {
				return 0, fmt.Errorf("log(%s) needs %s > 0, got %g", a.factor, a.factor, f)
			}
			f = math.Log(f)
		case "log1p":
			if f < 0 {
				return 0, fmt.Errorf("log1p(%s) needs %s >= 0, got %g", a.factor, a.factor, f)
			}
			f = math.Log1p(f)
		case "inv":
			if f != 0 {
				f = 1 / f
			}
		case "knee":
			f = math.Max(0, f-a.arg)
		}
		v *= f
	}
	return v, nil
}
