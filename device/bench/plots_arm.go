//go:build arm

package bench

import "errors"

// On 32-bit ARM the bench writes every table, CSV and JSON file but no PNG
// plots (when gonum/plot drew them, it and its fonts added about 7 MB to a
// binary whose budget is 12 MB; plots.go needs only the standard library
// and a bitmap font now). The quiot Pi binary leaves the whole bench out
// (device/pibuild.go); this stub keeps the package building and testing
// on 32-bit ARM, and `quiot bench --report DIR` on any other host draws the
// plots of a run made with an ARM build of the package.

// plotsBuiltIn reports whether this binary draws PNG plots.
const plotsBuiltIn = false

// The drawing functions below are never reached (report.go checks
// plotsBuiltIn first); they keep the callers compiling on 32-bit ARM.

func dotChart(string, string, string, []string, []string, func(g, s int) (Estimate, bool)) error {
	return errNoPlots
}

func dotChartScale(string, string, string, []string, []string, func(g, s int) (Estimate, bool), bool) error {
	return errNoPlots
}

func cdfChart(string, string, string, []cdfLine) error { return errNoPlots }

var errNoPlots = errors.New("this binary draws no plots (32-bit ARM build)")
