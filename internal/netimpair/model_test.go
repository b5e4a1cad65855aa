package netimpair

import (
	"math"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestLinkRandomLoss(t *testing.T) {
	for _, pct := range []float64{1, 5, 10, 20} {
		l := NewLink(Direction{LossPct: pct}, 42)
		const n = 10000
		lost := 0
		for i := range n {
			if _, c := l.Admit(t0.Add(time.Duration(i)*time.Millisecond), 100); c == DropRandom {
				lost++
			} else if c != Kept {
				t.Fatalf("unexpected cause %v", c)
			}
		}
		got := 100 * float64(lost) / n
		if math.Abs(got-pct) > 1.5 {
			t.Errorf("loss %v%%: got %.2f%% over %d datagrams", pct, got, n)
		}
	}
}

func TestLinkBurstLoss(t *testing.T) {
	tests := []struct {
		name string
		g    GilbertElliott
	}{
		{"gilbert p1 r10", GilbertElliott{P: 1, R: 10}},
		{"elliott with good-state loss", GilbertElliott{P: 2, R: 25, LossBad: 80, LossGood: 0.5}},
		{"sat-like", GilbertElliott{P: 0.5, R: 30, LossBad: 50}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := NewLink(Direction{Burst: tt.g}, 7)
			const n = 200000
			lost, bursts, inBurst := 0, 0, false
			for range n {
				_, c := l.Admit(t0, 100)
				if c == DropBurst {
					lost++
					if !inBurst {
						bursts++
					}
					inBurst = true
				} else {
					inBurst = false
				}
			}
			got, want := 100*float64(lost)/n, tt.g.MeanLossPct()
			if math.Abs(got-want) > 1 {
				t.Errorf("loss %.2f%%, want %.2f%% +- 1", got, want)
			}
			if tt.g.LossBad == 0 && tt.g.LossGood == 0 {
				// Every bad-state packet is lost: mean burst length 100/R.
				mean, want := float64(lost)/float64(bursts), 100/tt.g.R
				if math.Abs(mean-want)/want > 0.1 {
					t.Errorf("mean burst %.2f, want %.2f +- 10%%", mean, want)
				}
			}
		})
	}
}

func TestLinkRateAndQueue(t *testing.T) {
	// 1000-byte datagrams + 28 overhead at 1000 kbit/s: 8.224 ms each.
	l := NewLink(Direction{RateKbit: 1000, QueueLimit: 5, Delay: 10 * time.Millisecond}, 1)
	tx := time.Duration(1028 * 8 * float64(time.Second) / 1e6)
	var deps []time.Time
	drops := 0
	for range 10 {
		at, c := l.Admit(t0, 1000)
		switch c {
		case Kept:
			deps = append(deps, at)
		case DropQueue:
			drops++
		default:
			t.Fatalf("cause %v", c)
		}
	}
	if len(deps) != 5 || drops != 5 {
		t.Fatalf("kept %d, dropped %d; want 5, 5", len(deps), drops)
	}
	for i, d := range deps {
		want := t0.Add(time.Duration(i+1)*tx + 10*time.Millisecond)
		if diff := d.Sub(want); diff < -time.Microsecond || diff > time.Microsecond {
			t.Errorf("departure %d = +%v, want +%v", i, d.Sub(t0), want.Sub(t0))
		}
	}
	// Once the first two have been transmitted, two fit again.
	later := t0.Add(2*tx + time.Microsecond)
	kept := 0
	for range 3 {
		if _, c := l.Admit(later, 1000); c == Kept {
			kept++
		}
	}
	if kept != 2 {
		t.Errorf("after two transmissions: %d admitted, want 2", kept)
	}
}

func TestLinkJitter(t *testing.T) {
	const d, j = 50 * time.Millisecond, 20 * time.Millisecond
	for _, reorder := range []bool{false, true} {
		l := NewLink(Direction{Delay: d, Jitter: j, Reorder: reorder}, 3)
		var prev time.Time
		reordered := 0
		for i := range 2000 {
			now := t0.Add(time.Duration(i) * time.Millisecond)
			at, _ := l.Admit(now, 100)
			delay := at.Sub(now)
			if delay < d-j || (reorder && delay > d+j) {
				t.Fatalf("reorder=%v: delay %v outside [%v, %v]", reorder, delay, d-j, d+j)
			}
			if at.Before(prev) {
				reordered++
			}
			if at.After(prev) {
				prev = at
			}
		}
		if !reorder && reordered != 0 {
			t.Errorf("reorder=false: %d datagrams reordered", reordered)
		}
		if reorder && reordered == 0 {
			t.Error("reorder=true: nothing reordered with 20 ms jitter at 1 ms spacing")
		}
	}
}

func TestLinkDeterministic(t *testing.T) {
	d := Direction{LossPct: 10, Jitter: 5 * time.Millisecond, Delay: 10 * time.Millisecond, Burst: GilbertElliott{P: 1, R: 20}}
	run := func(seed uint64) []time.Time {
		l := NewLink(d, seed)
		var out []time.Time
		for i := range 1000 {
			at, _ := l.Admit(t0.Add(time.Duration(i)*time.Millisecond), 100)
			out = append(out, at)
		}
		return out
	}
	a, b, c := run(9), run(9), run(10)
	same := func(x, y []time.Time) bool {
		for i := range x {
			if !x[i].Equal(y[i]) {
				return false
			}
		}
		return true
	}
	if !same(a, b) {
		t.Error("same seed, different outcome")
	}
	if same(a, c) {
		t.Error("different seeds, same outcome")
	}
}

func TestLinkBurstStep(t *testing.T) {
	g := GilbertElliott{P: 1, R: 20}
	t.Run("silence ends a burst", func(t *testing.T) {
		tests := []struct {
			name     string
			step     time.Duration
			min, max float64 // share of bursts still on after an hour
		}{
			{"per packet (netem)", 0, 0.75, 0.85},            // 1-R
			{"step 10ms", 10 * time.Millisecond, 0.03, 0.07}, // stationary: p/(p+r) = 4.8 %
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				g := g
				g.Step = tt.step
				const seeds = 2000
				on := 0
				for seed := uint64(1); seed <= seeds; seed++ {
					l := NewLink(Direction{Burst: g}, seed)
					for l.admitCause(t0) != DropBurst {
					}
					if l.admitCause(t0.Add(time.Hour)) == DropBurst {
						on++
					}
				}
				if got := float64(on) / seeds; got < tt.min || got > tt.max {
					t.Errorf("%.3f of bursts still on after an hour of silence, want %.2f..%.2f", got, tt.min, tt.max)
				}
			})
		}
	})
	t.Run("same mean loss", func(t *testing.T) {
		g := g
		g.Step = 10 * time.Millisecond
		l := NewLink(Direction{Burst: g}, 3)
		const n = 200000
		lost := 0
		for i := range n {
			if l.admitCause(t0.Add(time.Duration(i)*25*time.Millisecond)) == DropBurst {
				lost++
			}
		}
		if got, want := 100*float64(lost)/n, g.MeanLossPct(); math.Abs(got-want) > 1 {
			t.Errorf("loss %.2f%%, want %.2f%% +- 1", got, want)
		}
	})
	t.Run("within a step as per packet", func(t *testing.T) {
		stepped := g
		stepped.Step = time.Hour
		a, b := NewLink(Direction{Burst: g}, 5), NewLink(Direction{Burst: stepped}, 5)
		for i := range 10000 {
			at := t0.Add(time.Duration(i) * time.Millisecond)
			if ca, cb := a.admitCause(at), b.admitCause(at); ca != cb {
				t.Fatalf("datagram %d: %v per packet, %v with a step of an hour", i, ca, cb)
			}
		}
	})
}

// admitCause admits a 100-byte datagram at now and returns its fate.
func (l *Link) admitCause(now time.Time) Cause {
	_, c := l.Admit(now, 100)
	return c
}

func TestDirectionValidate(t *testing.T) {
	tests := []struct {
		name string
		d    Direction
		ok   bool
	}{
		{"zero", Direction{}, true},
		{"full", Direction{Delay: time.Second, Jitter: time.Millisecond, LossPct: 5, RateKbit: 20, QueueLimit: 10, Burst: GilbertElliott{P: 1, R: 10}}, true},
		{"negative delay", Direction{Delay: -1}, false},
		{"negative jitter", Direction{Jitter: -1}, false},
		{"loss over 100", Direction{LossPct: 101}, false},
		{"loss NaN", Direction{LossPct: math.NaN()}, false},
		{"negative rate", Direction{RateKbit: -1}, false},
		{"infinite rate", Direction{RateKbit: math.Inf(1)}, false},
		{"negative queue", Direction{QueueLimit: -1}, false},
		{"overhead", Direction{Overhead: -2}, false},
		{"ge p without r", Direction{Burst: GilbertElliott{P: 1}}, false},
		{"ge over 100", Direction{Burst: GilbertElliott{P: 1, R: 200}}, false},
		{"ge step", Direction{Burst: GilbertElliott{P: 1, R: 10, Step: time.Millisecond}}, true},
		{"ge negative step", Direction{Burst: GilbertElliott{P: 1, R: 10, Step: -1}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.d.Validate(); (err == nil) != tt.ok {
				t.Errorf("Validate() = %v, want ok=%v", err, tt.ok)
			}
		})
	}
}

func TestCauseString(t *testing.T) {
	for c, want := range map[Cause]string{Kept: "kept", DropRandom: "random", DropBurst: "burst", DropQueue: "queue", Cause(9): "cause(9)"} {
		if c.String() != want {
			t.Errorf("%d.String() = %q, want %q", int(c), c.String(), want)
		}
	}
}

func TestMeanLossPct(t *testing.T) {
	tests := []struct {
		d    Direction
		want float64
	}{
		{Direction{}, 0},
		{Direction{LossPct: 10}, 10},
		{Direction{Burst: GilbertElliott{P: 1, R: 9}}, 10},
		{Direction{LossPct: 10, Burst: GilbertElliott{P: 1, R: 9}}, 19},
		{Direction{Burst: GilbertElliott{LossGood: 2}}, 2},
	}
	for _, tt := range tests {
		if got := tt.d.MeanLossPct(); math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("%+v: MeanLossPct() = %v, want %v", tt.d, got, tt.want)
		}
	}
}
