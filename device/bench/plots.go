//go:build !arm

// plots.go draws the report's PNG plots with the standard library's image
// packages and a fixed bitmap font (golang.org/x/image/font/basicfont):
// nothing of it runs before a plot is drawn. gonum/plot, which drew them
// before, parses its 12 Liberation fonts in its package init, in every
// quiot process whatever the role: about 3 MB of a publisher's RSS and
// 6.6 MB of the amd64 binary (docs/BENCH.md, "Publisher memory"). 32-bit
// ARM builds leave the plots out (plots_arm.go).

package bench

import (
	"fmt"
	"image"
	"image/color"
	"image/png"
	"math"
	"os"
	"slices"
	"strconv"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

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
	n := len(series)
	width := 0.7
	minPos, maxV := math.Inf(1), math.Inf(-1)
	minV := math.Inf(1)
	type pt struct{ x, y, lo, hi float64 }
	all := make([][]pt, n)
	for s := range series {
		for g := range groups {
			e, ok := val(g, s)
			if !ok || math.IsNaN(e.Median) || math.IsInf(e.Median, 0) {
				continue
			}
			x := float64(g)
			if n > 1 {
				x += -width/2 + width*float64(s)/float64(n-1)
			}
			y := e.Median
			lo, hi := y, y
			if !math.IsNaN(e.Lo) && !math.IsNaN(e.Hi) {
				lo, hi = math.Min(y, e.Lo), math.Max(y, e.Hi)
			}
			all[s] = append(all[s], pt{x, y, lo, hi})
			if y > 0 {
				minPos = math.Min(minPos, y)
			}
			maxV = math.Max(maxV, hi)
			minV = math.Min(minV, lo)
		}
	}
	logY := allowLog && minPos > 0 && !math.IsInf(minPos, 1) && maxV/minPos > 100
	ax := axis{label: ylabel}
	switch {
	case math.IsInf(maxV, -1): // no points: an empty frame
		ax.min, ax.max = 0, 1
	case logY:
		ax.log = true
		ax.label += " (log)"
		ax.min, ax.max = minPos/2, maxV
	default:
		ax.min, ax.max = math.Min(0, minV), maxV
	}
	ax.nice()
	wIn := max(6, 1.6*float64(len(groups)))
	c := newChart(int(wIn*dpi), 4*dpi, title, groups, ax)
	c.xmin, c.xmax = -0.6, float64(len(groups))-0.4
	c.frame()
	for s, pts := range all {
		col := seriesColor(s)
		for _, q := range pts {
			y, lo, hi := q.y, q.lo, q.hi
			if logY {
				y, lo, hi = math.Max(y, ax.min), math.Max(lo, ax.min), math.Max(hi, ax.min)
			}
			px, py := c.px(q.x), c.py(y)
			plo, phi := c.py(lo), c.py(hi)
			c.line(px, plo, px, phi, col, 1, nil)
			c.line(px-4, plo, px+4, plo, col, 1, nil)
			c.line(px-4, phi, px+4, phi, col, 1, nil)
			c.glyph(px, py, s, col)
		}
	}
	var leg []legendEntry
	for s, name := range series {
		if len(all[s]) > 0 {
			leg = append(leg, legendEntry{name: name, index: s, dot: true})
		}
	}
	c.legend(leg, true)
	return c.save(path)
}

// cdfChart draws empirical CDFs of each line's values and saves a PNG.
func cdfChart(path, title, xlabel string, lines []cdfLine) error {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, l := range lines {
		for _, v := range l.Values {
			if !math.IsNaN(v) && !math.IsInf(v, 0) {
				lo, hi = math.Min(lo, v), math.Max(hi, v)
			}
		}
	}
	if math.IsInf(lo, 1) {
		lo, hi = 0, 1
	}
	xa := axis{label: xlabel, min: lo, max: hi}
	xa.nice()
	ya := axis{label: "fraction of messages", min: 0, max: 1}
	ya.nice()
	c := newChart(8*dpi, 4.5*dpi, title, nil, ya)
	c.xaxis = &xa
	c.xmin, c.xmax = xa.min, xa.max
	c.frame()
	var leg []legendEntry
	for i, l := range lines {
		v := slices.DeleteFunc(slices.Clone(l.Values), func(x float64) bool { return math.IsNaN(x) || math.IsInf(x, 0) })
		if len(v) == 0 {
			continue
		}
		slices.Sort(v)
		col := seriesColor(i)
		dash := dashes(i / 7)
		x0, y0 := c.px(v[0]), c.py(0)
		for j, x := range v {
			x1, y1 := c.px(x), c.py(float64(j+1)/float64(len(v)))
			c.line(x0, y0, x1, y0, col, 1.5, dash) // post step: along, then up
			c.line(x1, y0, x1, y1, col, 1.5, dash)
			x0, y0 = x1, y1
		}
		name := l.Name
		if l.Approx {
			name += " (p50/95/99/max)"
		}
		leg = append(leg, legendEntry{name: name, index: i, dash: dash})
	}
	c.legend(leg, false)
	return c.save(path)
}

// plotsBuiltIn reports whether this binary draws PNG plots (see plots_arm.go).
const plotsBuiltIn = true

// dpi is the plots' pixels per inch.
const dpi = 96

// palette holds the series colours (gonum/plotutil's soft colours, which
// the plots used before).
var palette = []color.RGBA{
	{241, 90, 96, 255}, {122, 195, 106, 255}, {90, 155, 212, 255}, {250, 167, 91, 255},
	{158, 103, 171, 255}, {206, 112, 88, 255}, {215, 127, 180, 255},
}

func seriesColor(i int) color.RGBA { return palette[i%len(palette)] }

// dashes returns the dash pattern (on, off lengths in pixels) of line set
// k: solid first.
func dashes(k int) []float64 {
	pats := [][]float64{nil, {6, 3}, {2, 3}, {8, 3, 2, 3}}
	return pats[k%len(pats)]
}

// axis is a value axis.
type axis struct {
	label    string
	min, max float64
	log      bool
	ticks    []float64
}

// nice widens [min, max] to round numbers and chooses about five ticks
// (powers of ten on a log axis).
func (a *axis) nice() {
	if a.log {
		lo, hi := math.Floor(math.Log10(a.min)), math.Ceil(math.Log10(a.max))
		if hi <= lo {
			hi = lo + 1
		}
		a.min, a.max = math.Pow(10, lo), math.Pow(10, hi)
		a.ticks = nil
		for e := lo; e <= hi; e++ {
			a.ticks = append(a.ticks, math.Pow(10, e))
		}
		return
	}
	if a.max <= a.min {
		a.max = a.min + 1
	}
	raw := (a.max - a.min) / 5
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if raw <= m*mag {
			step = m * mag
			break
		}
	}
	a.min = math.Floor(a.min/step) * step
	a.max = math.Ceil(a.max/step) * step
	a.ticks = nil
	for t := a.min; t <= a.max+step/2; t += step {
		a.ticks = append(a.ticks, math.Round(t/step)*step)
	}
}

// frac maps v into [0, 1] of the axis.
func (a *axis) frac(v float64) float64 {
	if a.log {
		return (math.Log10(v) - math.Log10(a.min)) / (math.Log10(a.max) - math.Log10(a.min))
	}
	return (v - a.min) / (a.max - a.min)
}

// tickLabel formats a tick value briefly.
func tickLabel(v float64) string {
	if v == 0 {
		return "0"
	}
	return strconv.FormatFloat(v, 'g', 6, 64)
}

// chart is a PNG plot: a white image with a frame (the data area), a title,
// axis labels and ticks.
type chart struct {
	img                      *image.RGBA
	title                    string
	groups                   []string // nominal x labels (dot charts)
	yaxis                    axis
	xaxis                    *axis // numeric x axis (CDFs)
	left, right, top, bottom int   // the data area in pixels
	xmin, xmax               float64
	rotated                  bool // x labels on two rows
}

var face = basicfont.Face7x13

const (
	charW = 7  // basicfont.Face7x13's advance
	lineH = 13 // and height
)

func newChart(w, h int, title string, groups []string, y axis) *chart {
	c := &chart{img: image.NewRGBA(image.Rect(0, 0, w, h)), title: title, groups: groups, yaxis: y}
	for i := range c.img.Pix {
		c.img.Pix[i] = 255
	}
	wl := 0
	for _, t := range y.ticks {
		wl = max(wl, len(tickLabel(t)))
	}
	c.left = 8 + lineH + 6 + wl*charW + 6
	c.right = w - 12
	c.top = 10 + lineH + 10
	c.bottom = h - (6 + lineH + 6 + lineH + 8)
	if groups != nil {
		slot := float64(c.right-c.left) / float64(len(groups))
		for _, g := range groups {
			if float64(len(g)*charW) > slot-4 {
				c.rotated = true // labels alternate between two rows
			}
		}
		if c.rotated {
			c.bottom -= lineH + 2
		}
	}
	return c
}

func (c *chart) px(x float64) float64 {
	return float64(c.left) + (x-c.xmin)/(c.xmax-c.xmin)*float64(c.right-c.left)
}

func (c *chart) py(y float64) float64 {
	return float64(c.bottom) - c.yaxis.frac(y)*float64(c.bottom-c.top)
}

var (
	black = color.RGBA{0, 0, 0, 255}
	grid  = color.RGBA{220, 220, 220, 255}
)

// frame draws the grid, the axes, their ticks and labels, and the title.
func (c *chart) frame() {
	w := c.img.Bounds().Dx()
	c.text(w/2, 10, c.title, black)
	for _, t := range c.yaxis.ticks {
		y := c.py(t)
		c.line(float64(c.left), y, float64(c.right), y, grid, 1, nil)
		c.line(float64(c.left)-4, y, float64(c.left), y, black, 1, nil)
		l := tickLabel(t)
		c.text(c.left-6-len(l)*charW/2, int(y)-lineH/2, l, black)
	}
	c.vtext(8, (c.top+c.bottom)/2, c.yaxis.label)
	if c.xaxis != nil {
		for _, t := range c.xaxis.ticks {
			x := c.px(t)
			c.line(x, float64(c.top), x, float64(c.bottom), grid, 1, nil)
			c.line(x, float64(c.bottom), x, float64(c.bottom)+4, black, 1, nil)
			c.text(int(x), c.bottom+6, tickLabel(t), black)
		}
		c.text((c.left+c.right)/2, c.bottom+6+lineH+6, c.xaxis.label, black)
	}
	for g, name := range c.groups {
		x := c.px(float64(g))
		c.line(x, float64(c.top), x, float64(c.bottom), grid, 1, nil)
		c.line(x, float64(c.bottom), x, float64(c.bottom)+4, black, 1, nil)
		row := 0
		if c.rotated && g%2 == 1 {
			row = lineH + 2
		}
		c.text(int(x), c.bottom+6+row, name, black)
	}
	l, r, t, b := float64(c.left), float64(c.right), float64(c.top), float64(c.bottom)
	c.line(l, t, r, t, black, 1, nil)
	c.line(l, b, r, b, black, 1, nil)
	c.line(l, t, l, b, black, 1, nil)
	c.line(r, t, r, b, black, 1, nil)
}

// legendEntry is one line of a legend.
type legendEntry struct {
	name  string
	index int // series index: colour and glyph
	dot   bool
	dash  []float64
}

// legend draws the entries in a box at the top left (topLeft) or the
// bottom right of the data area.
func (c *chart) legend(es []legendEntry, topLeft bool) {
	if len(es) == 0 {
		return
	}
	wl := 0
	for _, e := range es {
		wl = max(wl, len(e.name))
	}
	bw, bh := 30+wl*charW+8, len(es)*(lineH+4)+6
	x0, y0 := c.left+8, c.top+8
	if !topLeft {
		x0, y0 = c.right-8-bw, c.bottom-8-bh
	}
	c.fill(image.Rect(x0, y0, x0+bw, y0+bh), color.RGBA{255, 255, 255, 235})
	for i, e := range es {
		y := float64(y0 + 3 + i*(lineH+4) + (lineH+4)/2)
		col := seriesColor(e.index)
		if e.dot {
			c.glyph(float64(x0+14), y, e.index, col)
		} else {
			c.line(float64(x0+4), y, float64(x0+26), y, col, 1.5, e.dash)
		}
		c.text(x0+30+len(e.name)*charW/2, int(y)-lineH/2, e.name, black)
	}
}

// fill blends col over r.
func (c *chart) fill(r image.Rectangle, col color.RGBA) {
	r = r.Intersect(c.img.Bounds())
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			c.blend(x, y, col, 1)
		}
	}
}

// blend paints col over pixel (x, y) with coverage a in [0, 1].
func (c *chart) blend(x, y int, col color.RGBA, a float64) {
	if !(image.Point{x, y}).In(c.img.Bounds()) || a <= 0 {
		return
	}
	a = math.Min(1, a) * float64(col.A) / 255
	i := c.img.PixOffset(x, y)
	p := c.img.Pix[i : i+3 : i+3]
	for k, v := range [3]uint8{col.R, col.G, col.B} {
		p[k] = uint8(float64(p[k])*(1-a) + float64(v)*a + 0.5)
	}
}

// line draws a segment of the given width (pixels), dashed when dash is
// not nil, with antialiased edges.
func (c *chart) line(x0, y0, x1, y1 float64, col color.RGBA, width float64, dash []float64) {
	dx, dy := x1-x0, y1-y0
	length := math.Hypot(dx, dy)
	minX, maxX := int(math.Floor(math.Min(x0, x1)-width)), int(math.Ceil(math.Max(x0, x1)+width))
	minY, maxY := int(math.Floor(math.Min(y0, y1)-width)), int(math.Ceil(math.Max(y0, y1)+width))
	period := 0.0
	for _, d := range dash {
		period += d
	}
	for y := minY; y <= maxY; y++ {
		for x := minX; x <= maxX; x++ {
			// distance from the pixel centre to the segment, and where along it
			px, py := float64(x)+0.5, float64(y)+0.5
			t := 0.0
			if length > 0 {
				t = math.Max(0, math.Min(length, ((px-x0)*dx+(py-y0)*dy)/length))
			}
			qx, qy := x0, y0
			if length > 0 {
				qx, qy = x0+dx*t/length, y0+dy*t/length
			}
			d := math.Hypot(px-qx, py-qy)
			cov := width/2 + 0.5 - d
			if cov <= 0 {
				continue
			}
			if period > 0 && !dashOn(dash, math.Mod(t, period)) {
				continue
			}
			c.blend(x, y, col, cov)
		}
	}
}

// dashOn reports whether position p of a dash period is drawn.
func dashOn(dash []float64, p float64) bool {
	for i, d := range dash {
		if p < d {
			return i%2 == 0
		}
		p -= d
	}
	return true
}

// glyph draws series s's marker (circle, square, triangle, diamond, cross,
// plus, ring) centred on (x, y).
func (c *chart) glyph(x, y float64, s int, col color.RGBA) {
	const r = 4.5
	in := func(px, py float64) bool {
		dx, dy := px-x, py-y
		switch s % 7 {
		case 0:
			return dx*dx+dy*dy <= r*r
		case 1:
			return math.Abs(dx) <= r*0.85 && math.Abs(dy) <= r*0.85
		case 2:
			return dy <= r*0.7 && dy >= -r && math.Abs(dx) <= (dy+r)*0.6
		case 3:
			return math.Abs(dx)+math.Abs(dy) <= r*1.2
		case 4:
			return math.Abs(math.Abs(dx)-math.Abs(dy)) <= 1.2 && math.Abs(dx) <= r
		case 5:
			return (math.Abs(dx) <= 1 && math.Abs(dy) <= r) || (math.Abs(dy) <= 1 && math.Abs(dx) <= r)
		default:
			d := math.Hypot(dx, dy)
			return d <= r && d >= r-1.6
		}
	}
	for py := int(y - r - 1); py <= int(y+r+1); py++ {
		for px := int(x - r - 1); px <= int(x+r+1); px++ {
			// 2 x 2 supersampling for smooth edges
			n := 0
			for _, o := range [4][2]float64{{0.25, 0.25}, {0.75, 0.25}, {0.25, 0.75}, {0.75, 0.75}} {
				if in(float64(px)+o[0], float64(py)+o[1]) {
					n++
				}
			}
			c.blend(px, py, col, float64(n)/4)
		}
	}
}

// text draws s centred horizontally on x with its top at y.
func (c *chart) text(x, y int, s string, col color.RGBA) {
	d := font.Drawer{Dst: c.img, Src: image.NewUniform(col), Face: face,
		Dot: fixed.P(x-len(s)*charW/2, y+face.Ascent)}
	d.DrawString(s)
}

// vtext draws s rotated by 90 degrees (reading upwards), its left edge at
// x and centred vertically on y.
func (c *chart) vtext(x, y int, s string) {
	w := len(s) * charW
	tmp := image.NewRGBA(image.Rect(0, 0, w, lineH))
	d := font.Drawer{Dst: tmp, Src: image.NewUniform(black), Face: face, Dot: fixed.P(0, face.Ascent)}
	d.DrawString(s)
	for ty := 0; ty < lineH; ty++ {
		for tx := 0; tx < w; tx++ {
			if a := tmp.RGBAAt(tx, ty).A; a > 0 {
				c.blend(x+ty, y+w/2-tx, black, float64(a)/255)
			}
		}
	}
}

// save writes the chart as a PNG file.
func (c *chart) save(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("couldn't save plot %s: %w", path, err)
	}
	if err := png.Encode(f, c.img); err != nil {
		f.Close()
		return fmt.Errorf("couldn't save plot %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("couldn't save plot %s: %w", path, err)
	}
	return nil
}
