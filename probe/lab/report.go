package lab

import (
	"bufio"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"github.com/quiot/quiot/internal/htmlreport"
	"github.com/quiot/quiot/probe/model"
	"github.com/quiot/quiot/probe/stats"
)

// AnalyzeOptions configures Analyze.
type AnalyzeOptions struct {
	// Response is the modelled statistic; "" = "p50_us".
	Response string
	// Seed seeds the cross-validation folds; 0 = 1.
	Seed uint64
	// NoPlots skips PNG plots.
	NoPlots bool
	// Warnings are added to the report; nil means those of DIR/warnings.txt
	// (written by Run), if any.
	Warnings []string
	// Summary, when set, receives the fit figures.
	Summary *Summary
	// ModelPath is where model.json goes; "" = DIR/model.json.
	ModelPath string
	// Resummarize recomputes every row's statistics and confidence
	// intervals from its samples (DIR/samples/ID.csv, packet sequence
	// order) with the block bootstrap, and rewrites conditions.csv: for
	// directories written before the block bootstrap. Rows without samples
	// keep theirs.
	Resummarize bool
	// Resamples is the bootstrap replicate count of Resummarize; 0 = 500.
	Resamples int
	// Bootstrap is the model's bootstrap replicate count
	// (model.FitOptions.Bootstrap; 0 = its default).
	Bootstrap int
	// Transform is the model's response transform
	// (model.FitOptions.Transform; "" = auto).
	Transform string
}

// Analyze reads DIR/conditions.csv, fits the model and writes
// DIR/model.json, DIR/distributions/index.csv, DIR/report.md and the
// plots; where samples and distribution tables are kept it checks the
// tables against the samples (DIR/simcheck.csv, see SimCheck).
func Analyze(dir string, o AnalyzeOptions) error {
	rows, err := ReadRows(filepath.Join(dir, "conditions.csv"))
	if err != nil {
		return err
	}
	if o.Resummarize {
		if rows, err = resummarize(dir, rows, o); err != nil {
			return err
		}
	}
	if o.Warnings == nil {
		if o.Warnings, err = readWarnings(filepath.Join(dir, "warnings.txt")); err != nil {
			return err
		}
	}
	// Present in sweep order (floor first) whatever order they ran in.
	sort.SliceStable(rows, func(i, j int) bool {
		if (rows[i].Path == "floor") != (rows[j].Path == "floor") {
			return rows[i].Path == "floor"
		}
		if rows[i].ID != rows[j].ID {
			return rows[i].ID < rows[j].ID
		}
		return rows[i].Repeat < rows[j].Repeat
	})
	m, obs, err := FitRowsOptions(rows, model.FitOptions{Response: o.Response, Seed: o.Seed, Bootstrap: o.Bootstrap, Transform: o.Transform})
	if err != nil {
		return err
	}
	if o.ModelPath == "" {
		o.ModelPath = filepath.Join(dir, "model.json")
	}
	if err := m.Save(o.ModelPath); err != nil {
		return err
	}
	if s := o.Summary; s != nil {
		s.R2, s.RMSEUS, s.Terms = m.R2, m.RMSEus, m.Terms
	}
	if err := writeIndex(filepath.Join(dir, "distributions", "index.csv"), rows); err != nil {
		return err
	}
	var plots []string
	if !o.NoPlots {
		pred := m.OuterPredictions
		plots, err = writePlots(dir, Representative(rows, m.Response), m, obs, pred)
		if err != nil {
			return err
		}
	}
	checks, err := SimCheck(dir, rows, max(o.Seed, 1))
	if err != nil {
		return err
	}
	if len(checks) > 0 {
		if err := writeSimCheck(filepath.Join(dir, "simcheck.csv"), checks); err != nil {
			return err
		}
	}
	if err := writeReport(filepath.Join(dir, "report.md"), rows, m, plots, o.Warnings, checks); err != nil {
		return err
	}
	return htmlreport.WriteDir(dir) // report.html beside report.md
}

// resummarize recomputes the statistics of the rows that have samples in
// dir and rewrites dir/conditions.csv (through a temporary file).
func resummarize(dir string, rows []Row, o AnalyzeOptions) ([]Row, error) {
	resamples := o.Resamples
	if resamples == 0 {
		resamples = 500
	}
	for i := range rows {
		delays, err := readSamplesUS(filepath.Join(dir, "samples", rows[i].FileID()+".csv"))
		if err != nil || len(delays) == 0 {
			continue
		}
		s, err := stats.Summarize(delays, stats.Options{Resamples: resamples, Seed: o.Seed})
		if err != nil {
			return nil, fmt.Errorf("condition %s: %w", rows[i].FileID(), err)
		}
		rows[i].Stats = s
	}
	path := filepath.Join(dir, "conditions.csv")
	w, err := CreateRows(path + ".tmp")
	if err != nil {
		return nil, err
	}
	for _, r := range rows {
		if err := w.Write(r); err != nil {
			w.Close()
			return nil, err
		}
	}
	if err := w.Close(); err != nil {
		return nil, fmt.Errorf("write conditions file: %w", err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		return nil, fmt.Errorf("replace conditions file: %w", err)
	}
	return rows, nil
}

func writeIndex(path string, rows []Row) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("write distribution index: %w", err)
	}
	var b strings.Builder
	b.WriteString("id,repeat,path,size_bytes,rate_pps,flows,rules,mem_bytes,cpus,cold,p50_us,p99_us,file\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "%s,%d,%s,%d,%g,%d,%d,%d,%g,%d,%.3f,%.3f,%s.csv\n", r.ID, r.Repeat, r.Path, r.Size, r.Rate, r.Flows, r.Rules, r.MemBytes, r.CPUs, b2i(r.Cold), r.Stats.P50, r.Stats.P99, r.FileID())
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("write distribution index: %w", err)
	}
	return nil
}

// baseline reports whether r is at the sweep's baseline for every factor
// except those named.
func isBaseline(r, base Row, except ...string) bool {
	ex := map[string]bool{}
	for _, e := range except {
		ex[e] = true
	}
	eq := func(name string, same bool) bool { return ex[name] || same }
	return r.Path == "ovs" &&
		eq("size", r.Size == base.Size) && eq("rate", r.Rate == base.Rate) && eq("flows", r.Flows == base.Flows) &&
		eq("rules", r.Rules == base.Rules) && eq("mem", r.MemBytes == base.MemBytes) && eq("cpus", r.CPUs == base.CPUs) &&
		eq("cold", r.Cold == base.Cold)
}

type xy struct{ x, y, lo, hi float64 }

// series groups OVS rows at the baseline except x and group, by group, as
// (x, p50 with CI) points.
func series(rows []Row, base Row, xName, groupName string, x func(Row) float64, group func(Row) string) map[string][]xy {
	out := map[string][]xy{}
	for _, r := range rows {
		except := []string{xName}
		if groupName != "" {
			except = append(except, groupName)
		}
		if !isBaseline(r, base, except...) || r.Stats.N == 0 {
			continue
		}
		g := ""
		if group != nil {
			g = group(r)
		}
		out[g] = append(out[g], xy{x(r), r.Stats.P50, r.Stats.P50CI.Lo, r.Stats.P50CI.Hi})
	}
	for k := range out {
		sort.Slice(out[k], func(i, j int) bool { return out[k][i].x < out[k][j].x })
	}
	return out
}

func linePlot(path, title, xLabel string, data map[string][]xy, logX bool) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = xLabel
	p.Y.Label.Text = "p50 delay (us), 95 % CI"
	if logX {
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	keys := make([]string, 0, len(data))
	lo, hi := math.Inf(1), math.Inf(-1)
	for k, pts := range data {
		keys = append(keys, k)
		for _, v := range pts {
			lo, hi = math.Min(lo, math.Min(v.y, v.lo)), math.Max(hi, math.Max(v.y, v.hi))
		}
	}
	sort.Strings(keys)
	if lo > 0 && hi/lo > 20 {
		// Delays near saturation span decades: a log axis keeps the rest legible.
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	for i, k := range keys {
		pts := make(plotter.XYs, len(data[k]))
		errs := make(plotter.YErrors, len(data[k]))
		for j, v := range data[k] {
			pts[j] = plotter.XY{X: v.x, Y: v.y}
			errs[j].Low, errs[j].High = v.y-v.lo, v.hi-v.y
		}
		l, s, err := plotter.NewLinePoints(pts)
		if err != nil {
			return fmt.Errorf("plot %s: %w", path, err)
		}
		c := plotutil.Color(i)
		l.Color, s.Color = c, c
		s.Shape = plotutil.Shape(i)
		eb, err := plotter.NewYErrorBars(struct {
			plotter.XYer
			plotter.YErrorer
		}{pts, errs})
		if err != nil {
			return fmt.Errorf("plot %s: %w", path, err)
		}
		eb.Color = c
		p.Add(l, s, eb)
		if k != "" {
			p.Legend.Add(k, l, s)
		}
	}
	p.Legend.Top = true
	if err := p.Save(16*vg.Centimeter, 11*vg.Centimeter, path); err != nil {
		return fmt.Errorf("save plot: %w", err)
	}
	return nil
}

func writePlots(dir string, rows []Row, m *model.Model, obs []model.Observation, pred []float64) ([]string, error) {
	var ovsRows []Row
	for _, r := range rows {
		if r.Path == "ovs" && r.Stats.N > 0 {
			ovsRows = append(ovsRows, r)
		}
	}
	if len(ovsRows) == 0 {
		return nil, nil
	}
	base := ovsRows[0]
	for _, r := range ovsRows {
		if r.ID == "c001" { // the sweep's baseline (rows may be in random order)
			base = r
		}
	}
	var made []string
	add := func(name, title, xl string, data map[string][]xy, logX bool) error {
		n := 0
		for _, v := range data {
			n = max(n, len(v))
		}
		if n < 2 {
			return nil // nothing varies along this axis
		}
		if err := linePlot(filepath.Join(dir, name), title, xl, data, logX); err != nil {
			return err
		}
		made = append(made, name)
		return nil
	}
	rateKey := func(r Row) string { return fmt.Sprintf("%g pps", r.Rate) }
	sizeKey := func(r Row) string { return fmt.Sprintf("%d B", r.Size) }
	steps := []func() error{
		func() error {
			return add("delay_vs_size.png", "Delay through OVS vs frame size", "frame size (bytes)",
				series(rows, base, "size", "rate", func(r Row) float64 { return float64(r.Size) }, rateKey), false)
		},
		func() error {
			return add("delay_vs_rate.png", "Delay through OVS vs offered rate", "rate (packets/s)",
				series(rows, base, "rate", "size", func(r Row) float64 { return r.Rate }, sizeKey), true)
		},
		func() error {
			return add("delay_vs_flows.png", "Delay through OVS vs number of flows", "flows",
				series(rows, base, "flows", "rate", func(r Row) float64 { return float64(r.Flows) }, rateKey), true)
		},
		func() error {
			return add("delay_vs_rules.png", "Delay through OVS vs OpenFlow rules", "filler rules (+1)",
				series(rows, base, "rules", "rate", func(r Row) float64 { return float64(r.Rules) + 1 }, rateKey), true)
		},
		func() error {
			return add("delay_vs_memory.png", "Delay through OVS vs memory limit of ovs-vswitchd", "memory limit (MiB; rightmost = unlimited)",
				memSeries(rows, base), false)
		},
		func() error {
			ok, err := cdfPlot(filepath.Join(dir, "cdf.png"), dir, rows, base)
			if ok {
				made = append(made, "cdf.png")
			}
			return err
		},
		func() error {
			if len(pred) != len(obs) || len(obs) < 2 {
				return nil
			}
			if err := fitPlot(filepath.Join(dir, "fitted_vs_measured.png"), obs, pred, m); err != nil {
				return err
			}
			made = append(made, "fitted_vs_measured.png")
			return nil
		},
	}
	for _, s := range steps {
		if err := s(); err != nil {
			return made, err
		}
	}
	return made, nil
}

func memSeries(rows []Row, base Row) map[string][]xy {
	data := series(rows, base, "mem", "rate", func(r Row) float64 { return float64(r.MemBytes) / (1 << 20) }, func(r Row) string { return fmt.Sprintf("%g pps", r.Rate) })
	// Unlimited (0) is drawn to the right of the largest limit.
	maxLim := 0.0
	for _, pts := range data {
		for _, p := range pts {
			maxLim = math.Max(maxLim, p.x)
		}
	}
	for k, pts := range data {
		for i := range pts {
			if pts[i].x == 0 {
				pts[i].x = maxLim * 1.5
			}
		}
		sort.Slice(pts, func(i, j int) bool { return pts[i].x < pts[j].x })
		data[k] = pts
	}
	return data
}

// readSamplesUS reads samples/ID.csv back as microseconds.
func readSamplesUS(path string) ([]float64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []float64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		v, err := strconv.ParseInt(strings.TrimSpace(sc.Text()), 10, 64)
		if err != nil {
			continue // header
		}
		out = append(out, float64(v)/1000)
	}
	return out, sc.Err()
}

func cdfPlot(path, dir string, rows []Row, base Row) (bool, error) {
	p := plot.New()
	p.Title.Text = "Delay distributions (CDF)"
	p.X.Label.Text = "delay (us)"
	p.Y.Label.Text = "fraction of packets"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	// The floor, the baseline, and the extremes of rate and size.
	pick := []Row{}
	var hiRate, hiSize, cold *Row
	for i := range rows {
		r := &rows[i]
		switch {
		case r.Path == "floor":
			pick = append(pick, *r)
		case isBaseline(*r, base, "rate") && (hiRate == nil || r.Rate > hiRate.Rate):
			hiRate = r
		}
		if isBaseline(*r, base, "size") && (hiSize == nil || r.Size > hiSize.Size) {
			hiSize = r
		}
		if isBaseline(*r, base, "cold") && r.Cold && cold == nil {
			cold = r
		}
	}
	pick = append(pick, base)
	for _, r := range []*Row{hiRate, hiSize, cold} {
		if r != nil && r.ID != base.ID {
			pick = append(pick, *r)
		}
	}
	lines := 0
	for i, r := range pick {
		us, err := readSamplesUS(filepath.Join(dir, "samples", r.FileID()+".csv"))
		if err != nil || len(us) == 0 {
			continue
		}
		sort.Float64s(us)
		step := max(1, len(us)/500)
		var pts plotter.XYs
		for j := 0; j < len(us); j += step {
			if us[j] > 0 {
				pts = append(pts, plotter.XY{X: us[j], Y: float64(j+1) / float64(len(us))})
			}
		}
		if len(pts) == 0 {
			continue
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return false, fmt.Errorf("plot cdf: %w", err)
		}
		lines++
		l.Color = plotutil.Color(i)
		l.Width = vg.Points(1.5)
		p.Add(l)
		label := r.ID + " " + r.Condition.Describe()
		if r.Path == "floor" {
			label = "floor (no switch)"
		}
		p.Legend.Add(label, l)
	}
	p.Legend.Top = false
	p.Legend.Left = false
	p.Legend.YOffs = vg.Centimeter
	if lines == 0 {
		return false, nil // no samples kept (e.g. a fitted fixture)
	}
	if err := p.Save(20*vg.Centimeter, 12*vg.Centimeter, path); err != nil {
		return false, fmt.Errorf("save plot: %w", err)
	}
	return true, nil
}

func fitPlot(path string, obs []model.Observation, pred []float64, m *model.Model) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Model: held-out prediction vs measured (R2 %.2f, RMSE %.1f us)", m.R2, m.RMSEus)
	p.X.Label.Text = "measured " + m.Response
	p.Y.Label.Text = "predicted (cross-validated)"
	pts := make(plotter.XYs, len(obs))
	lo, hi := math.Inf(1), math.Inf(-1)
	for i, o := range obs {
		pts[i] = plotter.XY{X: o.Y, Y: pred[i]}
		lo = math.Min(lo, math.Min(o.Y, pred[i]))
		hi = math.Max(hi, math.Max(o.Y, pred[i]))
	}
	if lo > 0 && hi/lo > 20 {
		p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
		p.X.Tick.Marker, p.Y.Tick.Marker = plot.LogTicks{Prec: -1}, plot.LogTicks{Prec: -1}
	}
	s, err := plotter.NewScatter(pts)
	if err != nil {
		return fmt.Errorf("plot fit: %w", err)
	}
	s.Color = plotutil.Color(0)
	diag, err := plotter.NewLine(plotter.XYs{{X: lo, Y: lo}, {X: hi, Y: hi}})
	if err != nil {
		return fmt.Errorf("plot fit: %w", err)
	}
	diag.Color = color.Gray{Y: 128}
	diag.Dashes = []vg.Length{vg.Points(4), vg.Points(4)}
	p.Add(diag, s)
	if err := p.Save(14*vg.Centimeter, 14*vg.Centimeter, path); err != nil {
		return fmt.Errorf("save plot: %w", err)
	}
	return nil
}
