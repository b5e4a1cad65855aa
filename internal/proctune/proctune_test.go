package proctune

import (
	"context"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

func TestParseMode(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Mode
		err  string
	}{
		{"", Mode{Auto: true}, ""},
		{"auto", Mode{Auto: true}, ""},
		{" Auto ", Mode{Auto: true}, ""},
		{"all", Mode{}, ""},
		{"default", Mode{}, ""},
		{"1", Mode{Fixed: 1}, ""},
		{"4", Mode{Fixed: 4}, ""},
		{"0", Mode{}, "positive number"},
		{"-2", Mode{}, "positive number"},
		{"many", Mode{}, "want auto, all"},
	} {
		got, err := ParseMode(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseMode(%q) = %v, %v; want error with %q", tc.in, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseMode(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
		if back, err := ParseMode(got.String()); err != nil || back != got {
			t.Errorf("ParseMode(%q.String() = %q) = %v, %v", tc.in, got.String(), back, err)
		}
	}
}

func TestControllerStep(t *testing.T) {
	const sec = time.Second
	// Each step is the share of a core used over one second and the
	// processors wanted after it.
	type step struct {
		load  float64
		procs int
	}
	for _, tc := range []struct {
		name  string
		o     Options
		most  int
		steps []step
	}{
		{"starts on all, idle goes to one", Options{}, 4, []step{{0, 4}, {0.1, 4}, {0.3, 1}, {0.74, 1}}},
		{"busy goes up at once", Options{}, 4, []step{{0, 4}, {0, 4}, {0, 1}, {0.2, 1}, {0.75, 4}, {0.9, 4}}},
		{"one core only: nothing to give", Options{}, 1, []step{{1, 1}, {1, 1}}},
		{"down after three quiet intervals in a row", Options{}, 2, []step{
			{0.9, 2}, {0.3, 2}, {0.3, 2}, {0.3, 1}, {0.3, 1},
		}},
		{"a busy interval starts the count again", Options{}, 2, []step{
			{0.9, 2}, {0.1, 2}, {0.1, 2}, {0.5, 2}, {0.1, 2}, {0.1, 2}, {0.1, 1},
		}},
		{"between the bounds: no change either way", Options{}, 2, []step{
			{0.1, 2}, {0.1, 2}, {0.1, 1}, {0.6, 1}, {0.6, 1}, {0.8, 2}, {0.6, 2}, {0.6, 2}, {0.6, 2}, {0.6, 2}, {0.6, 2}, {0.6, 2}, {0.6, 2}, {0.6, 2}, {0.6, 2}, {0.6, 2}, {0.6, 2},
		}},
		{"options", Options{Up: 0.5, Down: 0.2, DownAfter: 2}, 3, []step{
			{0.5, 3}, {0.1, 3}, {0.1, 1}, {0.4, 1}, {0.6, 3},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := NewController(tc.o, tc.most)
			if c.Procs() != tc.most {
				t.Fatalf("starts at %d processors, want %d", c.Procs(), tc.most)
			}
			prev := tc.most
			for i, s := range tc.steps {
				got, changed := c.Step(time.Duration(s.load*float64(sec)), sec)
				if got != s.procs || changed != (got != prev) {
					t.Fatalf("step %d (load %.2f): %d processors, changed %v; want %d (from %d)", i, s.load, got, changed, s.procs, prev)
				}
				prev = got
			}
		})
	}
	if got, changed := NewController(Options{}, 2).Step(0, 0); got != 2 || changed {
		t.Fatalf("an interval of no length: %d, %v; want 2, false", got, changed)
	}
}

// TestRun feeds run ticks, each with a sample of the CPU time and the
// clock, and checks what it sets.
func TestRun(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type sample struct {
		at  time.Time
		cpu time.Duration
		ok  bool
	}
	type set struct {
		procs int
		load  float64
	}
	tick := make(chan time.Time)
	samples := make(chan sample)
	sets := make(chan set, 8)
	done := make(chan struct{})
	c := NewController(Options{DownAfter: 2}, 2)
	var at time.Time // run reads the clock right after the CPU time
	go func() {
		defer close(done)
		run(ctx, c, tick,
			func() (time.Duration, bool) { s := <-samples; at = s.at; return s.cpu, s.ok },
			func() time.Time { return at },
			func(n int, load float64) { sets <- set{n, load} })
	}()
	t0 := time.Unix(1000, 0)
	samples <- sample{t0, 0, true} // run's first reading
	feed := func(sec, cpuMs int, ok bool) {
		tick <- time.Time{}
		samples <- sample{t0.Add(time.Duration(sec) * time.Second), time.Duration(cpuMs) * time.Millisecond, ok}
	}
	feed(1, 100, true) // 0.1 cores: one low interval (it starts on 2)
	feed(2, 200, true) // the second: down
	if s := <-sets; s.procs != 1 || s.load < 0.09 || s.load > 0.11 {
		t.Fatalf("set %+v; want 1 processor at 0.1 cores", s)
	}
	feed(3, 5000, false) // unreadable: skipped
	feed(4, 2000, true)  // 0.9 cores over 2 s: up
	if s := <-sets; s.procs != 2 || s.load < 0.89 || s.load > 0.91 {
		t.Fatalf("set %+v; want 2 processors at 0.9 cores", s)
	}
	cancel()
	<-done
	select {
	case s := <-sets:
		t.Fatalf("unexpected set %+v", s)
	default:
	}
}

// TestApply runs the real controller: it takes the process to one
// processor, keeps a second controller out, and gives the runtime its
// default back when its context ends.
func TestApply(t *testing.T) {
	if os.Getenv("GOMAXPROCS") != "" {
		t.Skip("GOMAXPROCS is set in the environment: Apply leaves it (tested below)")
	}
	most := runtime.GOMAXPROCS(0)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a := Apply(ctx, Mode{Auto: true}, Options{Interval: 10 * time.Millisecond, DownAfter: 1}, nil)
	if most == 1 {
		if a.Mode.Auto || a.Why != "one processor" {
			t.Fatalf("one processor: Apply = %+v; want it to stay out", a)
		}
		return
	}
	if !a.Mode.Auto || a.Max != most || a.Why != "" || a.String() != "procs=auto (1.."+itoa(most)+")" {
		t.Fatalf("Apply = %+v (%s)", a, a)
	}
	// This test uses well under 40 % of a core: one quiet interval takes
	// it to one processor.
	deadline := time.Now().Add(30 * time.Second)
	for runtime.GOMAXPROCS(0) != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("GOMAXPROCS = %d 30 s after Apply; want 1", runtime.GOMAXPROCS(0))
		}
		time.Sleep(10 * time.Millisecond)
	}
	b := Apply(context.Background(), Mode{Auto: true}, Options{}, nil)
	if b.Mode.Auto || b.Why != "another controller runs" {
		t.Fatalf("second Apply = %+v; want it to stay out", b)
	}
	cancel()
	deadline = time.Now().Add(30 * time.Second)
	for runtime.GOMAXPROCS(0) != most {
		if time.Now().After(deadline) {
			t.Fatalf("GOMAXPROCS = %d 30 s after the end; want the default %d back", runtime.GOMAXPROCS(0), most)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// A fixed number is set, and the previous value comes back at the end.
	ctx2, cancel2 := context.WithCancel(context.Background())
	if f := Apply(ctx2, Mode{Fixed: 1}, Options{}, nil); f.Mode.Fixed != 1 || runtime.GOMAXPROCS(0) != 1 {
		t.Fatalf("Apply(1) = %+v, GOMAXPROCS %d", f, runtime.GOMAXPROCS(0))
	}
	cancel2()
	for runtime.GOMAXPROCS(0) != most {
		if time.Now().After(deadline) {
			t.Fatalf("GOMAXPROCS = %d after a fixed mode's end; want %d", runtime.GOMAXPROCS(0), most)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestApplyEnvWins: GOMAXPROCS in the environment keeps auto out.
func TestApplyEnvWins(t *testing.T) {
	t.Setenv("GOMAXPROCS", itoa(runtime.GOMAXPROCS(0)))
	a := Apply(context.Background(), Mode{Auto: true}, Options{}, nil)
	if a.Mode.Auto || a.Why != "GOMAXPROCS is set" {
		t.Fatalf("Apply = %+v; want it to stay out", a)
	}
}

// TestProcessCPU: the process's CPU time grows while it works.
func TestProcessCPU(t *testing.T) {
	before, ok := processCPU()
	if !ok {
		t.Fatal("processCPU: not readable")
	}
	x := 0
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
		for i := range 1 << 20 {
			x ^= i
		}
		if now, _ := processCPU(); now > before {
			return
		}
	}
	t.Fatalf("no CPU time counted in 30 s of work (%d)", x)
}

func itoa(n int) string { return Mode{Fixed: n}.String() }
