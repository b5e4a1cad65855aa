package qmetrics

import (
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Latency histogram range: 1 µs to 1 hour, 3 significant digits.
const (
	latencyLowest  = 1                                   // µs
	latencyHighest = int64(time.Hour / time.Microsecond) // µs
	latencyDigits  = 3
)

// DefaultKeepSamples is how many raw samples a Latency keeps for CDF plots
// when NewLatency is given a negative limit.
const DefaultKeepSamples = 100_000

// LatencyMs is a latency summary in milliseconds (metric 3).
type LatencyMs struct {
	P50 float64 `json:"p50"`
	P95 float64 `json:"p95"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

// Latency records per-message latencies in an HdrHistogram (1 µs to 1 h,
// 3 significant digits). Methods are safe for concurrent use.
type Latency struct {
	mu        sync.Mutex
	h         *hdrhistogram.Histogram
	keep      int
	samples   []float64 // ms, the first keep values
	negatives uint64
	clamped   uint64
}

// NewLatency returns an empty recorder that also keeps the first keep raw
// samples (for CDF plots); keep < 0 means DefaultKeepSamples, 0 keeps none.
func NewLatency(keep int) *Latency {
	if keep < 0 {
		keep = DefaultKeepSamples
	}
	return &Latency{h: hdrhistogram.New(latencyLowest, latencyHighest, latencyDigits), keep: keep}
}

// Record adds one latency. A negative value (clocks of two hosts out of
// step) is recorded as 0 and counted in Negatives; a value above one hour
// is recorded as one hour and counted in Clamped.
func (l *Latency) Record(d time.Duration) {
	us := int64(d / time.Microsecond)
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case us < 0:
		l.negatives++
		us = 0
	case us > latencyHighest:
		l.clamped++
		us = latencyHighest
	}
	_ = l.h.RecordValue(us) // cannot fail: us is within the range
	if len(l.samples) < l.keep {
		l.samples = append(l.samples, float64(us)/1000)
	}
}

// Count returns the number of recorded latencies.
func (l *Latency) Count() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.h.TotalCount()
}

// Negatives returns how many recorded latencies were negative.
func (l *Latency) Negatives() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.negatives
}

// Summary returns p50, p95, p99 and max in milliseconds (zeros when empty).
func (l *Latency) Summary() LatencyMs {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.h.TotalCount() == 0 {
		return LatencyMs{}
	}
	v := l.h.ValueAtPercentilesSlice([]float64{50, 95, 99})
	return LatencyMs{
		P50: usToMs(v[0]),
		P95: usToMs(v[1]),
		P99: usToMs(v[2]),
		Max: usToMs(l.h.Max()),
	}
}

// Samples returns a copy of the kept raw samples in milliseconds, in the
// order recorded.
func (l *Latency) Samples() []float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]float64(nil), l.samples...)
}

// Merge adds the latencies recorded in o to l.
func (l *Latency) Merge(o *Latency) {
	if o == l {
		return
	}
	o.mu.Lock()
	h := o.h.Export()
	samples := append([]float64(nil), o.samples...)
	neg, cl := o.negatives, o.clamped
	o.mu.Unlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.h.Merge(hdrhistogram.Import(h))
	l.negatives += neg
	l.clamped += cl
	if room := l.keep - len(l.samples); room > 0 {
		l.samples = append(l.samples, samples[:min(room, len(samples))]...)
	}
}

func usToMs(us int64) float64 { return float64(us) / 1000 }
