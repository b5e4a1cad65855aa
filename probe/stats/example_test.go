package stats_test

import (
	"fmt"
	"time"

	"github.com/quiot/quiot/probe/stats"
)

// Summarize per-packet delays with bootstrap confidence intervals.
func ExampleSummarize() {
	delays := []time.Duration{30 * time.Microsecond, 35 * time.Microsecond, 32 * time.Microsecond, 90 * time.Microsecond, 31 * time.Microsecond}
	s, err := stats.Summarize(stats.Micros(delays), stats.Options{Seed: 1})
	if err != nil {
		panic(err)
	}
	fmt.Printf("min %.0f p50 %.0f PDV %.1f us, p50 95%% CI [%.0f, %.0f]\n", s.Min, s.P50, s.PDV, s.P50CI.Lo, s.P50CI.Hi)
	// Output: min 30 p50 32 PDV 59.8 us, p50 95% CI [30, 90]
}
