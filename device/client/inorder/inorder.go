// Package inorder is a test helper: a subscriber's message handler that
// checks a stream of counters (per topic, messages whose payloads are 0, 1,
// 2, ... in publish order) arrives complete and in order, with duplicates
// only as QoS 1 allows. The fault tests of issue 11 use it.
//
// It lives next to the client whose messages it counts, in a package of its
// own because device/client's internal tests cannot import it.
package inorder

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quiot/quiot/device/client"
)

// Options are a Counter's settings.
type Options struct {
	// RepeatsByValue also takes a counter below the one due next for a
	// duplicate when client.Deduper does not recognise it: a publisher that
	// publishes a message again on its own (not through a spool) stamps a new
	// send time, so the broker's copy is a new message. Default false: such
	// a repeat is an error (a reordering or an unrecognisable duplicate).
	RepeatsByValue bool
}

// Counter counts the messages of a subscription. Its Handle method is the
// subscriber's handler; everything else waits for or reports what it saw.
// A gap announcement, a payload that is no counter, or a counter other than
// the one due next (after duplicates) is an error that fails the next Wait
// or Check. It is safe for concurrent use.
type Counter struct {
	opts    Options
	mu      sync.Mutex
	dedup   client.Deduper
	next    map[string]int // topic -> the counter due next (= distinct messages so far)
	total   int            // distinct messages on all topics
	dups    int
	errs    []string
	changed chan struct{} // closed and replaced on every message
}

// New returns a Counter that has seen nothing.
func New(o Options) *Counter {
	return &Counter{opts: o, next: map[string]int{}, changed: make(chan struct{})}
}

// Handle takes one delivered message.
func (c *Counter) Handle(m client.Message) {
	c.mu.Lock()
	defer func() {
		close(c.changed)
		c.changed = make(chan struct{})
		c.mu.Unlock()
	}()
	if m.Gap {
		c.errs = append(c.errs, fmt.Sprintf("gap announced on %s before seq %d", m.Topic, m.Seq))
		return
	}
	if c.dedup.Duplicate(&m) {
		c.dups++
		return
	}
	i, err := strconv.Atoi(string(m.Payload))
	if err != nil {
		c.errs = append(c.errs, fmt.Sprintf("%s: bad payload %q", m.Topic, m.Payload))
		return
	}
	want := c.next[m.Topic]
	switch {
	case i == want:
		c.next[m.Topic] = i + 1
		c.total++
	case i >= 0 && i < want && c.opts.RepeatsByValue:
		c.dups++
	default:
		c.errs = append(c.errs, fmt.Sprintf("%s: got #%d, want #%d (a gap, reordering or an unrecognisable duplicate)", m.Topic, i, want))
	}
}

// Total returns how many distinct messages arrived on all topics.
func (c *Counter) Total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.total
}

// Err returns the errors seen so far joined into one, or nil.
func (c *Counter) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.errLocked()
}

func (c *Counter) errLocked() error {
	if len(c.errs) == 0 {
		return nil
	}
	return fmt.Errorf("subscriber: %s", strings.Join(c.errs, "; "))
}

// Dups returns how many duplicates were removed.
func (c *Counter) Dups() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dups
}

// WaitTotal waits until n distinct messages arrived on all topics; it fails
// the test on an error or after timeout.
func (c *Counter) WaitTotal(t testing.TB, n int, timeout time.Duration) {
	t.Helper()
	c.wait(t, "all topics", func() int { return c.total }, n, timeout)
}

// WaitTopic waits until n distinct messages arrived on topic; it fails the
// test on an error or after timeout.
func (c *Counter) WaitTopic(t testing.TB, topic string, n int, timeout time.Duration) {
	t.Helper()
	c.wait(t, topic, func() int { return c.next[topic] }, n, timeout)
}

// wait waits until got() (called under c.mu) reaches n.
func (c *Counter) wait(t testing.TB, what string, got func() int, n int, timeout time.Duration) {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		c.mu.Lock()
		have, ch, err := got(), c.changed, c.errLocked()
		c.mu.Unlock()
		if err != nil {
			t.Fatal(err)
		}
		if have >= n {
			return
		}
		select {
		case <-ch:
		case <-deadline.C:
			t.Fatalf("subscriber counted %d of %d messages (%s) in %v", have, n, what, timeout)
		}
	}
}

// Check verifies the end state: no error, and exactly published[topic]
// distinct messages on each topic named.
func (c *Counter) Check(t testing.TB, published map[string]int) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.errLocked(); err != nil {
		t.Fatal(err)
	}
	for tp, n := range published {
		if c.next[tp] != n {
			t.Errorf("%s: subscriber got %d messages, publisher accepted %d", tp, c.next[tp], n)
		}
	}
	t.Logf("delivered %d distinct messages, %d duplicates removed", c.total, c.dups)
}
