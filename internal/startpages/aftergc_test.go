package startpages

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// TestPacer: a collection is followed by a give-back only once Every has
// passed since the last one, the start-up give-back included.
func TestPacer(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 21, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	tests := []struct {
		name  string
		every time.Duration
		gave  bool  // a give-back at t0 before the collections
		gcs   []int // seconds after t0 at which collections end
		want  []bool
	}{
		{"first collection, no give-back before", 30 * time.Second, false, []int{1}, []bool{true}},
		{"too soon after start-up", 30 * time.Second, true, []int{10, 29, 30, 31}, []bool{false, false, true, false}},
		{"once a minute", 30 * time.Second, true, []int{60, 120, 130, 180}, []bool{true, true, false, true}},
		{"every cycle", 0, true, []int{0, 1, 1}, []bool{true, true, true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &Pacer{Every: tt.every}
			if tt.gave {
				p.Gave(t0)
			}
			for i, s := range tt.gcs {
				if got := p.Due(at(s)); got != tt.want[i] {
					t.Errorf("collection at %d s: Due = %v, want %v", s, got, tt.want[i])
				}
			}
		})
	}
}

// TestNotifyGC: each collection is signalled, until stopped.
func TestNotifyGC(t *testing.T) {
	gcs := make(chan struct{}, 1)
	var stopped atomic.Bool
	notifyGC(gcs, &stopped)
	for range 3 {
		runtime.GC()
		<-gcs // the finalizer runs after the cycle; the test's timeout bounds it
	}
	stopped.Store(true)
}

// TestAfterGC: a collection gives the pages back and reports it.
func TestAfterGC(t *testing.T) {
	got := make(chan int64, 16)
	stop := AfterGC(0, func(n int64, err error) {
		if err != nil {
			t.Error(err)
		}
		got <- n
	})
	defer stop()
	for {
		runtime.GC()
		select {
		case n := <-got:
			if n == 0 {
				t.Fatal("AfterGC released no mapping of the executable")
			}
			return
		case <-time.After(100 * time.Millisecond): // another collection, in case the finalizer ran late
		}
	}
}
