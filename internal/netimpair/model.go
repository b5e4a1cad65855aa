package netimpair

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// GilbertElliott is the two-state burst loss model of tc netem's
// "loss gemodel p r 1-h 1-k": a Markov chain with a good and a bad state,
// evaluated once per packet. All values are percentages (0..100).
type GilbertElliott struct {
	// P is the probability of moving from the good to the bad state.
	P float64 `toml:"p"`
	// R is the probability of moving from the bad to the good state; the
	// mean burst length is 100/R packets.
	R float64 `toml:"r"`
	// LossBad is the loss probability in the bad state (netem's 1-h).
	// Zero means 100.
	LossBad float64 `toml:"loss_bad"`
	// LossGood is the loss probability in the good state (netem's 1-k).
	LossGood float64 `toml:"loss_good"`
	// Step, when set, also advances the chain once per Step of time that
	// passes between datagrams, so a burst ends after about Step*100/R of
	// link time even when the sender falls silent. netem's chain (Step 0,
	// the default) moves only when a packet arrives: a burst of N packets
	// then lasts until N more packets were sent, and a sender backing off
	// exponentially while nothing gets through (QUIC's PTO) stretches a
	// burst of 20 packets into minutes of outage. The stationary loss is
	// the same either way.
	Step time.Duration `toml:"step"`
}

// Enabled reports whether the model can lose anything.
func (g GilbertElliott) Enabled() bool { return g.P > 0 || g.LossGood > 0 }

// lossBad returns LossBad with its default applied.
func (g GilbertElliott) lossBad() float64 {
	if g.LossBad == 0 {
		return 100
	}
	return g.LossBad
}

// MeanLossPct returns the stationary loss rate of the model in percent.
func (g GilbertElliott) MeanLossPct() float64 {
	if g.P+g.R == 0 {
		return g.LossGood
	}
	pb := g.P / (g.P + g.R)
	return pb*g.lossBad() + (1-pb)*g.LossGood
}

// Validate checks that every value is a percentage.
func (g GilbertElliott) Validate() error {
	for _, f := range []struct {
		name string
		v    float64
	}{{"p", g.P}, {"r", g.R}, {"loss_bad", g.LossBad}, {"loss_good", g.LossGood}} {
		if !(f.v >= 0 && f.v <= 100) {
			return fmt.Errorf("gilbert-elliott %s = %v: want a percentage 0..100", f.name, f.v)
		}
	}
	if g.P > 0 && g.R == 0 {
		return fmt.Errorf("gilbert-elliott r = 0 with p > 0: the bad state would never end")
	}
	if g.Step < 0 {
		return fmt.Errorf("gilbert-elliott step %v: must not be negative", g.Step)
	}
	return nil
}

// Direction is the impairment of one direction of the link. The zero
// value forwards everything at once.
type Direction struct {
	// Delay is the one-way delay added to every datagram. Default 0.
	Delay time.Duration
	// Jitter is the maximum deviation from Delay: each datagram's delay is
	// uniform in [Delay-Jitter, Delay+Jitter] (never below 0). Without
	// Reorder, a datagram never leaves before the one before it, so jitter
	// does not reorder. Default 0.
	Jitter time.Duration
	// Reorder lets jitter reorder datagrams, as netem does. Default false.
	Reorder bool
	// LossPct is the probability (percent) of dropping a datagram at
	// random, independently of the others. Default 0.
	LossPct float64
	// Burst is the Gilbert-Elliott burst loss model, applied before the
	// random loss. Default: off.
	Burst GilbertElliott
	// RateKbit is the link rate in kbit/s (1000 bit/s); each datagram
	// occupies the link for (len+Overhead)*8/rate. Default 0: unlimited.
	RateKbit float64
	// Overhead is added to each datagram's length for the rate: the IPv4
	// and UDP headers the relay does not see. Default 28; -1 means 0.
	Overhead int
	// QueueLimit is the number of datagrams that may wait for the link
	// (with a rate); more are dropped at the tail. Default 1000 (netem's
	// default limit).
	QueueLimit int
}

// MeanLossPct returns the direction's expected loss in percent: the burst
// model's stationary loss combined with the independent random loss
// (queue drops not included).
func (d Direction) MeanLossPct() float64 {
	return 100 - (100-d.Burst.MeanLossPct())*(100-d.LossPct)/100
}

// Validate checks d's values.
func (d Direction) Validate() error {
	switch {
	case d.Delay < 0:
		return fmt.Errorf("delay %v: must not be negative", d.Delay)
	case d.Jitter < 0:
		return fmt.Errorf("jitter %v: must not be negative", d.Jitter)
	case !(d.LossPct >= 0 && d.LossPct <= 100):
		return fmt.Errorf("loss %v%%: want a percentage 0..100", d.LossPct)
	case !(d.RateKbit >= 0) || math.IsInf(d.RateKbit, 0):
		return fmt.Errorf("rate %v kbit/s: must be a finite number >= 0", d.RateKbit)
	case d.Overhead < -1:
		return fmt.Errorf("overhead %d: must be >= -1", d.Overhead)
	case d.QueueLimit < 0:
		return fmt.Errorf("queue limit %d: must not be negative", d.QueueLimit)
	}
	if err := d.Burst.Validate(); err != nil {
		return err
	}
	return nil
}

// withDefaults applies the documented defaults.
func (d Direction) withDefaults() Direction {
	switch d.Overhead {
	case 0:
		d.Overhead = 28
	case -1:
		d.Overhead = 0
	}
	if d.QueueLimit == 0 {
		d.QueueLimit = 1000
	}
	return d
}

// Cause is why a datagram was dropped.
type Cause int

// Drop causes.
const (
	// Kept: the datagram was not dropped.
	Kept Cause = iota
	// DropRandom: random loss (LossPct).
	DropRandom
	// DropBurst: Gilbert-Elliott burst loss.
	DropBurst
	// DropQueue: the queue was full (drop-tail).
	DropQueue
)

// String returns the cause's name.
func (c Cause) String() string {
	switch c {
	case Kept:
		return "kept"
	case DropRandom:
		return "random"
	case DropBurst:
		return "burst"
	case DropQueue:
		return "queue"
	default:
		return fmt.Sprintf("cause(%d)", int(c))
	}
}

// Link is the deterministic model of one direction: given arrival times
// and sizes it decides drops and departure times. It does no I/O and
// reads no clock, so it is tested on synthetic time. Not safe for
// concurrent use.
type Link struct {
	d   Direction
	rng *rand.Rand

	bad       bool        // Gilbert-Elliott state
	stepAt    time.Time   // time up to which the chain has advanced (Burst.Step)
	busyUntil time.Time   // when the link finishes its current backlog
	backlog   []time.Time // transmission end times of queued datagrams, oldest first
	last      time.Time   // latest departure so far (no-reorder floor)
}

// NewLink returns the model of d (defaults applied), with its random
// numbers from seed.
func NewLink(d Direction, seed uint64) *Link {
	return &Link{d: d.withDefaults(), rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

// chance returns true with probability pct percent.
func (l *Link) chance(pct float64) bool {
	if pct <= 0 {
		return false
	}
	if pct >= 100 {
		return true
	}
	return l.rng.Float64()*100 < pct
}

// elapse advances the Gilbert-Elliott chain by the whole Burst.Step
// periods between the last advance and now, in one draw: after k steps
// from state s the chain is bad with probability pi + (s - pi)*(1-p-r)^k,
// pi = p/(p+r) being the stationary share of the bad state.
func (l *Link) elapse(now time.Time) {
	g := l.d.Burst
	if g.Step <= 0 || !g.Enabled() {
		return
	}
	if l.stepAt.IsZero() || now.Before(l.stepAt) {
		l.stepAt = now
		return
	}
	k := int64(now.Sub(l.stepAt) / g.Step)
	if k == 0 {
		return
	}
	l.stepAt = l.stepAt.Add(time.Duration(k) * g.Step)
	p, r := g.P/100, g.R/100
	if p+r == 0 {
		return // the state never changes
	}
	pi := p / (p + r)
	s := 0.0
	if l.bad {
		s = 1
	}
	pBad := pi + (s-pi)*math.Pow(1-p-r, float64(k))
	l.bad = l.rng.Float64() < pBad
}

// loseBurst steps the Gilbert-Elliott chain as netem does: possibly change
// state, then lose with the loss probability of the state the packet
// arrived in.
func (l *Link) loseBurst() bool {
	g := l.d.Burst
	if !g.Enabled() {
		return false
	}
	if !l.bad {
		if l.chance(g.P) {
			l.bad = true
		}
		return l.chance(g.LossGood)
	}
	if l.chance(g.R) {
		l.bad = false
	}
	return l.chance(g.lossBad())
}

// Admit decides the fate of a datagram of size bytes arriving at now: the
// cause if it is dropped, else the time it leaves the link.
func (l *Link) Admit(now time.Time, size int) (time.Time, Cause) {
	l.elapse(now)
	if l.loseBurst() {
		return time.Time{}, DropBurst
	}
	if l.chance(l.d.LossPct) {
		return time.Time{}, DropRandom
	}
	sent := now
	if l.d.RateKbit > 0 {
		// Datagrams that finished transmission have left the queue.
		i := 0
		for i < len(l.backlog) && !l.backlog[i].After(now) {
			i++
		}
		l.backlog = l.backlog[i:]
		if len(l.backlog) >= l.d.QueueLimit {
			return time.Time{}, DropQueue
		}
		start := now
		if l.busyUntil.After(start) {
			start = l.busyUntil
		}
		bits := float64(size+l.d.Overhead) * 8
		tx := time.Duration(bits / (l.d.RateKbit * 1000) * float64(time.Second))
		l.busyUntil = start.Add(tx)
		l.backlog = append(l.backlog, l.busyUntil)
		sent = l.busyUntil
	}
	delay := l.d.Delay
	if j := l.d.Jitter; j > 0 {
		delay += time.Duration((l.rng.Float64()*2 - 1) * float64(j))
		if delay < 0 {
			delay = 0
		}
	}
	dep := sent.Add(delay)
	if !l.d.Reorder {
		if dep.Before(l.last) {
			dep = l.last
		}
		l.last = dep
	}
	return dep, Kept
}
