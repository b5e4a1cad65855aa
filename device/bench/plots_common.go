package bench

import "path/filepath"

// noPlotsNote is what report.md says where a binary without plots (32-bit
// ARM) would have drawn them.
const noPlotsNote = "This quiot was built for 32-bit ARM, which leaves the PNG plots out. " +
	"Draw them on any other host with `quiot bench --report DIR`."

// cdfLine is one curve of a CDF plot.
type cdfLine struct {
	Name   string
	Values []float64
	// Approx marks a curve built from percentiles only.
	Approx bool
}

// plotName is a file name under dir.
func plotName(dir, name string) string { return filepath.Join(dir, name+".png") }
