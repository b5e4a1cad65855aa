package lab

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/quiot/quiot/probe/stats"
)

// SimCheckRow is the end-to-end check of one measured condition's simulator
// table (distributions/ID.csv): values drawn from the table the way a
// simulator draws them, compared with the condition's measured delays
// (samples/ID.csv) by the two-sample Kolmogorov-Smirnov distance.
type SimCheckRow struct {
	// FileID names the condition's files; Condition describes it.
	FileID    string
	Condition Condition
	// N is the number of measured delays; Draws the number of values
	// drawn from the table (as many).
	N, Draws int
	// KSInterp is the KS distance for draws interpolated linearly between
	// table points (ns-3 EmpiricalRandomVariable with Interpolate=true);
	// KSStep for draws that take the first table value whose cdf >= u
	// (its default, Interpolate=false).
	KSInterp, KSStep float64
	// Critical is the two-sample KS distance exceeded with probability
	// 5 % by two samples of sizes N and Draws from one distribution.
	Critical float64
}

// ParseDistribution parses a distribution table: a "delay_us,cdf" header,
// then at least two rows with both columns non-decreasing, cdf from 0 to 1.
func ParseDistribution(r io.Reader) (values, probs []float64, err error) {
	sc := bufio.NewScanner(r)
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if line == 1 {
			if text != "delay_us,cdf" {
				return nil, nil, fmt.Errorf("distribution table: header %q, want delay_us,cdf", text)
			}
			continue
		}
		if text == "" {
			continue
		}
		vs, ps, ok := strings.Cut(text, ",")
		if !ok {
			return nil, nil, fmt.Errorf("distribution table line %d: want delay_us,cdf", line)
		}
		v, err1 := strconv.ParseFloat(strings.TrimSpace(vs), 64)
		p, err2 := strconv.ParseFloat(strings.TrimSpace(ps), 64)
		if err1 != nil || err2 != nil || math.IsNaN(v) || math.IsInf(v, 0) || !(p >= 0 && p <= 1) {
			return nil, nil, fmt.Errorf("distribution table line %d: bad numbers %q", line, text)
		}
		if n := len(values); n > 0 && (v < values[n-1] || p < probs[n-1]) {
			return nil, nil, fmt.Errorf("distribution table line %d: delay or cdf decreases", line)
		}
		values, probs = append(values, v), append(probs, p)
	}
	if err := sc.Err(); err != nil {
		return nil, nil, fmt.Errorf("distribution table: %w", err)
	}
	if line == 0 {
		return nil, nil, errors.New("distribution table is empty")
	}
	if len(values) < 2 || probs[0] != 0 || probs[len(probs)-1] != 1 {
		return nil, nil, errors.New("distribution table: need at least two rows, cdf from 0 to 1")
	}
	return values, probs, nil
}

// stepInverseCDF returns the first table value whose cdf is >= u.
func stepInverseCDF(values, probs []float64, u float64) float64 {
	k, _ := slices.BinarySearch(probs, u)
	return values[min(k, len(values)-1)]
}

// CheckTable draws len(measured) values from the table (values, probs) in
// both simulator modes with a generator seeded by seed and returns the KS
// distances to the measured delays (interpolated, step) and the 5 %
// critical value.
func CheckTable(values, probs, measured []float64, seed uint64) (ksInterp, ksStep, critical float64) {
	n := len(measured)
	rng := rand.New(rand.NewPCG(seed, 0x515))
	a, b := make([]float64, n), make([]float64, n)
	for i := range a {
		u := rng.Float64()
		a[i] = stats.InverseCDF(values, probs, u)
		b[i] = stepInverseCDF(values, probs, u)
	}
	return stats.KS(a, measured), stats.KS(b, measured), stats.KSCritical(n, n, 0.05)
}

// SimCheck checks the distribution table of each row that has both its
// table and its samples in dir; rows lacking either are skipped.
func SimCheck(dir string, rows []Row, seed uint64) ([]SimCheckRow, error) {
	var out []SimCheckRow
	for i, r := range rows {
		delays, err := readSamplesUS(filepath.Join(dir, "samples", r.FileID()+".csv"))
		if err != nil || len(delays) == 0 {
			continue
		}
		f, err := os.Open(filepath.Join(dir, "distributions", r.FileID()+".csv"))
		if err != nil {
			continue
		}
		values, probs, err := ParseDistribution(f)
		f.Close()
		if err != nil {
			return out, fmt.Errorf("condition %s: %w", r.FileID(), err)
		}
		ki, ks, crit := CheckTable(values, probs, delays, seed+uint64(i))
		out = append(out, SimCheckRow{FileID: r.FileID(), Condition: r.Condition, N: len(delays), Draws: len(delays), KSInterp: ki, KSStep: ks, Critical: crit})
	}
	return out, nil
}

func writeSimCheck(path string, rows []SimCheckRow) error {
	var b strings.Builder
	b.WriteString("id,condition,n,draws,ks_interp,ks_step,ks_crit_5pct\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "%s,%q,%d,%d,%.5f,%.5f,%.5f\n", r.FileID, r.Condition.Describe(), r.N, r.Draws, r.KSInterp, r.KSStep, r.Critical)
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("write simulator check: %w", err)
	}
	return nil
}
