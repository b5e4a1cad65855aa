package backoff

import (
	"testing"
	"time"
)

func TestBackoffDelay(t *testing.T) {
	half := func() float64 { return 0.5 }
	zero := func() float64 { return 0 }
	almostOne := func() float64 { return 0.999999 }
	tests := []struct {
		name    string
		b       Backoff
		attempt int
		want    time.Duration
	}{
		{"defaults first, no jitter", Backoff{Jitter: -1}, 0, 100 * time.Millisecond},
		{"defaults second, no jitter", Backoff{Jitter: -1}, 1, 200 * time.Millisecond},
		{"defaults fifth, no jitter", Backoff{Jitter: -1}, 4, 1600 * time.Millisecond},
		{"capped at default max", Backoff{Jitter: -1}, 20, 30 * time.Second},
		{"huge attempt stays capped", Backoff{Jitter: -1}, 1 << 30, 30 * time.Second},
		{"negative attempt is first", Backoff{Jitter: -1}, -3, 100 * time.Millisecond},
		{"custom base factor max", Backoff{Base: time.Second, Factor: 3, Max: 10 * time.Second, Jitter: -1}, 2, 9 * time.Second},
		{"custom cap", Backoff{Base: time.Second, Factor: 3, Max: 10 * time.Second, Jitter: -1}, 3, 10 * time.Second},
		{"factor below 1 means 2", Backoff{Factor: 0.5, Jitter: -1}, 2, 400 * time.Millisecond},
		{"default jitter, rand 0: half", Backoff{Rand: zero}, 1, 100 * time.Millisecond},
		{"default jitter, rand 0.5: three quarters", Backoff{Rand: half}, 1, 150 * time.Millisecond},
		{"default jitter, rand ~1: below full", Backoff{Rand: almostOne}, 1, 199999900 * time.Nanosecond},
		{"full jitter, rand 0: zero", Backoff{Jitter: 1, Rand: zero}, 3, 0},
		{"full jitter capped", Backoff{Jitter: 5, Rand: half, Max: time.Second}, 30, 500 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.b.Delay(tt.attempt)
			if d := got - tt.want; d < -time.Microsecond || d > time.Microsecond {
				t.Fatalf("Delay(%d) = %v, want %v", tt.attempt, got, tt.want)
			}
		})
	}
}

func TestBackoffNeverExceedsMax(t *testing.T) {
	b := Backoff{Max: 2 * time.Second}
	for i := 0; i < 100; i++ {
		if d := b.Delay(i); d < 0 || d > 2*time.Second {
			t.Fatalf("Delay(%d) = %v outside [0, 2s]", i, d)
		}
	}
}
