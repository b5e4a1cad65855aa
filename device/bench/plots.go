//go:build !arm

// plots.go draws the report's PNG plots; 32-bit ARM builds leave it out
// (plots_arm.go).

package bench

import (
	"fmt"
	"math"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// errPoints are dots with a symmetric or asymmetric y error bar.
type errPoints struct {
	plotter.XYs
	lo, hi []float64
}

// YError returns the distances below and above point i.
func (e errPoints) YError(i int) (float64, float64) { return e.lo[i], e.hi[i] }

// dotChart draws, for each group on the x axis, one dot per series with its
// 95 % confidence interval as whiskers, and saves it as a PNG. val returns
// the estimate of a (group, series); ok false leaves the dot out. A y range
// spanning more than two decades gets a log scale.
func dotChart(path, title, ylabel string, groups, series []string, val func(g, s int) (Estimate, bool)) error {
	return dotChartScale(path, title, ylabel, groups, series, val, true)
}

// dotChartScale is dotChart; allowLog false keeps a linear y axis (for
// values that may be negative).
func dotChartScale(path, title, ylabel string, groups, series []string, val func(g, s int) (Estimate, bool), allowLog bool) error {
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = ylabel
	p.Legend.Top = true
	p.Legend.Left = true
	n := len(series)
	width := 0.7
	minPos, maxV := math.Inf(1), 0.0
	type pt struct{ x, y, lo, hi float64 }
	all := make([][]pt, n)
	for s := range series {
		for g := range groups {
			e, ok := val(g, s)
			if !ok || math.IsNaN(e.Median) {
				continue
			}
			x := float64(g)
			if n > 1 {
				x += -width/2 + width*float64(s)/float64(n-1)
			}
			y := e.Median
			lo, hi := 0.0, 0.0
			if !math.IsNaN(e.Lo) {
				lo, hi = math.Max(0, y-e.Lo), math.Max(0, e.Hi-y)
			}
			all[s] = append(all[s], pt{x, y, lo, hi})
			if y > 0 {
				minPos = math.Min(minPos, y)
			}
			maxV = math.Max(maxV, y)
		}
	}
	logY := allowLog && minPos > 0 && !math.IsInf(minPos, 1) && maxV/minPos > 100
	if logY {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
		p.Y.Label.Text += " (log)"
	}
	for s, pts := range all {
		if len(pts) == 0 {
			continue
		}
		ep := errPoints{XYs: make(plotter.XYs, len(pts)), lo: make([]float64, len(pts)), hi: make([]float64, len(pts))}
		for i, q := range pts {
			y := q.y
			if logY && y <= 0 {
				y = minPos / 2
			}
			ep.XYs[i] = plotter.XY{X: q.x, Y: y}
			ep.lo[i], ep.hi[i] = q.lo, q.hi
			if logY && y-ep.lo[i] <= 0 {
				ep.lo[i] = y / 2
			}
		}
		sc, err := plotter.NewScatter(ep.XYs)
		if err != nil {
			return fmt.Errorf("plot %s: %w", path, err)
		}
		sc.GlyphStyle.Color = plotutil.Color(s)
		sc.GlyphStyle.Shape = plotutil.Shape(s)
		sc.GlyphStyle.Radius = vg.Points(3.5)
		eb, err := plotter.NewYErrorBars(ep)
		if err != nil {
			return fmt.Errorf("plot %s: %w", path, err)
		}
		eb.Color = plotutil.Color(s)
		p.Add(sc, eb)
		p.Legend.Add(series[s], sc)
	}
	p.NominalX(groups...)
	if len(groups) > 6 {
		p.X.Tick.Label.Rotation = math.Pi / 6
		p.X.Tick.Label.XAlign = draw.XRight
		p.X.Tick.Label.YAlign = draw.YTop
	}
	p.X.Min, p.X.Max = -0.6, float64(len(groups))-0.4
	p.Add(plotter.NewGrid())
	w := vg.Length(max(6, 1.6*float64(len(groups)))) * vg.Inch
	if err := p.Save(w, 4*vg.Inch, path); err != nil {
		return fmt.Errorf("couldn't save plot %s: %w", path, err)
	}
	return nil
}

// cdfChart draws empirical CDFs of each line's values and saves a PNG.
func cdfChart(path, title, xlabel string, lines []cdfLine) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = xlabel
	p.Y.Label.Text = "fraction of messages"
	p.Y.Min, p.Y.Max = 0, 1
	p.Legend.Top = false
	p.Legend.Left = false
	p.Add(plotter.NewGrid())
	for i, l := range lines {
		if len(l.Values) == 0 {
			continue
		}
		v := slices.Clone(l.Values)
		slices.Sort(v)
		xy := make(plotter.XYs, 0, len(v)+1)
		xy = append(xy, plotter.XY{X: v[0], Y: 0})
		for j, x := range v {
			xy = append(xy, plotter.XY{X: x, Y: float64(j+1) / float64(len(v))})
		}
		ln, err := plotter.NewLine(xy)
		if err != nil {
			return fmt.Errorf("plot %s: %w", path, err)
		}
		ln.StepStyle = plotter.PostStep
		ln.Color = plotutil.Color(i)
		ln.Dashes = plotutil.Dashes(i / 7)
		ln.Width = vg.Points(1.5)
		name := l.Name
		if l.Approx {
			name += " (p50/95/99/max)"
		}
		p.Add(ln)
		p.Legend.Add(name, ln)
	}
	p.Legend.Padding = vg.Points(2)
	p.Legend.YOffs = vg.Points(-4)
	if err := p.Save(8*vg.Inch, 4.5*vg.Inch, path); err != nil {
		return fmt.Errorf("couldn't save plot %s: %w", path, err)
	}
	return nil
}

// plotsBuiltIn reports whether this binary draws PNG plots (see plots_arm.go).
const plotsBuiltIn = true
