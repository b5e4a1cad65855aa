// Package lograte bounds log lines that clients can cause: a refused
// request is logged, but a client refused in a loop must not flood the
// log. A Limiter lets through at most Burst lines per key in each Window
// and counts the lines it held back; the next line let through reports
// that count ("suppressed"), so nothing is lost silently.
//
// It is safe for concurrent use and runs no goroutine.
package lograte

import (
	"sync"
	"time"
)

// Defaults of a Limiter's fields.
const (
	// DefaultBurst is the lines per key and window when Burst is 0.
	DefaultBurst = 10
	// DefaultWindow is the window when Window is 0.
	DefaultWindow = time.Minute
)

// Limiter decides which lines of a key are logged. The zero value is
// ready to use with the defaults.
type Limiter struct {
	// Burst is the number of lines of one key logged per window; 0 means
	// DefaultBurst.
	Burst int
	// Window is the length of a window; 0 means DefaultWindow.
	Window time.Duration
	// Now returns the time; nil means time.Now (tests set a fake clock).
	Now func() time.Time

	mu   sync.Mutex
	keys map[string]*window
}

// window is one key's current window.
type window struct {
	start      time.Time
	logged     int
	suppressed uint64
}

// Allow reports whether a line of key may be logged now, and if so how
// many lines of key were suppressed since the last one logged (to be added
// to the line). Keys are expected to be few (a fixed set of reasons).
func (l *Limiter) Allow(key string) (ok bool, suppressed uint64) {
	now := time.Now
	if l.Now != nil {
		now = l.Now
	}
	t := now()
	burst, win := l.Burst, l.Window
	if burst <= 0 {
		burst = DefaultBurst
	}
	if win <= 0 {
		win = DefaultWindow
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.keys == nil {
		l.keys = map[string]*window{}
	}
	w := l.keys[key]
	if w == nil {
		w = &window{start: t}
		l.keys[key] = w
	}
	if t.Sub(w.start) >= win || t.Before(w.start) {
		w.start, w.logged = t, 0
	}
	if w.logged >= burst {
		w.suppressed++
		return false, 0
	}
	w.logged++
	suppressed, w.suppressed = w.suppressed, 0
	return true, suppressed
}
