// Package backoff computes reconnect delays with exponential growth and
// jitter, for quiot's clients and the broker's bridges.
package backoff

import (
	"math/rand/v2"
	"time"
)

// Backoff computes reconnect delays: exponential growth from Base by Factor,
// capped at Max, with jitter so that many devices cut off by the same outage
// do not reconnect in lockstep. The zero value is ready to use.
type Backoff struct {
	// Base is the delay before the first retry; zero means 100 ms.
	Base time.Duration
	// Max caps every delay; zero means 30 s.
	Max time.Duration
	// Factor multiplies the delay after each attempt; zero means 2.
	Factor float64
	// Jitter is the fraction of each delay that is randomized: a delay d
	// becomes d*(1-Jitter) + rand*d*Jitter ("equal jitter" for 0.5). Zero
	// means 0.5; a negative value disables jitter. Values above 1 mean 1.
	Jitter float64
	// Rand returns a number in [0, 1); nil means math/rand/v2.Float64.
	Rand func() float64
}

// Delay returns the delay before retry number attempt (0 for the first
// retry). It never exceeds Max and never goes below zero.
func (b *Backoff) Delay(attempt int) time.Duration {
	base, maxd, factor, jitter := b.Base, b.Max, b.Factor, b.Jitter
	if base <= 0 {
		base = 100 * time.Millisecond
	}
	if maxd <= 0 {
		maxd = 30 * time.Second
	}
	if factor < 1 {
		factor = 2
	}
	switch {
	case jitter == 0:
		jitter = 0.5
	case jitter < 0:
		jitter = 0
	case jitter > 1:
		jitter = 1
	}
	if attempt < 0 {
		attempt = 0
	}
	d := float64(base)
	for i := 0; i < attempt && d < float64(maxd); i++ {
		d *= factor
	}
	if d > float64(maxd) {
		d = float64(maxd)
	}
	if jitter > 0 {
		r := rand.Float64
		if b.Rand != nil {
			r = b.Rand
		}
		d = d*(1-jitter) + r()*d*jitter
	}
	return time.Duration(d)
}
