package lab

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseDistribution(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		wantN   int
		wantErr bool
	}{
		{"ok", "delay_us,cdf\n10.0,0\n12.5,0.5\n20,1\n", 3, false},
		{"blank lines", "delay_us,cdf\n10,0\n\n20,1\n", 2, false},
		{"empty", "", 0, true},
		{"header only", "delay_us,cdf\n", 0, true},
		{"bad header", "x,y\n1,0\n2,1\n", 0, true},
		{"one column", "delay_us,cdf\n10\n", 0, true},
		{"bad number", "delay_us,cdf\nabc,0\n2,1\n", 0, true},
		{"cdf above 1", "delay_us,cdf\n1,0\n2,1.5\n", 0, true},
		{"nan", "delay_us,cdf\nNaN,0\n2,1\n", 0, true},
		{"decreasing delay", "delay_us,cdf\n5,0\n2,1\n", 0, true},
		{"decreasing cdf", "delay_us,cdf\n1,0\n2,0.6\n3,0.5\n4,1\n", 0, true},
		{"no cdf 1", "delay_us,cdf\n1,0\n2,0.9\n", 0, true},
		{"no cdf 0", "delay_us,cdf\n1,0.1\n2,1\n", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, p, err := ParseDistribution(strings.NewReader(tt.in))
			if tt.wantErr {
				if err == nil {
					t.Fatalf("want error, got %v %v", v, p)
				}
				return
			}
			if err != nil || len(v) != tt.wantN || len(p) != tt.wantN {
				t.Fatalf("got %v %v %v", v, p, err)
			}
		})
	}
}

func FuzzParseDistribution(f *testing.F) {
	f.Add("delay_us,cdf\n10.0,0\n12.5,0.5\n20,1\n")
	f.Add("delay_us,cdf\n1,0\n")
	f.Fuzz(func(t *testing.T, s string) {
		v, p, err := ParseDistribution(strings.NewReader(s))
		if err != nil {
			return
		}
		ks, _, _ := CheckTable(v, p, []float64{v[0], v[len(v)-1]}, 1)
		if ks < 0 || ks > 1 {
			t.Fatalf("KS %v out of [0, 1]", ks)
		}
	})
}

// TestSimCheckFixture checks the simulator export end to end on real
// measurements (testdata/simcheck: three conditions of a full sweep on the
// userspace datapath, 2500 packets each, with the tables the lab wrote):
// values drawn from each condition's table are indistinguishable from its
// measured delays (KS distance below the 5 % critical value, for
// interpolated and step draws), while a table paired with another
// condition's delays is far off (a negative control: the check can fail).
func TestSimCheckFixture(t *testing.T) {
	dir := filepath.Join("testdata", "simcheck")
	rows, err := ReadRows(filepath.Join(dir, "conditions.csv"))
	if err != nil {
		t.Fatal(err)
	}
	checks, err := SimCheck(dir, rows, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(checks) != 3 {
		t.Fatalf("%d conditions checked, want 3", len(checks))
	}
	for _, c := range checks {
		t.Logf("%s: n %d, KS interp %.4f, step %.4f, 5 %% critical %.4f", c.FileID, c.N, c.KSInterp, c.KSStep, c.Critical)
		if c.N < 2000 || c.Draws != c.N {
			t.Errorf("%s: n %d draws %d", c.FileID, c.N, c.Draws)
		}
		if c.KSInterp > c.Critical || c.KSStep > c.Critical {
			t.Errorf("%s: KS %.4f/%.4f above the critical %.4f: the table does not reproduce the measurement", c.FileID, c.KSInterp, c.KSStep, c.Critical)
		}
	}
	// Negative control: the floor's table against c007's delays.
	f, err := os.Open(filepath.Join(dir, "distributions", "floor.csv"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	v, p, err := ParseDistribution(f)
	if err != nil {
		t.Fatal(err)
	}
	other, err := readSamplesUS(filepath.Join(dir, "samples", "c007.csv"))
	if err != nil {
		t.Fatal(err)
	}
	if ki, _, crit := CheckTable(v, p, other, 1); ki < 5*crit {
		t.Fatalf("a wrong table passes: KS %.4f, critical %.4f", ki, crit)
	}
	out := filepath.Join(t.TempDir(), "simcheck.csv")
	if err := writeSimCheck(out, checks); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil || strings.Count(string(b), "\n") != 4 || !strings.HasPrefix(string(b), "id,condition,n,draws,ks_interp,ks_step,ks_crit_5pct\n") {
		t.Fatalf("simcheck.csv: %q %v", b, err)
	}
}
