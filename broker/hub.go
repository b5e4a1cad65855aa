package broker

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/quiot/quiot/internal/topic"
	"github.com/quiot/quiot/internal/wire"
)

// Message is one published message as the broker holds it. After Publish
// accepts it, it is shared and must not be modified.
type Message struct {
	// Topic is the topic name.
	Topic string
	// Payload is the message body; Publish keeps the slice (no copy).
	Payload []byte
	// QoS is the publisher's quality of service (0 or 1; MQTT's 2 is
	// accepted and treated as 1).
	QoS byte
	// Retain makes the message the topic's retained message; an empty
	// payload with Retain clears it.
	Retain bool
	// Time is the publisher's send time, Unix ns; 0 = unknown.
	Time int64
	// Seq is set by the broker: one counter for all topics, in acceptance order.
	Seq uint64
	// Origin is the protocol it came in by: ProtoH3 ("h3"), ProtoTCP
	// ("tcp": HTTP/1.1 or HTTP/2) or "mqtt".
	Origin string
	// Identity is the authenticated publisher ("" = anonymous).
	Identity string
}

// Errors of Publish and subscribe, tested with errors.Is.
var (
	// ErrBadTopic: empty level, wildcard in a topic name, NUL, too long or deep.
	ErrBadTopic = errors.New("bad topic")
	// ErrBadFilter: a malformed subscription filter.
	ErrBadFilter = errors.New("bad filter")
	// ErrTooLarge: the payload exceeds Limits.MaxPayload.
	ErrTooLarge = errors.New("payload too large")
	// ErrBadQoS: QoS above 2.
	ErrBadQoS = errors.New("bad qos")
	// ErrShuttingDown: the broker no longer accepts work.
	ErrShuttingDown = errors.New("broker shutting down")
	// ErrRetainedFull: keeping the message as retained would exceed
	// Limits.RetainedBytes (clearing retained messages always works).
	ErrRetainedFull = errors.New("retained message store full")
	// ErrTooManySubscriptions: a connection's subscription limit is reached.
	ErrTooManySubscriptions = errors.New("too many subscriptions")
)

// entry is a message in history.
type entry struct {
	m       *Message
	evicted bool
}

// topicState is one topic's history and retained message.
type topicState struct {
	hist     ring[*entry]
	retained *Message
	// evictedMax is the highest sequence number dropped from hist.
	evictedMax uint64
	// retainedSeq is the cluster's sequence number of the last retained
	// message (or clearing) seen for the topic (federation.go).
	retainedSeq uint64
}

// hub is the topic space: history, retained messages, subscribers, taps.
type hub struct {
	limits Limits
	tl     topic.Limits
	stats  *counters

	mu       sync.Mutex
	seq      uint64
	closing  bool
	topics   map[string]*topicState
	order    ring[*entry] // all history entries, oldest first (lazily pruned)
	stubs    int          // evicted entries still in order
	histSize int64        // payload bytes in history
	// retainedSize and retainedCount measure the retained messages.
	retainedSize  int64
	retainedCount int
	histMsgs      int
	// forgotten is the highest sequence number of a message lost with a
	// topic that was dropped from the map (history emptied, no retained).
	forgotten uint64
	exact     map[string][]*subscriber
	wild      []*subscriber
	nsubs     int
	// queued is the memory of all subscriber queues (Limits.QueueBytesTotal).
	queued byteBudget
	taps   []func(*Message)
	// persist is the durable store (nil: memory only; see persist.go);
	// forget collects the history removals not yet handed to it.
	persist Store
	forget  []ForgetOp
	// fed is the federation link (nil: this broker alone; federation.go).
	fed     Federation
	applied uint64 // with persist: the last sequence number applied
}

func newHub(l Limits, c *counters) *hub {
	return &hub{
		limits: l,
		tl:     topic.Limits{MaxLength: l.MaxTopicLength, MaxLevels: l.MaxTopicLevels},
		stats:  c,
		topics: map[string]*topicState{},
		exact:  map[string][]*subscriber{},
		queued: byteBudget{max: l.QueueBytesTotal},
	}
}

func (h *hub) addTap(fn func(*Message)) {
	h.mu.Lock()
	h.taps = append(h.taps, fn)
	h.mu.Unlock()
}

func (h *hub) validate(m *Message) error {
	if err := h.tl.ValidateName(m.Topic); err != nil {
		return fmt.Errorf("%w: %v", ErrBadTopic, err)
	}
	if len(m.Payload) > h.limits.MaxPayload {
		return fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, len(m.Payload), h.limits.MaxPayload)
	}
	if m.QoS > 2 {
		return fmt.Errorf("%w: %d", ErrBadQoS, m.QoS)
	}
	return nil
}

func (h *hub) publish(ctx context.Context, m Message) (uint64, error) {
	if err := h.validate(&m); err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	msg := &m
	h.mu.Lock()
	if h.closing {
		h.mu.Unlock()
		return 0, ErrShuttingDown
	}
	ts := h.topics[msg.Topic]
	if msg.Retain && len(msg.Payload) > 0 {
		size := h.retainedSize + msgCost(msg)
		if ts != nil && ts.retained != nil {
			size -= msgCost(ts.retained)
		}
		if size > h.limits.RetainedBytes {
			h.mu.Unlock()
			return 0, fmt.Errorf("%w: %d bytes held, limit %d", ErrRetainedFull, h.retainedSize, h.limits.RetainedBytes)
		}
	}
	if h.sequenced() {
		return h.publishSequenced(ctx, msg) // federation.go: the cluster numbers it
	}
	h.seq++
	msg.Seq = h.seq
	if h.persist != nil {
		return h.persistPublish(ctx, msg) // applied once committed
	}
	h.apply(msg, true)
	fc := h.forward(msg)
	h.mu.Unlock()
	h.stats.proto(msg.Origin).in.Add(1)
	return waitForward(ctx, msg, fc)
}

// apply puts an accepted message into the topic space: retained message
// and history, then, when live, subscriber queues and taps (not live: a
// message the subscribers have no business with, see
// Broker.ApplySequencedHistory). h.mu held.
func (h *hub) apply(msg *Message, live bool) {
	ts := h.topics[msg.Topic]
	if ts == nil {
		ts = &topicState{}
		h.topics[msg.Topic] = ts
	}
	if msg.Retain {
		if ts.retained != nil {
			h.retainedSize -= msgCost(ts.retained)
			h.retainedCount--
			ts.retained = nil
		}
		if len(msg.Payload) > 0 {
			ts.retained = msg
			h.retainedSize += msgCost(msg)
			h.retainedCount++
		}
	}
	h.store(ts, msg)
	if !live {
		return
	}
	for _, s := range h.exact[msg.Topic] {
		s.enqueue(msg)
	}
	for _, s := range h.wild {
		if topic.Match(s.filter, msg.Topic) {
			s.enqueue(msg)
		}
	}
	for _, fn := range h.taps {
		fn(msg)
	}
}

// store appends msg to its topic's history and enforces the bounds. h.mu held.
func (h *hub) store(ts *topicState, msg *Message) {
	if h.limits.HistoryPerTopic == 0 {
		ts.evictedMax = msg.Seq
		h.noteEvict(msg.Topic, msg.Seq, msg.Seq)
		h.maybeForget(msg.Topic, ts)
		return
	}
	e := &entry{m: msg}
	ts.hist.push(e)
	h.order.push(e)
	h.histSize += msgCost(msg)
	h.histMsgs++
	for ts.hist.len() > h.limits.HistoryPerTopic {
		old := ts.hist.pop()
		h.evict(ts, old)
		h.stubs++
	}
	for h.histSize > h.limits.HistoryBytes && h.order.len() > 0 {
		old := h.order.pop()
		if old.evicted {
			h.stubs--
			continue
		}
		ots := h.topics[old.m.Topic]
		ots.hist.pop() // the globally oldest entry is its topic's oldest
		t := old.m.Topic
		h.evict(ots, old)
		h.maybeForget(t, ots)
	}
	for h.order.len() > 0 && h.order.front().evicted {
		h.order.pop()
		h.stubs--
	}
	if h.stubs > 1024 && h.stubs > h.order.len()/2 {
		var n ring[*entry]
		for i := 0; i < h.order.len(); i++ {
			if e := h.order.at(i); !e.evicted {
				n.push(e)
			}
		}
		h.order, h.stubs = n, 0
	}
}

// entryOverhead approximates the memory of a history entry beyond its
// payload and topic (Message, entry and ring slots), so that empty payloads
// are bounded too.
const entryOverhead = 96

func msgCost(m *Message) int64 { return int64(len(m.Payload)+len(m.Topic)) + entryOverhead }

func (h *hub) evict(ts *topicState, e *entry) {
	e.evicted = true
	ts.evictedMax = max(ts.evictedMax, e.m.Seq)
	h.noteEvict(e.m.Topic, e.m.Seq, ts.evictedMax)
	h.histSize -= msgCost(e.m)
	h.histMsgs--
	e.m = nil
	ts.hist.shrink()
}

// maybeForget drops a topic that holds nothing. h.mu held.
func (h *hub) maybeForget(name string, ts *topicState) {
	if ts.hist.len() == 0 && ts.retained == nil {
		h.forgotten = max(h.forgotten, ts.evictedMax)
		delete(h.topics, name)
		h.noteForgetTopic(name)
	}
}

// start registers a subscriber and returns what it must receive before live
// messages: retained messages (since == nil) or the history after *since,
// with gap announcements. otherRun says that *since is a resume point of
// another broker run (its epoch is not ours): the restart is announced and
// all history replayed. h.mu is held throughout, so nothing is missed or
// duplicated between the snapshot and live delivery.
func (h *hub) start(s *subscriber, since *uint64, otherRun bool) ([]wire.Frame, error) {
	out, since, otherRun, release, err := h.cover(s.filter, since, otherRun) // federation.go
	if err != nil {
		return nil, err
	}
	defer release() // after the subscription's own interest below
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closing {
		return nil, ErrShuttingDown
	}
	var msgs []*Message
	if since == nil {
		for name, ts := range h.topics {
			if ts.retained != nil && topic.Match(s.filter, name) {
				msgs = append(msgs, ts.retained)
			}
		}
		slices.SortFunc(msgs, func(a, b *Message) int { return cmpU64(a.Seq, b.Seq) })
		for _, m := range msgs {
			out = append(out, frameOf(m, wire.FlagRetained))
		}
	} else {
		from := *since
		if otherRun || from > h.seq && !h.sequenced() { // sequenced: this broker may lag behind the cluster
			// The broker restarted (sequence numbers are in memory): say so,
			// then replay all it has.
			out = append(out, wire.GapFrame(wire.Gap{From: max(from+1, from)})) // no wrap to 0 (unknown)
			from = 0
		}
		s.after = from // live messages up to the resume point were seen
		if h.forgotten > from {
			out = append(out, wire.GapFrame(wire.Gap{From: from + 1, To: h.forgotten}))
		}
		for name, ts := range h.topics {
			if !topic.Match(s.filter, name) {
				continue
			}
			if ts.evictedMax > from {
				out = append(out, wire.GapFrame(wire.Gap{Topic: name, From: from + 1, To: ts.evictedMax}))
			}
			for i := ts.hist.len() - 1; i >= 0; i-- {
				e := ts.hist.at(i)
				if e.m.Seq <= from {
					break
				}
				msgs = append(msgs, e.m)
			}
		}
		slices.SortFunc(msgs, func(a, b *Message) int { return cmpU64(a.Seq, b.Seq) })
		for _, m := range msgs {
			out = append(out, frameOf(m, 0))
		}
	}
	s.total = &h.queued
	if topic.IsFilter(s.filter) {
		h.wild = append(h.wild, s)
	} else {
		h.exact[s.filter] = append(h.exact[s.filter], s)
	}
	h.nsubs++
	h.interest(s.filter, 1)
	return out, nil
}

// stop unregisters a subscriber.
func (h *hub) stop(s *subscriber) {
	h.mu.Lock()
	defer h.mu.Unlock()
	remove := func(l []*subscriber) ([]*subscriber, bool) {
		for i, x := range l {
			if x == s {
				return slices.Delete(l, i, i+1), true
			}
		}
		return l, false
	}
	var ok bool
	if topic.IsFilter(s.filter) {
		h.wild, ok = remove(h.wild)
	} else {
		var l []*subscriber
		l, ok = remove(h.exact[s.filter])
		if len(l) == 0 {
			delete(h.exact, s.filter)
		} else {
			h.exact[s.filter] = l
		}
	}
	if ok {
		h.nsubs--
		h.interest(s.filter, -1)
	}
	s.release()
}

// shutdown refuses new work and ends every subscription once its queue is
// drained.
func (h *hub) shutdown() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closing = true
	for _, l := range h.exact {
		for _, s := range l {
			s.finish()
		}
	}
	for _, s := range h.wild {
		s.finish()
	}
}

func (h *hub) isClosing() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.closing
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func frameOf(m *Message, flags byte) wire.Frame {
	return wire.Frame{Seq: m.Seq, Time: m.Time, Topic: m.Topic, Payload: m.Payload, Flags: flags}
}

// byteBudget counts the memory of all subscriber queues against a bound.
// Only enqueue adds to it, under hub.mu, so a check and its add are not
// raced; releases may come from any goroutine.
type byteBudget struct {
	max int64
	n   atomic.Int64
}

// subscriber is one live subscription with its queue, bounded in messages
// (Limits.QueueLength) and in bytes (Limits.QueueBytes, and with the other
// subscribers Limits.QueueBytesTotal).
type subscriber struct {
	filter   string
	limit    int
	maxBytes int64
	policy   QueuePolicy
	stats    *counters
	// total is the hub's budget of all queues (set by hub.start; nil: none).
	total *byteBudget

	notify chan struct{} // capacity 1: "something changed"

	mu       sync.Mutex
	q        ring[*Message]
	bytes    int64                // cost of the queued messages and of the batch being written
	sending  int64                // cost of the batch being written (taken, not yet written)
	gaps     map[string]*wire.Gap // losses to announce, by topic
	gapOrder []string
	done     bool   // no more messages will be queued
	cut      bool   // ended by the Disconnect policy
	after    uint64 // the resume point: messages up to it are not queued
	dropped  uint64
}

func newSubscriber(filter string, l Limits, c *counters) *subscriber {
	maxBytes := l.QueueBytes
	if maxBytes <= 0 {
		maxBytes = math.MaxInt64
	}
	return &subscriber{filter: filter, limit: l.QueueLength, maxBytes: maxBytes, policy: l.QueuePolicy, stats: c, notify: make(chan struct{}, 1)}
}

func (s *subscriber) signal() {
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// full reports whether a message of cost bytes does not fit. s.mu held.
func (s *subscriber) full(cost int64) bool {
	return s.q.len() >= s.limit || s.bytes+cost > s.maxBytes ||
		s.total != nil && s.total.n.Load()+cost > s.total.max
}

// charge adds n bytes to the subscriber's and the total count. s.mu held.
func (s *subscriber) charge(n int64) {
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
func (s *subscriber) enqueue(m *Message) {
	s.mu.Lock()
	if s.done || m.Seq <= s.after {
		s.mu.Unlock()
		return
	}
	cost := msgCost(m)
	for s.full(cost) {
		if s.policy == Disconnect {
			s.done, s.cut = true, true
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
func (s *subscriber) noteGap(m *Message) {
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
func (s *subscriber) finish() {
	s.mu.Lock()
	s.done = true
	s.mu.Unlock()
	s.signal()
}

// take moves queued gaps and messages into the given slices. end reports
// that the subscription is over once these are written; cut that it was
// ended by the Disconnect policy.
func (s *subscriber) take(gaps []wire.Gap, msgs []*Message) (_ []wire.Gap, _ []*Message, end, cut bool) {
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

// written releases the bytes of the batch take returned, once it is
// written to the client: until then they count against the queue's bounds
// (a client that does not read holds them in the writer).
func (s *subscriber) written() {
	s.mu.Lock()
	s.charge(-s.sending)
	s.sending = 0
	s.mu.Unlock()
}

// release returns all the subscriber's bytes to the total when it stops;
// nothing is queued after.
func (s *subscriber) release() {
	s.mu.Lock()
	s.done = true
	if s.total != nil {
		s.total.n.Add(-s.bytes)
	}
	s.bytes, s.sending = 0, 0
	s.q = ring[*Message]{}
	s.mu.Unlock()
}

func (s *subscriber) depth() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.q.len()
}
