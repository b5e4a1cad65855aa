package lograte

import (
	"testing"
	"time"
)

func TestLimiter(t *testing.T) {
	now := time.Unix(1000, 0)
	l := &Limiter{Burst: 2, Window: time.Minute, Now: func() time.Time { return now }}
	steps := []struct {
		name       string
		advance    time.Duration
		key        string
		ok         bool
		suppressed uint64
	}{
		{"first", 0, "a", true, 0},
		{"second", time.Second, "a", true, 0},
		{"over the burst", time.Second, "a", false, 0},
		{"still over", time.Second, "a", false, 0},
		{"another key has its own window", 0, "b", true, 0},
		{"next window reports the suppressed lines", time.Minute, "a", true, 2},
		{"then counts from zero", 0, "a", true, 0},
		{"a clock going back starts a new window", -time.Hour, "a", true, 0},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			now = now.Add(s.advance)
			ok, n := l.Allow(s.key)
			if ok != s.ok || n != s.suppressed {
				t.Errorf("Allow(%q) = %v, %d; want %v, %d", s.key, ok, n, s.ok, s.suppressed)
			}
		})
	}
}

func TestLimiterZeroValue(t *testing.T) {
	var l Limiter
	for i := range DefaultBurst {
		if ok, _ := l.Allow("k"); !ok {
			t.Fatalf("line %d held back within the default burst", i)
		}
	}
	if ok, _ := l.Allow("k"); ok {
		t.Error("line beyond the default burst let through")
	}
}
