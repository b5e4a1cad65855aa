package space

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
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

// Errors of Publish, Subscribe and the cluster operations, tested with
// errors.Is.
var (
	// ErrBadTopic: empty level, wildcard in a topic name, NUL, too long or deep.
	ErrBadTopic = errors.New("bad topic")
	// ErrTooLarge: the payload exceeds Limits.MaxPayload.
	ErrTooLarge = errors.New("payload too large")
	// ErrBadQoS: QoS above 2.
	ErrBadQoS = errors.New("bad qos")
	// ErrShuttingDown: the broker no longer accepts work.
	ErrShuttingDown = errors.New("broker shutting down")
	// ErrRetainedFull: keeping the message as retained would exceed
	// Limits.RetainedBytes (clearing retained messages always works).
	ErrRetainedFull = errors.New("retained message store full")
)

// Space is the topic space: history, retained messages, sequence numbers,
// subscribers and taps (see the package doc for its locking contract).
// Create it with New.
type Space struct {
	limits  Limits
	tl      topic.Limits
	stats   counters
	countIn func(origin string)

	// epoch identifies the run of sequence numbers (see internal/wire,
	// "Epoch"): random, the store's saved one, or the cluster's.
	epoch atomic.Uint64

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
	// retIdx lists the retained messages in sequence order for paced
	// replays (RetainedReplay); retStubs counts its entries replaced or
	// cleared, retGen its insertions.
	retIdx   []retEntry
	retStubs int
	retGen   uint64
	// replays are the paced history replays under way; topicList lists
	// the topics in the order they were created, for their topic gaps
	// (topicStubs: its entries of dropped topics, topicIDs: its
	// insertions; historyreplay.go).
	replays    []*HistoryReplay
	topicList  []topicRef
	topicStubs int
	topicIDs   uint64
	// forgotten is the highest sequence number of a message lost with a
	// topic that was dropped from the map (history emptied, no retained).
	forgotten uint64
	exact     map[string][]*Subscriber
	wild      []*Subscriber
	nsubs     int
	// queued is the memory of all Subscriber queues (Limits.QueueBytesTotal).
	queued byteBudget
	taps   []func(*Message)
	// holds are the taps that may hold a publisher's acknowledgement
	// (AddHoldTap); waits maps a QoS 1 or 2 message of persistPublish
	// to where committed leaves its holds (only while holds exist).
	holds []func(*Message, func(Commit))
	waits map[*Message]*pubWait
	// persist is the durable store (nil: memory only; see persist.go);
	// forget collects the history removals not yet handed to it.
	persist Store
	forget  []ForgetOp
	// fed is the federation link (nil: this broker alone; federation.go).
	fed     Federation
	applied uint64 // with persist: the last sequence number applied
}

// QueuePolicy says what happens when a Subscriber's queue is full.
type QueuePolicy int

const (
	// DropOldest discards the oldest queued messages until the new one
	// fits, or the new one when the Subscriber has none queued (its bytes
	// are in the batch being written, or the total is reached); each loss
	// is counted in Stats.Dropped and announced to the Subscriber as a gap.
	DropOldest QueuePolicy = iota
	// Disconnect ends the subscription (after a final gap frame/event).
	Disconnect
)

// String names the policy.
func (p QueuePolicy) String() string {
	if p == Disconnect {
		return "disconnect"
	}
	return "drop-oldest"
}

// Limits bound what the topic space holds. They are used as given (the
// broker's Options apply the defaults): zero HistoryPerTopic keeps no
// history.
type Limits struct {
	// MaxPayload is the largest payload in bytes.
	MaxPayload int
	// MaxTopicLength and MaxTopicLevels bound a topic or filter.
	MaxTopicLength, MaxTopicLevels int
	// HistoryPerTopic is how many messages each topic keeps for resume.
	HistoryPerTopic int
	// HistoryBytes bounds the memory of all history (Cost of each message).
	HistoryBytes int64
	// RetainedBytes bounds the memory of all retained messages (Cost).
	RetainedBytes int64
	// QueueLength is each Subscriber's queue length in messages.
	QueueLength int
	// QueueBytes bounds one Subscriber's queue with the batch being
	// written (Cost of each message; zero or less: no bound).
	QueueBytes int64
	// QueueBytesTotal bounds all subscribers' queues together.
	QueueBytesTotal int64
	// QueuePolicy applies when a Subscriber's queue is full.
	QueuePolicy QueuePolicy
}

// Config configures a Space.
type Config struct {
	// Limits bound what the space holds.
	Limits Limits
	// Federation is the link to other brokers' topic spaces (nil: none).
	Federation Federation
	// CountIn, when set, is called once for each message the space
	// accepts or applies, with its Message.Origin (the broker's
	// per-protocol counters). It must not block.
	CountIn func(origin string)
}

// counters are the space's own counters (Stats).
type counters struct {
	dropped atomic.Uint64
	cutOff  atomic.Uint64
}

// New makes an empty topic space with a random epoch. A store is attached
// with OpenStore before the space is used.
func New(c Config) *Space {
	sp := &Space{
		limits:  c.Limits,
		tl:      topic.Limits{MaxLength: c.Limits.MaxTopicLength, MaxLevels: c.Limits.MaxTopicLevels},
		countIn: c.CountIn,
		topics:  map[string]*topicState{},
		exact:   map[string][]*Subscriber{},
		queued:  byteBudget{max: c.Limits.QueueBytesTotal},
		fed:     c.Federation,
	}
	if sp.countIn == nil {
		sp.countIn = func(string) {}
	}
	sp.epoch.Store(NewEpoch())
	return sp
}

// NewEpoch returns a random non-zero epoch. It is random rather than taken
// from the clock: a Raspberry Pi has no RTC, and two runs must not share one.
func NewEpoch() uint64 {
	for {
		var b [8]byte
		_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go >= 1.24)
		if e := binary.BigEndian.Uint64(b[:]); e != 0 {
			return e
		}
	}
}

// Epoch returns the epoch of the space's sequence numbers: random for a
// new space, the saved one with a store (OpenStore), the cluster's with a
// sequencing link (SetClusterEpoch).
func (sp *Space) Epoch() uint64 { return sp.epoch.Load() }

// TopicLimits returns the bounds on topic names and filters.
func (sp *Space) TopicLimits() topic.Limits { return sp.tl }

// AddTap registers fn to run synchronously, under the space's lock, for
// every accepted message in acceptance order. fn must not block, must not
// modify the message, and must not call Publish (it would deadlock); it may
// hand the message to a goroutine.
func (sp *Space) AddTap(fn func(*Message)) {
	sp.mu.Lock()
	sp.taps = append(sp.taps, fn)
	sp.mu.Unlock()
}

// AddHoldTap registers fn to run as a tap (AddTap: synchronously, under
// the space's lock, in acceptance order; it must not block, modify the
// message or call Publish) that may hold the acknowledgement of the
// message's publisher: each Commit fn passes to hold makes Publish of a
// QoS 1 or 2 message wait until it is done, and fail with its error (the
// publisher is then not acknowledged). A QoS 0 publish does not wait.
// With a sequencing federation link the publisher's acknowledgement waits
// for the cluster, not for these commits (the message reaches the taps
// when the cluster hands it back).
func (sp *Space) AddHoldTap(fn func(m *Message, hold func(Commit))) {
	sp.mu.Lock()
	sp.holds = append(sp.holds, fn)
	sp.mu.Unlock()
}

// Validate checks m's topic, payload size and QoS as Publish does. Errors
// wrap ErrBadTopic, ErrTooLarge or ErrBadQoS.
func (sp *Space) Validate(m *Message) error {
	return sp.validate(m)
}

func (sp *Space) validate(m *Message) error {
	if err := sp.tl.ValidateName(m.Topic); err != nil {
		return fmt.Errorf("%w: %v", ErrBadTopic, err)
	}
	if len(m.Payload) > sp.limits.MaxPayload {
		return fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, len(m.Payload), sp.limits.MaxPayload)
	}
	if m.QoS > 2 {
		return fmt.Errorf("%w: %d", ErrBadQoS, m.QoS)
	}
	return nil
}

// Publish accepts a message into the topic space: it validates the topic,
// payload size and QoS, assigns the sequence number, stores history and the
// retained message, queues it for every matching Subscriber (never
// blocking), and runs the taps. With a store it is applied once committed;
// with a sequencing federation link once the cluster numbered it.
// Authorisation is the caller's job. Errors wrap ErrBadTopic, ErrTooLarge,
// ErrBadQoS, ErrRetainedFull or ErrShuttingDown.
func (sp *Space) Publish(ctx context.Context, m Message) (uint64, error) {
	if err := sp.validate(&m); err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	msg := &m
	sp.mu.Lock()
	if sp.closing {
		sp.mu.Unlock()
		return 0, ErrShuttingDown
	}
	ts := sp.topics[msg.Topic]
	if msg.Retain && len(msg.Payload) > 0 && !sp.retainedFits(ts, msg) {
		sp.mu.Unlock()
		return 0, fmt.Errorf("%w: %d bytes held, limit %d", ErrRetainedFull, sp.retainedSize, sp.limits.RetainedBytes)
	}
	if sp.sequenced() {
		return sp.publishSequenced(ctx, msg) // federation.go: the cluster numbers it
	}
	sp.seq++
	msg.Seq = sp.seq
	if sp.persist != nil {
		return sp.persistPublish(ctx, msg) // applied once committed
	}
	held := sp.apply(msg, true)
	fc := sp.forward(msg)
	sp.mu.Unlock()
	sp.countIn(msg.Origin)
	seq, err := waitForward(ctx, msg, fc)
	if err != nil {
		return seq, err
	}
	return seq, waitHeld(ctx, msg, held)
}

// pubWait is where committed leaves the holds of a message whose
// publisher waits in persistPublish.
type pubWait struct{ held []Commit }

// waitHeld waits for the commits the hold taps passed for a QoS 1 or 2
// message (AddHoldTap).
func waitHeld(ctx context.Context, msg *Message, held []Commit) error {
	if msg.QoS == 0 {
		return nil
	}
	for _, c := range held {
		select {
		case <-c.Done():
			if err := c.Err(); err != nil {
				return fmt.Errorf("couldn't hand message over: %w", err)
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// apply puts an accepted message into the topic space: retained message
// and history, then, when live, Subscriber queues and taps (not live: a
// message the subscribers have no business with, see
// ApplySequencedHistory). It returns the commits the hold taps passed
// (AddHoldTap). sp.mu held.
func (sp *Space) apply(msg *Message, live bool) (held []Commit) {
	ts := sp.topics[msg.Topic]
	if ts == nil {
		ts = sp.newTopic(msg.Topic)
	}
	if msg.Retain {
		sp.clearRetained(ts)
		if len(msg.Payload) > 0 {
			sp.setRetained(ts, msg)
		}
	}
	sp.store(ts, msg)
	if !live {
		return nil
	}
	for _, s := range sp.exact[msg.Topic] {
		s.enqueue(msg)
	}
	for _, s := range sp.wild {
		if topic.Match(s.filter, msg.Topic) {
			s.enqueue(msg)
		}
	}
	for _, fn := range sp.taps {
		fn(msg)
	}
	for _, fn := range sp.holds {
		fn(msg, func(c Commit) {
			if c != nil {
				held = append(held, c)
			}
		})
	}
	return held
}

// start registers a Subscriber and returns what it must receive before live
// messages: retained messages (since == nil) or the history after *since,
// with gap announcements. otherRun says that *since is a resume point of
// another broker run (its epoch is not ours): the restart is announced and
// all history replayed. sp.mu is held throughout, so nothing is missed or
// duplicated between the snapshot and live delivery.
//
// With paced, the retained messages, or the history and its topic gaps,
// are not returned but read from the returned Replay.
func (sp *Space) start(s *Subscriber, since *uint64, otherRun, paced bool) ([]wire.Frame, Replay, error) {
	pre, since, otherRun, release, err := sp.cover(s.filter, since, otherRun) // federation.go
	if err != nil {
		return nil, nil, err
	}
	defer release() // after the subscription's own interest below
	var out []wire.Frame
	if pre != nil && !paced {
		if out, err = drainCluster(out, pre); err != nil {
			return nil, nil, err
		}
		pre = nil
	}
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if sp.closing {
		if pre != nil {
			pre.Close()
		}
		return nil, nil, ErrShuttingDown
	}
	var msgs []*Message
	var replay Replay
	if since == nil && paced {
		replay = &RetainedReplay{sp: sp, filter: s.filter, gen: sp.retGen}
	} else if since == nil {
		for name, ts := range sp.topics {
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
		if otherRun || from > sp.seq && !sp.sequenced() { // sequenced: this broker may lag behind the cluster
			// The broker restarted (sequence numbers are in memory): say so,
			// then replay all it has.
			out = append(out, wire.GapFrame(wire.Gap{From: max(from+1, from)})) // no wrap to 0 (unknown)
			from = 0
		}
		s.after = from // live messages up to the resume point were seen
		if sp.forgotten > from {
			out = append(out, wire.GapFrame(wire.Gap{From: from + 1, To: sp.forgotten}))
		}
		if paced {
			s.hist = sp.newHistoryReplay(s.filter, from) // historyreplay.go
			replay = s.hist
		}
		for name, ts := range sp.topics {
			if paced {
				break // the topic gaps and history come from the replay
			}
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
	if pre != nil {
		// The cluster's part comes first, then the space's own frames and
		// history.
		s.cluster = pre
		replay = &clusterFirst{cluster: pre, then: out, rest: replay}
		out = nil
	}
	s.total = &sp.queued
	if topic.IsFilter(s.filter) {
		sp.wild = append(sp.wild, s)
	} else {
		sp.exact[s.filter] = append(sp.exact[s.filter], s)
	}
	sp.nsubs++
	sp.interest(s.filter, 1)
	return out, replay, nil
}

// Subscribe registers a subscription on filter (a valid topic filter: the
// caller checks it with TopicLimits) and returns it with what it must
// receive before live messages: the retained messages (since == nil) or
// the history after *since, with gap announcements. otherRun says that
// *since is a resume point of another run (its epoch is not Epoch): the
// restart is announced and all history replayed. Live messages then come
// through the Subscriber's queue; end it with Unsubscribe.
func (sp *Space) Subscribe(filter string, since *uint64, otherRun bool) (*Subscriber, []wire.Frame, error) {
	s := newSubscriber(filter, sp.limits, &sp.stats)
	out, _, err := sp.start(s, since, otherRun, false)
	if err != nil {
		return nil, nil, err
	}
	return s, out, nil
}

// SubscribePaced is Subscribe whose retained messages (since == nil), or
// history after *since with its topic gaps, are not returned with the
// frames but read, a bounded chunk at a time, from the returned Replay (a
// *RetainedReplay or a *HistoryReplay) as the subscriber's stream takes
// them: a subscriber that does not read then holds one chunk, not the
// whole retained set or history. The frames returned (a restart gap, the
// topicless gap of dropped topics) come first. A resume from before what
// the space holds, read from the cluster (Coverer), comes first in the
// Replay, as paced, then those frames and the history; ReplayErr tells
// whether reading the cluster failed short of the end. Live messages published meanwhile wait in the Subscriber's
// queue, within its bounds.
func (sp *Space) SubscribePaced(filter string, since *uint64, otherRun bool) (*Subscriber, []wire.Frame, Replay, error) {
	s := newSubscriber(filter, sp.limits, &sp.stats)
	out, replay, err := sp.start(s, since, otherRun, true)
	if err != nil {
		return nil, nil, nil, err
	}
	return s, out, replay, nil
}

// Unsubscribe ends a subscription of Subscribe and releases its queue.
func (sp *Space) Unsubscribe(s *Subscriber) { sp.stop(s) }

// stop unregisters a subscriber.
func (sp *Space) stop(s *Subscriber) {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	remove := func(l []*Subscriber) ([]*Subscriber, bool) {
		for i, x := range l {
			if x == s {
				return slices.Delete(l, i, i+1), true
			}
		}
		return l, false
	}
	var ok bool
	if topic.IsFilter(s.filter) {
		sp.wild, ok = remove(sp.wild)
	} else {
		var l []*Subscriber
		l, ok = remove(sp.exact[s.filter])
		if len(l) == 0 {
			delete(sp.exact, s.filter)
		} else {
			sp.exact[s.filter] = l
		}
	}
	if ok {
		sp.nsubs--
		sp.interest(s.filter, -1)
	}
	s.hist.finish()
	if s.cluster != nil {
		s.cluster.Close()
	}
	s.release()
}

// Shutdown refuses new work (ErrShuttingDown) and ends every subscription
// once its queue is drained.
func (sp *Space) Shutdown() {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	sp.closing = true
	for _, l := range sp.exact {
		for _, s := range l {
			s.finish()
		}
	}
	for _, s := range sp.wild {
		s.finish()
	}
}

// Closing reports whether Shutdown was called.
func (sp *Space) Closing() bool {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	return sp.closing
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

// Frame is m as a message frame with flags (wire.FlagRetained, ...).
func Frame(m *Message, flags byte) wire.Frame { return frameOf(m, flags) }

func frameOf(m *Message, flags byte) wire.Frame {
	return wire.Frame{Seq: m.Seq, Time: m.Time, Topic: m.Topic, Payload: m.Payload, Flags: flags}
}

// Stats is a snapshot of the topic space.
type Stats struct {
	// Subscriptions is the number of live subscriptions (Subscribe).
	Subscriptions int
	// Dropped counts messages discarded from full subscriber queues.
	Dropped uint64
	// CutOff counts subscriptions ended by the Disconnect queue policy.
	CutOff uint64
	// QueueDepthSum and QueueDepthMax describe subscriber queues now.
	QueueDepthSum, QueueDepthMax int
	// Topics is the number of topics with history or a retained message.
	Topics int
	// HistoryMessages and HistoryBytes measure the resume history (bytes
	// as Cost counts them).
	HistoryMessages int
	HistoryBytes    int64
	// Retained and RetainedBytes measure the retained messages.
	Retained      int
	RetainedBytes int64
	// LastSeq is the last sequence number assigned or applied.
	LastSeq uint64
}

// Stats returns a snapshot of the space's sizes and counters.
func (sp *Space) Stats() Stats {
	s := Stats{Dropped: sp.stats.dropped.Load(), CutOff: sp.stats.cutOff.Load()}
	sp.mu.Lock()
	s.Subscriptions = sp.nsubs
	s.Topics = len(sp.topics)
	s.HistoryMessages = sp.histMsgs
	s.HistoryBytes = sp.histSize
	s.LastSeq = sp.seq
	s.Retained = sp.retainedCount
	s.RetainedBytes = sp.retainedSize
	subs := make([]*Subscriber, 0, sp.nsubs)
	for _, l := range sp.exact {
		subs = append(subs, l...)
	}
	subs = append(subs, sp.wild...)
	sp.mu.Unlock()
	for _, sub := range subs {
		d := sub.depth()
		s.QueueDepthSum += d
		s.QueueDepthMax = max(s.QueueDepthMax, d)
	}
	return s
}
