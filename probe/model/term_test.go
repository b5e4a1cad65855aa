package model

import (
	"math"
	"testing"
)

func TestParseTermEval(t *testing.T) {
	x := map[string]float64{"size_bytes": 1000, "rate_kpps": 10, "rules": 0, "mem_mib": 0, "flows": 4}
	tests := []struct {
		in, canon string
		want      float64
	}{
		{"intercept", "intercept", 1},
		{"size_bytes", "size_bytes", 1000},
		{" log(size_bytes) ", "log(size_bytes)", math.Log(1000)},
		{"log1p(rules)", "log1p(rules)", 0},
		{"inv(mem_mib)", "inv(mem_mib)", 0},
		{"inv(flows)", "inv(flows)", 0.25},
		{"knee(rate_kpps, 8)", "knee(rate_kpps,8)", 2},
		{"knee(rate_kpps,12.5)", "knee(rate_kpps,12.5)", 0},
		{"size_bytes*rate_kpps", "rate_kpps*size_bytes", 10000},
		{"rate_kpps*log(flows)", "log(flows)*rate_kpps", math.Log(4) * 10},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			term, err := ParseTerm(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if term.String() != tt.canon {
				t.Fatalf("String = %q, want %q", term.String(), tt.canon)
			}
			v, err := term.Eval(x)
			if err != nil {
				t.Fatal(err)
			}
			if math.Abs(v-tt.want) > 1e-12 {
				t.Fatalf("Eval = %v, want %v", v, tt.want)
			}
		})
	}
}

func TestParseTermErrors(t *testing.T) {
	for _, in := range []string{"", "*", "Size", "log(size", "sqrt(size)", "knee(rate)", "knee(rate,x)", "knee(rate,NaN)", "a**b", "log()", "intercept*a"} {
		t.Run(in, func(t *testing.T) {
			if _, err := ParseTerm(in); err == nil {
				t.Fatalf("ParseTerm(%q) should fail", in)
			}
		})
	}
}

func TestEvalErrors(t *testing.T) {
	for _, tt := range []struct {
		term string
		x    map[string]float64
	}{
		{"size", map[string]float64{}},
		{"log(size)", map[string]float64{"size": 0}},
		{"log1p(size)", map[string]float64{"size": -1}},
	} {
		t.Run(tt.term, func(t *testing.T) {
			term, err := ParseTerm(tt.term)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := term.Eval(tt.x); err == nil {
				t.Fatal("want error")
			}
		})
	}
}

func FuzzParseTerm(f *testing.F) {
	for _, s := range []string{"intercept", "size_bytes", "log(a)*knee(b,3)", "inv(m)", "knee(r,1e3)*x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		term, err := ParseTerm(s)
		if err != nil {
			return
		}
		// The canonical form parses back to itself.
		again, err := ParseTerm(term.String())
		if err != nil {
			t.Fatalf("canonical %q of %q does not parse: %v", term.String(), s, err)
		}
		if again.String() != term.String() {
			t.Fatalf("not canonical: %q -> %q", term.String(), again.String())
		}
		x := map[string]float64{}
		for _, name := range term.Factors() {
			x[name] = 2
		}
		if _, err := term.Eval(x); err != nil {
			t.Fatalf("eval: %v", err)
		}
	})
}
