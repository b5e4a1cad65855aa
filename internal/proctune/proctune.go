// Package proctune chooses how many processors run the broker's Go code
// (GOMAXPROCS) from the CPU it uses: one while its load fits well within a
// core, the runtime's default (every core the process may use) when it does
// not.
//
// Why: with a processor idle, Go's scheduler keeps a thread waiting in the
// network poller, and that thread wakes for each socket that becomes
// readable. A broker fanning a message out to a thousand MQTT subscribers
// gets their acknowledgements back one wake-up (and two context switches)
// at a time, about 4 an epoll wait, where a single thread busy with the
// fan-out finds them together (mosquitto: about 21). On one processor
// the broker used 8-10 % less CPU for the same load with the same
// latencies (docs/BENCH.md, "One processor while the load fits one").
// The broker starts on every processor and goes to one after
// DefaultDownAfter quiet intervals; a broker that needs more than a core
// (many QUIC or TLS handshakes, a large HTTP/3 fan-out) gets them back
// within an interval.
package proctune

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Defaults of Options.
const (
	// DefaultInterval is how often the CPU used is sampled.
	DefaultInterval = time.Second
	// DefaultUp is the share of one core used, on one processor, over one
	// interval at which every processor is given back.
	DefaultUp = 0.75
	// DefaultDown is the share of one core below which, for DefaultDownAfter
	// intervals in a row, the broker goes back to one processor. It is
	// well below DefaultUp: on more processors the same load costs more
	// (the wake-ups above), and the two bounds must not chase each other.
	DefaultDown = 0.4
	// DefaultDownAfter is how many intervals in a row the load must stay
	// below Down before the broker goes back to one processor.
	DefaultDownAfter = 3
)

// Mode is what --procs asks for.
type Mode struct {
	// Auto chooses between one processor and the runtime's default from
	// the CPU used (Options, Controller).
	Auto bool
	// Fixed, when positive and Auto is false, is a fixed GOMAXPROCS.
	// Zero with Auto false means the runtime's default, untouched.
	Fixed int
}

// String gives the mode as ParseMode reads it.
func (m Mode) String() string {
	switch {
	case m.Auto:
		return "auto"
	case m.Fixed > 0:
		return strconv.Itoa(m.Fixed)
	}
	return "all"
}

// ParseMode reads --procs: "auto" (the default), "all" (the runtime's
// default: every core the process may use, or GOMAXPROCS from the
// environment) or a positive number of processors.
func ParseMode(s string) (Mode, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "auto":
		return Mode{Auto: true}, nil
	case "all", "default":
		return Mode{}, nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || n <= 0 {
		return Mode{}, fmt.Errorf("%q: want auto, all or a positive number of processors", s)
	}
	return Mode{Fixed: n}, nil
}

// Options tune the automatic choice. The zero value means the defaults.
type Options struct {
	// Interval is how often the CPU used is sampled; zero means
	// DefaultInterval.
	Interval time.Duration
	// Up is the share of one core (0..1) used over one interval on one
	// processor at which the controller gives every processor back; zero
	// means DefaultUp.
	Up float64
	// Down is the share of one core under which, for DownAfter intervals
	// in a row, the controller goes back to one processor; zero means
	// DefaultDown.
	Down float64
	// DownAfter is the number of intervals in a row below Down; zero
	// means DefaultDownAfter.
	DownAfter int
}

func (o Options) withDefaults() Options {
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	if o.Up <= 0 {
		o.Up = DefaultUp
	}
	if o.Down <= 0 {
		o.Down = DefaultDown
	}
	if o.DownAfter <= 0 {
		o.DownAfter = DefaultDownAfter
	}
	return o
}

// Controller decides, from one sample of CPU used per interval, between
// one processor and the runtime's default. It holds no clock and does no I/O (Run feeds it).
type Controller struct {
	o     Options
	most  int
	procs int
	low   int // intervals in a row below Down, on Max processors
}

// NewController starts at most processors, the runtime's default
// GOMAXPROCS (a broker starting up, with its clients connecting, may use
// them); Down and DownAfter take it to one.
func NewController(o Options, most int) *Controller {
	return &Controller{o: o.withDefaults(), most: most, procs: max(most, 1)}
}

// Procs is the number of processors the controller has chosen.
func (c *Controller) Procs() int { return c.procs }

// Step takes the CPU time used during the last interval (user and system,
// all threads) and its length, and returns the processors to run on and
// whether that changed.
func (c *Controller) Step(cpu, wall time.Duration) (procs int, changed bool) {
	if wall <= 0 {
		return c.procs, false
	}
	load := float64(cpu) / float64(wall) // in cores
	switch {
	case c.procs == 1 && load >= c.o.Up && c.most > 1:
		c.procs, c.low = c.most, 0
		return c.procs, true
	case c.procs > 1 && load < c.o.Down:
		c.low++
		if c.low >= c.o.DownAfter {
			c.procs, c.low = 1, 0
			return c.procs, true
		}
	case c.procs > 1:
		c.low = 0
	}
	return c.procs, false
}
