package startpages

import (
	"runtime"
	"sync/atomic"
	"time"
)

// Pacer decides when a garbage collection is followed by a give-back:
// at most once per Every. Its zero Every gives back after every cycle.
type Pacer struct {
	Every time.Duration
	last  time.Time
	done  bool // a give-back happened: last is set
}

// Due reports whether a collection that ended at now is to be followed by
// a give-back, and if so counts it as done at now.
func (p *Pacer) Due(now time.Time) bool {
	if p.done && now.Sub(p.last) < p.Every {
		return false
	}
	p.last, p.done = now, true
	return true
}

// Gave records a give-back at now that no collection triggered (the one
// after start-up), so that the next is at least Every later.
func (p *Pacer) Gave(now time.Time) { p.last, p.done = now, true }

// AfterGC gives back the binary's read-only pages (Release) after garbage
// collections, at most once per every, and calls report with each
// Release's result. It returns a function that stops it.
//
// Why: each collection scans the goroutine stacks, and for every frame it
// reads the function's pc tables (.gopclntab); with the collector's own
// code, and the 64 KiB the kernel maps around each fault, that maps back
// about 2 MB of the binary that a publisher's loop never reads between two
// collections (docs/BENCH.md, "Start-up pages given back"). A give-back
// right after the collection returns them to the page cache until the next
// one. Cost: one read of /proc/self/maps and one madvise per mapping, then
// the minor faults of the pages the process still uses; per collection,
// not per message.
func AfterGC(every time.Duration, report func(n int64, err error)) (stop func()) {
	gcs := make(chan struct{}, 1)
	var stopped atomic.Bool
	notifyGC(gcs, &stopped)
	quit := make(chan struct{})
	p := &Pacer{Every: every}
	p.Gave(time.Now())
	go func() {
		for {
			select {
			case <-quit:
				return
			case <-gcs:
				if p.Due(time.Now()) {
					report(Release())
				}
			}
		}
	}()
	return func() {
		if stopped.CompareAndSwap(false, true) {
			close(quit)
		}
	}
}

// gcSentinel is an object whose finalizer runs once a collection has found
// it unreachable. It holds a pointer so that it is not a tiny allocation
// (tiny objects share a block, and their finalizers may never run).
type gcSentinel struct {
	_ *byte
	_ [2]uintptr
}

// notifyGC sends on gcs (without blocking) after each garbage collection
// cycle until stopped is set: a sentinel's finalizer runs after the cycle
// that freed it and arms the next sentinel.
func notifyGC(gcs chan<- struct{}, stopped *atomic.Bool) {
	s := new(gcSentinel)
	runtime.SetFinalizer(s, func(*gcSentinel) {
		if stopped.Load() {
			return
		}
		select {
		case gcs <- struct{}{}:
		default:
		}
		notifyGC(gcs, stopped)
	})
}
