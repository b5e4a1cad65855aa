package bench

import (
	"math"
	"time"
)

// EstimateRun guesses one run's wall time on link from the workload: the
// roles' start (about 2 s of process start-up and the subscriber's
// subscription), the handshake (about four RTTs and, on slow uplinks, the
// handshake's few kilobytes at the link's rate with the PTO resends of
// issue 12), the paced sending, the last message's way and the shutdown.
// It is a planning figure for presets (checked against measured runs in
// docs/results/), not a bound.
func EstimateRun(s Spec, link LinkInfo) time.Duration {
	rtt := link.RTTMs() / 1000
	sec := 2.0 + 4*rtt
	if link.RateKbps > 0 {
		sec += 8 * 6000 / (link.RateKbps * 1000) // handshake bytes incl. resends
	}
	n := float64(max(1, s.Count))
	paced := 0.0
	if s.Rate > 0 {
		paced = (n - 1) / s.Rate
	}
	// A link slower than the pace: the messages queue at the link's rate.
	if link.RateKbps > 0 {
		perMsg := 8 * float64(maxInt(s.Payloads)+150) / (link.RateKbps * 1000)
		paced = math.Max(paced, n*perMsg)
	}
	sec += paced + 2*rtt + 1
	return time.Duration(sec * float64(time.Second))
}

// EstimateDuration sums EstimateRun over the matrix's runs; links maps profile
// names to their info (unknown profiles count as lan).
func EstimateDuration(s Spec, links map[string]LinkInfo) time.Duration {
	var d time.Duration
	for _, j := range s.Expand() {
		d += EstimateRun(s, links[j.Profile])
	}
	return d
}
