package gen

import (
	"math/rand/v2"
	"time"
)

// Schedule yields the gaps between consecutive packets: 0 inside a burst of
// Burst back-to-back packets, and between bursts Burst/Rate seconds (constant)
// or an exponentially distributed gap with that mean (Poisson arrivals of
// bursts). The long-run packet rate is Rate either way.
type Schedule struct {
	Rate    float64 // packets per second, > 0
	Burst   int     // packets per burst, >= 1
	Poisson bool
	Rand    *rand.Rand // required when Poisson
	i       int
}

// Next returns the gap before the next packet (the first call returns the
// gap before the second packet).
func (s *Schedule) Next() time.Duration {
	s.i++
	if s.Burst > 1 && s.i%s.Burst != 0 {
		return 0
	}
	mean := float64(max(1, s.Burst)) / s.Rate // seconds
	if s.Poisson {
		return time.Duration(s.Rand.ExpFloat64() * mean * 1e9)
	}
	return time.Duration(mean * 1e9)
}
