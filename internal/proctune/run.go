package proctune

import (
	"context"
	"log/slog"
	"os"
	"runtime"
	"strconv"
	"sync"
	"time"
)

// active is set while a controller runs: GOMAXPROCS is the process's, so
// one controller at a time (a second broker in the same process, as in
// tests, leaves it to the first).
var (
	activeMu sync.Mutex
	active   bool
)

// Applied says what Apply did.
type Applied struct {
	// Mode is the mode in effect (Auto false when it could not run).
	Mode Mode
	// Max is the most processors the broker runs on.
	Max int
	// Why, when not empty, says why the mode asked for is not in effect.
	Why string
}

// String describes the setting for the broker's start log, e.g.
// "procs=auto (1..4)".
func (a Applied) String() string {
	s := "procs=" + a.Mode.String()
	if a.Mode.Auto {
		s += " (1.." + strconv.Itoa(a.Max) + ")"
	}
	if a.Why != "" {
		s += " (" + a.Why + ")"
	}
	return s
}

// Apply sets GOMAXPROCS as m says until ctx ends, then gives the runtime
// its default back. Auto starts a controller (one sample an
// o.Interval); it stays out when GOMAXPROCS is set in the environment (the
// runtime has applied it), when the runtime's default is one processor
// (a Pi Zero), when the process's CPU time cannot be read, or when another
// controller runs in the process. log may be nil.
func Apply(ctx context.Context, m Mode, o Options, log *slog.Logger) Applied {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if !m.Auto {
		if m.Fixed > 0 {
			prev := runtime.GOMAXPROCS(m.Fixed)
			context.AfterFunc(ctx, func() { runtime.GOMAXPROCS(prev) })
			return Applied{Mode: m, Max: m.Fixed}
		}
		return Applied{Mode: m, Max: runtime.GOMAXPROCS(0)}
	}
	most := runtime.GOMAXPROCS(0)
	if os.Getenv("GOMAXPROCS") != "" {
		return Applied{Mode: Mode{Fixed: most}, Max: most, Why: "GOMAXPROCS is set"}
	}
	activeMu.Lock()
	defer activeMu.Unlock()
	switch _, cpuOK := processCPU(); {
	case active:
		return Applied{Mode: Mode{Fixed: most}, Max: most, Why: "another controller runs"}
	case most <= 1:
		return Applied{Mode: Mode{Fixed: most}, Max: most, Why: "one processor"}
	case !cpuOK:
		return Applied{Mode: Mode{Fixed: most}, Max: most, Why: "no CPU time to read"}
	}
	active = true

	o = o.withDefaults()
	c := NewController(o, most)
	tk := time.NewTicker(o.Interval)
	go func() {
		defer func() {
			tk.Stop()
			runtime.SetDefaultGOMAXPROCS()
			activeMu.Lock()
			active = false
			activeMu.Unlock()
		}()
		run(ctx, c, tk.C, processCPU, time.Now, func(n int, load float64) {
			if n > 1 {
				// The runtime's default again: it follows changes of the
				// CPU quota or affinity (Go 1.25).
				runtime.SetDefaultGOMAXPROCS()
			} else {
				runtime.GOMAXPROCS(n)
			}
			log.Debug("procs", "gomaxprocs", n, "load_cores", load)
		})
	}()
	return Applied{Mode: m, Max: most}
}

// run feeds c one sample a tick until ctx ends and calls set when its
// choice changes. cpu returns the process's CPU time so far.
func run(ctx context.Context, c *Controller, tick <-chan time.Time, cpu func() (time.Duration, bool), now func() time.Time, set func(procs int, load float64)) {
	lastCPU, _ := cpu()
	lastAt := now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick:
		}
		u, ok := cpu()
		at := now()
		if !ok {
			continue
		}
		wall := at.Sub(lastAt)
		used := u - lastCPU
		lastCPU, lastAt = u, at
		if n, changed := c.Step(used, wall); changed {
			set(n, float64(used)/float64(wall))
		}
	}
}
