package space

import (
	"math"
	"sync"
	"sync/atomic"

	"github.com/quiot/quiot/internal/wire"
)

// byteBudget counts the memory of all subscriber queues against a bound.
// Only enqueue adds to it, under Space.mu, so a check and its add are not
// raced; releases may come from any goroutine.
type byteBudget struct {
	max int64
	n   atomic.Int64
}

// Subscriber is one live subscription with its queue, bounded in messages
// (Limits.QueueLength) and in bytes (Limits.QueueBytes, and with the other
// subscribers Limits.QueueBytesTotal).
type Subscriber struct {
	filter   string
	limit    int
	maxBytes int64
	policy   QueuePolicy
	stats    *counters
	// total is the space's budget of all queues (set by Space.start; nil: none).
	total *byteBudget

	notify chan struct{} // capacity 1: "something changed"
	cutOff chan struct{} // closed when the Disconnect policy ends the subscription

	mu       sync.Mutex
	q        ring[*Message]
	bytes    int64                // cost of the queued messages and of the batch being written
	sending  int64                // cost of the batch being written (taken, not yet written)
	gaps     map[string]*wire.Gap // losses to announce, by topic
	gapOrder []string
	done     bool   // no more messages will be queued
	cut      bool   // ended by the Disconnect policy
	after    uint64 // the resume point: messages up to it are not queued
	// hist is the subscription's paced history replay (nil: none), ended
	// with it. Space.mu guards it.
	hist *HistoryReplay
	// cluster is the subscription's paced replay from the cluster (nil:
	// none), closed with it. Space.mu guards it.
	cluster ClusterReplay
	dropped uint64
}

func newSubscriber(filter string, l Limits, c *counters) *Subscriber {
	maxBytes := l.QueueBytes
	if maxBytes <= 0 {
		maxBytes = math.MaxInt64
	}
	return &Subscriber{filter: filter, limit: l.QueueLength, maxBytes: maxBytes, policy: l.QueuePolicy, stats: c, notify: make(chan struct{}, 1), cutOff: make(chan struct{})}
}

// Notify receives when something changed: messages or gaps were queued,
// or the subscription ended (see Take).
func (s *Subscriber) Notify() <-chan struct{} { return s.notify }

// CutOff is closed when the Disconnect policy ends the subscription (its
// queue was full), so that a writer blocked on a client that does not read
// can give up; Take still returns what is left, with cut set.
func (s *Subscriber) CutOff() <-chan struct{} { return s.cutOff }

// Filter is the subscription's topic filter.
func (s *Subscriber) Filter() string { return s.filter }

func (s *Subscriber) signal() {
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// full reports whether a message of cost bytes does not fit. s.mu held.
func (s *Subscriber) full(cost int64) bool {
	return s.q.len() >= s.limit || s.bytes+cost > s.maxBytes ||
		s.total != nil && s.total.n.Load()+cost > s.total.max
}

// charge adds n bytes to the subscriber's and the total count. s.mu held.
func (s *Subscriber) charge(n int64) {
	s.bytes += n
	if s.total != nil {
		s.total.n.Add(n)
	}
}

// enqueue adds a message without ever blocking the publisher. When the
// queue is full (in messages, its bytes or the total bytes), the policy
// decides: Disconnect ends the subscription; DropOldest drops queued
// messages, oldest first, until the new one fits, or the new one itself
// when none is queued. Every loss is announced as a gap.
func (s *Subscriber) enqueue(m *Message) {
	s.mu.Lock()
	if s.done || m.Seq <= s.after {
		s.mu.Unlock()
		return
	}
	cost := msgCost(m)
	for s.full(cost) {
		if s.policy == Disconnect {
			s.done, s.cut = true, true
			close(s.cutOff)
			s.mu.Unlock()
			s.stats.cutOff.Add(1)
			s.signal()
			return
		}
		s.dropped++
		s.stats.dropped.Add(1)
		if s.q.len() == 0 {
			s.noteGap(m)
			s.mu.Unlock()
			s.signal()
			return
		}
		old := s.q.pop()
		s.charge(-msgCost(old))
		s.noteGap(old)
	}
	s.q.push(m)
	s.charge(cost)
	s.mu.Unlock()
	s.signal()
}

// noteGap records the loss of m. s.mu held.
func (s *Subscriber) noteGap(m *Message) {
	if s.gaps == nil {
		s.gaps = map[string]*wire.Gap{}
	}
	g := s.gaps[m.Topic]
	if g == nil {
		if len(s.gaps) >= 64 {
			// Too many topics to list: one "several topics" gap.
			g = s.gaps[""]
			if g == nil {
				g = &wire.Gap{From: m.Seq}
				s.gaps[""] = g
				s.gapOrder = append(s.gapOrder, "")
			}
		} else {
			g = &wire.Gap{Topic: m.Topic, From: m.Seq}
			s.gaps[m.Topic] = g
			s.gapOrder = append(s.gapOrder, m.Topic)
		}
	}
	g.From = min(g.From, m.Seq)
	g.To = max(g.To, m.Seq)
}

// finish ends the subscription after what is queued.
func (s *Subscriber) finish() {
	s.mu.Lock()
	s.done = true
	s.mu.Unlock()
	s.signal()
}

// Take moves queued gaps and messages into the given slices. end reports
// that the subscription is over once these are written; cut that it was
// ended by the Disconnect policy. Call it after a signal on Notify; call
// Written once the batch is written.
func (s *Subscriber) Take(gaps []wire.Gap, msgs []*Message) (_ []wire.Gap, _ []*Message, end, cut bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range s.gapOrder {
		gaps = append(gaps, *s.gaps[t])
	}
	if len(s.gapOrder) > 0 {
		s.gaps, s.gapOrder = nil, nil
	}
	s.charge(-s.sending) // the previous batch, if written() was not called
	s.sending = 0
	for s.q.len() > 0 {
		m := s.q.pop()
		s.sending += msgCost(m)
		msgs = append(msgs, m)
	}
	s.q.shrink()
	return gaps, msgs, s.done, s.cut
}

// Written releases the bytes of the batch Take returned, once it is
// written to the client: until then they count against the queue's bounds
// (a client that does not read holds them in the writer).
func (s *Subscriber) Written() {
	s.mu.Lock()
	s.charge(-s.sending)
	s.sending = 0
	s.mu.Unlock()
}

// release returns all the subscriber's bytes to the total when it stops;
// nothing is queued after.
func (s *Subscriber) release() {
	s.mu.Lock()
	s.done = true
	if s.total != nil {
		s.total.n.Add(-s.bytes)
	}
	s.bytes, s.sending = 0, 0
	s.q = ring[*Message]{}
	s.mu.Unlock()
}

func (s *Subscriber) depth() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.q.len()
}
