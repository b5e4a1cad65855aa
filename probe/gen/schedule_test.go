package gen

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// TestScheduleStatistics checks the gap process: the mean rate is Rate, and
// the coefficient of variation of burst gaps is 0 (constant) or 1 (Poisson).
func TestScheduleStatistics(t *testing.T) {
	tests := []struct {
		name    string
		rate    float64
		burst   int
		poisson bool
		wantCV  float64
	}{
		{"constant", 10000, 1, false, 0},
		{"constant bursts", 10000, 5, false, 0},
		{"poisson", 5000, 1, true, 1},
		{"poisson bursts", 5000, 4, true, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := Schedule{Rate: tt.rate, Burst: tt.burst, Poisson: tt.poisson, Rand: rand.New(rand.NewPCG(1, 2))}
			const n = 200000
			var total time.Duration
			var gaps []float64
			zeros := 0
			for i := 0; i < n; i++ {
				g := s.Next()
				total += g
				if g == 0 && tt.burst > 1 {
					zeros++
					continue
				}
				gaps = append(gaps, g.Seconds())
			}
			rate := n / total.Seconds()
			if math.Abs(rate-tt.rate)/tt.rate > 0.01 {
				t.Errorf("rate %.1f, want %.1f ±1%%", rate, tt.rate)
			}
			if tt.burst > 1 && zeros != n-n/tt.burst {
				t.Errorf("%d in-burst gaps, want %d", zeros, n-n/tt.burst)
			}
			var mean, m2 float64
			for _, g := range gaps {
				mean += g
			}
			mean /= float64(len(gaps))
			for _, g := range gaps {
				m2 += (g - mean) * (g - mean)
			}
			cv := math.Sqrt(m2/float64(len(gaps))) / mean
			if math.Abs(cv-tt.wantCV) > 0.02 {
				t.Errorf("coefficient of variation %.3f, want %.1f", cv, tt.wantCV)
			}
		})
	}
}

func TestOptionsValidate(t *testing.T) {
	dst := "10.0.0.2:9000"
	tests := []struct {
		name string
		o    Options
		ok   bool
	}{
		{"defaults", Options{}, true},
		{"no dst", Options{}, false},
		{"tiny frame", Options{Size: 40}, false},
		{"huge frame", Options{Size: 9000}, false},
		{"negative rate", Options{Rate: -1}, false},
		{"negative burst", Options{Burst: -2}, false},
		{"too many flows", Options{Flows: 70000}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := tt.o
			if tt.name != "no dst" {
				o.Dst = mustAddrPort(dst)
			}
			if err := o.Validate(); (err == nil) != tt.ok {
				t.Errorf("Validate() = %v, want ok=%v", err, tt.ok)
			}
		})
	}
}
