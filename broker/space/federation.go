package space

import (
	"context"
	"errors"
	"fmt"

	"github.com/quiot/quiot/internal/topic"
	"github.com/quiot/quiot/internal/wire"
)

// OriginCluster is the Message.Origin of messages that another broker
// accepted and the federation link (broker/cluster) hands to this one. They
// are not forwarded again, so nothing loops between brokers.
const OriginCluster = "cluster"

// Federation joins this broker's topic space to other brokers' (the NATS
// link in broker/cluster). The space talks to it through this interface only,
// as it does to its Store; messages from other brokers come in through
// Space.Publish with Origin OriginCluster (or Space.ApplySequenced).
type Federation interface {
	// Forward hands a message this broker accepted (any origin but
	// OriginCluster) to the other brokers. It is called with the space's lock
	// held, in sequence order, and must not block. The returned Commit (nil:
	// nothing to wait for) ends once the cluster has the message; a QoS 1
	// or 2 publisher's acknowledgement waits for it (without a Store).
	Forward(m *Message) Commit
	// Interest reports that a local subscription on filter began (delta +1)
	// or ended (-1), so that the link asks the cluster only for what local
	// subscribers want. Called with the space's lock held; must not block.
	Interest(filter string, delta int)
}

// FederationStatus is implemented by a Federation that reports its state
// on /healthz (one line, e.g. "connected nats://...").
type FederationStatus interface {
	Status() string
}

// forward hands msg to the federation link. sp.mu held.
func (sp *Space) forward(msg *Message) Commit {
	if sp.fed == nil || msg.Origin == OriginCluster {
		return nil
	}
	return sp.fed.Forward(msg)
}

// interest reports a subscription's start or end to the link. sp.mu held.
func (sp *Space) interest(filter string, delta int) {
	if sp.fed != nil {
		sp.fed.Interest(filter, delta)
	}
}

// waitForward waits for the cluster to hold a QoS 1 or 2 message.
func waitForward(ctx context.Context, msg *Message, c Commit) (uint64, error) {
	if c == nil || msg.QoS == 0 {
		return msg.Seq, nil
	}
	select {
	case <-c.Done():
		if err := c.Err(); err != nil {
			return 0, fmt.Errorf("couldn't hand message to the cluster: %w", err)
		}
		return msg.Seq, nil
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// AddInterest reports a subscription on filter that does not go through
// Subscribe (MQTT subscriptions live in mochi) to the federation link: delta +1
// when it begins, -1 when it ends.
func (sp *Space) AddInterest(filter string, delta int) {
	sp.mu.Lock()
	sp.interest(filter, delta)
	sp.mu.Unlock()
}

// Sequencer is implemented by a Federation that numbers messages
// cluster-wide (broker/cluster: the history stream's sequence). While
// Sequencing reports true, a broker without a Store neither numbers nor
// applies the messages it accepts: it hands them to Forward, and the link
// applies every message of the cluster, its own included, in the cluster's
// order through ApplySequenced. Sequence numbers and the epoch
// (SetClusterEpoch) are then the cluster's, so a subscriber resumes on any
// broker after the last message it saw.
type Sequencer interface {
	// Sequencing reports whether the link numbers messages. It must not
	// change while the broker runs.
	Sequencing() bool
}

// SeqCommit is a Commit of a sequencing Federation's Forward that knows,
// once done without error, the message's cluster-wide sequence number.
type SeqCommit interface {
	Commit
	// Seq is the message's sequence number (valid once Done is closed and
	// Err is nil).
	Seq() uint64
}

// sequenced reports whether the cluster numbers and applies messages (a
// sequencing link, no Store).
func (sp *Space) sequenced() bool {
	s, ok := sp.fed.(Sequencer)
	return ok && sp.persist == nil && s.Sequencing()
}

// publishSequenced hands an accepted message to the sequencing link; it is
// applied when the link hands it back numbered. A QoS 1 or 2 publisher's
// acknowledgement waits for the cluster's sequence number; QoS 0 and
// messages held while the cluster is unreachable are answered with 0 (not
// numbered yet). sp.mu is held on entry and released here.
func (sp *Space) publishSequenced(ctx context.Context, msg *Message) (uint64, error) {
	if msg.Origin == OriginCluster {
		sp.mu.Unlock()
		return 0, errors.New("a message from the cluster must come through ApplySequenced")
	}
	c := sp.fed.Forward(msg)
	sp.mu.Unlock()
	sp.countIn(msg.Origin)
	if c == nil || msg.QoS == 0 {
		return 0, nil
	}
	select {
	case <-c.Done():
		if err := c.Err(); err != nil {
			return 0, fmt.Errorf("couldn't hand message to the cluster: %w", err)
		}
		if sc, ok := c.(SeqCommit); ok {
			return sc.Seq(), nil
		}
		return 0, nil
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// SetClusterEpoch makes e the epoch sent to subscribers (a sequencing link
// sets the cluster's: sequence numbers are the cluster's).
func (sp *Space) SetClusterEpoch(e uint64) {
	if e != 0 {
		sp.epoch.Store(e)
	}
}

// Sequenced reports whether this broker's sequence numbers come from its
// federation link (Sequencer, and no Store).
func (sp *Space) Sequenced() bool { return sp.sequenced() }

// ErrOutOfOrder: ApplySequenced got a sequence number at or below the last
// one applied (a duplicate); the message is not applied again.
var ErrOutOfOrder = errors.New("sequence number already applied")

// ApplySequenced puts a message the cluster numbered seq into the topic
// space (history, retained message, subscribers, taps), as Publish does for
// a message of its own; m.Origin is kept (the MQTT bridge does not hand an
// MQTT message back to MQTT). Messages must come in increasing seq order
// (numbers in between belong to messages this broker does not apply: other
// topics, refused ones). What the cluster's history lost before this broker
// read it is reported with ForgetThrough and MarkEvicted. A retained
// message beyond Limits.RetainedBytes is delivered all the same but not
// kept (the topic's older retained message, now stale, is dropped): the
// error then wraps ErrRetainedFull. Authorisation is the caller's job.
func (sp *Space) ApplySequenced(m Message, seq uint64) error {
	return sp.applySequenced(m, seq, true)
}

// ApplySequencedHistory is ApplySequenced for a message that is not new to
// this broker's subscribers (the link began reading its topic after it was
// published): it goes into the history and the retained message only.
func (sp *Space) ApplySequencedHistory(m Message, seq uint64) error {
	return sp.applySequenced(m, seq, false)
}

func (sp *Space) applySequenced(m Message, seq uint64, live bool) error {
	if err := sp.validate(&m); err != nil {
		sp.AdvanceSequence(seq)
		return err
	}
	msg := &m
	msg.Seq = seq
	sp.mu.Lock()
	if sp.closing {
		sp.mu.Unlock()
		return ErrShuttingDown
	}
	if seq <= sp.seq {
		sp.mu.Unlock()
		return ErrOutOfOrder
	}
	sp.skipTo(seq)
	var err error
	if ts := sp.topics[msg.Topic]; msg.Retain && ts != nil && ts.retainedSeq > seq {
		// The retained store had a newer one: this is history, not the
		// topic's retained message.
		m2 := *msg
		m2.Retain = false
		msg = &m2
	}
	if ts := sp.topics[msg.Topic]; msg.Retain && len(msg.Payload) > 0 && !sp.retainedFits(ts, msg) {
		// The cluster accepted it: deliver it, but it cannot be this
		// broker's retained message, and the older one is stale.
		err = fmt.Errorf("%w: delivered but not kept as retained (%d bytes held, limit %d)", ErrRetainedFull, sp.retainedSize, sp.limits.RetainedBytes)
		sp.clearRetained(ts)
		m2 := *msg
		m2.Retain = false
		msg = &m2
	}
	sp.apply(msg, live)
	if m.Retain {
		if ts := sp.topics[m.Topic]; ts != nil {
			ts.retainedSeq = max(ts.retainedSeq, seq) // older values from the retained store are stale
		}
	}
	sp.mu.Unlock()
	if msg.Origin == OriginCluster {
		sp.countIn(msg.Origin)
	}
	return err
}

// AdvanceSequence records that the cluster's messages up to seq were seen
// (those this broker does not apply: refused by its ACL, gap notes).
func (sp *Space) AdvanceSequence(seq uint64) {
	sp.mu.Lock()
	if seq > sp.seq {
		sp.skipTo(seq)
	}
	sp.mu.Unlock()
}

// skipTo makes seq the last sequence number. sp.mu held.
func (sp *Space) skipTo(seq uint64) {
	sp.seq = seq
}

// ForgetThrough records that the cluster's messages up to seq may be
// missing here (gone from its history before this broker read them): a
// subscriber resuming from before seq is told of the gap.
func (sp *Space) ForgetThrough(seq uint64) {
	sp.mu.Lock()
	sp.forgotten = max(sp.forgotten, seq)
	sp.mu.Unlock()
}

// MarkEvicted records that messages of topic up to seq may be missing here
// (the cluster's history dropped them by its per-topic bound before this
// broker read them): a subscriber resuming from before seq is told of the
// gap on that topic. Nothing happens for a topic this broker holds nothing of.
func (sp *Space) MarkEvicted(topic string, seq uint64) {
	sp.mu.Lock()
	if ts := sp.topics[topic]; ts != nil {
		ts.evictedMax = max(ts.evictedMax, seq)
	}
	sp.mu.Unlock()
}

// SetRetained sets topic's retained message from the cluster's retained
// store when it is newer than the one held (m.Seq, the cluster's sequence
// number; an empty payload clears it). Subscribers are not sent it: it is
// for those that subscribe later; with tap the taps get it (the MQTT side
// keeps its own retained messages), for a message that will not be applied
// live. One that does not fit Limits.RetainedBytes leaves the topic without
// a retained message (the older one is stale) and returns an error wrapping
// ErrRetainedFull.
func (sp *Space) SetRetained(m Message, tap bool) error {
	if err := sp.validate(&m); err != nil {
		return err
	}
	sp.mu.Lock()
	defer sp.mu.Unlock()
	ts := sp.topics[m.Topic]
	if ts != nil && (ts.retainedSeq >= m.Seq || ts.retained != nil && ts.retained.Seq >= m.Seq) {
		return nil
	}
	if ts != nil {
		ts.retainedSeq = m.Seq
	}
	if len(m.Payload) == 0 {
		if ts != nil && ts.retained != nil {
			sp.clearRetained(ts)
			sp.maybeForget(m.Topic, ts)
		}
		if tap {
			msg := m
			for _, fn := range sp.taps {
				fn(&msg)
			}
		}
		return nil
	}
	if !sp.retainedFits(ts, &m) {
		if ts != nil && ts.retained != nil { // stale now
			sp.clearRetained(ts)
			sp.maybeForget(m.Topic, ts)
		}
		return fmt.Errorf("%w: %d bytes held, limit %d", ErrRetainedFull, sp.retainedSize, sp.limits.RetainedBytes)
	}
	if ts == nil {
		ts = sp.newTopic(m.Topic)
		ts.retainedSeq = m.Seq
	}
	msg := m
	sp.setRetained(ts, &msg)
	if tap {
		for _, fn := range sp.taps {
			fn(&msg)
		}
	}
	return nil
}

// AnnounceLoss tells the live subscribers whose filter matches one of
// topics (all of them when topics is empty) that messages on it were lost
// before any broker numbered them (another broker dropped them while cut
// off from the cluster): a gap frame with the topic and no sequence numbers.
// It returns the number of subscriptions told.
func (sp *Space) AnnounceLoss(topics []string) int {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	n := 0
	tell := func(s *Subscriber) {
		for _, t := range topics {
			if topic.Match(s.filter, t) {
				s.noteLoss(t)
				n++
				return
			}
		}
		if len(topics) == 0 {
			s.noteLoss("")
			n++
		}
	}
	for _, l := range sp.exact {
		for _, s := range l {
			tell(s)
		}
	}
	for _, s := range sp.wild {
		tell(s)
	}
	return n
}

// noteLoss queues a gap of unknown messages on topic t ("": several topics).
func (s *Subscriber) noteLoss(t string) {
	s.mu.Lock()
	if s.gaps == nil {
		s.gaps = map[string]*wire.Gap{}
	}
	if len(s.gaps) >= 64 {
		t = ""
	}
	if s.gaps[t] == nil {
		s.gaps[t] = &wire.Gap{Topic: t}
		s.gapOrder = append(s.gapOrder, t)
	}
	s.mu.Unlock()
	s.signal()
}

// CoverInterest is for a subscription that does not go through Subscribe
// (MQTT subscriptions live in mochi): with a sequencing link that reads
// only what local subscribers want (Coverer), it returns once the link
// reads filter's messages, so that every message numbered after the
// return reaches the subscription (an MQTT SUBACK waits for it). release
// ends the interest it took: call it after AddInterest reported the
// subscription's own. Without such a link, or when the link cannot cover
// filter now (the cluster is unreachable), it returns at once.
func (sp *Space) CoverInterest(filter string) (release func()) {
	c := sp.coverer()
	if c == nil {
		return func() {}
	}
	_, _, rel, err := c.Cover(filter)
	if err != nil {
		return func() {}
	}
	return rel
}

// Covering reports whether subscriptions' filters are covered
// (CoverInterest waits for the cluster link), so that the MQTT side skips
// the work when they are not.
func (sp *Space) Covering() bool { return sp.coverer() != nil }

// coverer returns the link that reads only what local subscribers want and
// must cover a new filter first, or nil.
func (sp *Space) coverer() Coverer {
	if c, ok := sp.fed.(Coverer); ok && sp.sequenced() {
		return c
	}
	return nil
}

// Coverer is implemented by a sequencing Federation that reads only what
// local subscribers want from the cluster's history (broker/cluster). A
// subscription first asks it to cover its filter; a resume from before
// what this broker holds for the filter is read from the cluster.
type Coverer interface {
	// Cover makes the link read filter's messages and returns once it does:
	// from is the first sequence number from which every message of filter
	// is applied here, old the last one that was already published when
	// that began (messages of filter up to old are applied as history
	// only). release ends the interest Cover took. An error: not covered
	// (the cluster is unreachable).
	Cover(filter string) (from, old uint64, release func(), err error)
	// Replay starts reading filter's messages numbered after since and up
	// to to, oldest first, with gap frames for what the cluster no longer
	// holds. It returns once the read can begin (an error: the cluster's
	// history cannot be read); the frames then come from the returned
	// ClusterReplay a bounded chunk at a time, each read from the cluster
	// only when the previous one was taken, so that a subscriber that does
	// not read holds one chunk, not the whole range.
	Replay(filter string, since, to uint64) (ClusterReplay, error)
}

// ClusterReplay reads the frames of a Coverer's Replay, a bounded chunk at
// a time.
type ClusterReplay interface {
	// Next appends to dst the next frames: at most maxMsgs messages (or
	// gaps) and, once one is appended, no more than maxBytes of payload
	// and topic. It returns dst, whether more may follow (false: the replay
	// is complete) and an error when the cluster's history could not be
	// read (the replay is then over, short of its end).
	Next(dst []wire.Frame, maxMsgs, maxBytes int) ([]wire.Frame, bool, error)
	// Close ends the replay and releases what it holds; Next then
	// reports no more. It may be called more than once.
	Close()
}

// cover asks a covering link to cover a subscription's filter before it
// starts, and starts reading what the space cannot hold of a resume from
// the cluster (pre, read before what the space has). It returns the resume
// point the space takes over from, and the release of the link's interest
// (call it once the subscription holds its own). otherRun is set when the
// resume cannot be served (the link could not cover the filter): announced
// as a restart.
func (sp *Space) cover(filter string, since *uint64, otherRun bool) (pre ClusterReplay, from *uint64, other bool, release func(), err error) {
	release = func() {}
	c := sp.coverer()
	if c == nil {
		return nil, since, otherRun, release, nil
	}
	first, old, rel, cerr := c.Cover(filter)
	if cerr != nil {
		return nil, since, otherRun || since != nil, release, nil
	}
	release = rel
	if since == nil || otherRun {
		return nil, since, otherRun, release, nil
	}
	sp.mu.Lock()
	caught := sp.seq >= old // history holds filter's messages from first on
	sp.mu.Unlock()
	to := old
	if caught {
		to = first - 1
	}
	if *since >= to {
		return nil, since, false, release, nil
	}
	pre, err = c.Replay(filter, *since, to)
	if err != nil {
		release()
		return nil, nil, false, func() {}, fmt.Errorf("couldn't read the cluster's history: %w", err)
	}
	return pre, &to, false, release, nil
}

// drainCluster reads the whole of a cluster replay (an unpaced
// subscription) into dst.
func drainCluster(dst []wire.Frame, pre ClusterReplay) ([]wire.Frame, error) {
	defer pre.Close()
	for more := true; more; {
		var err error
		if dst, more, err = pre.Next(dst, 256, 64<<10); err != nil {
			return dst, fmt.Errorf("couldn't read the cluster's history: %w", err)
		}
	}
	return dst, nil
}

// clusterFirst is the paced replay of a resume read from the cluster
// first (a ClusterReplay), then the frames the space starts the
// subscription with (then), then its history (rest). A failure reading
// the cluster ends it (Err): nothing later is replayed, so that the
// subscriber's resume point does not pass what it missed.
type clusterFirst struct {
	cluster ClusterReplay
	then    []wire.Frame
	rest    Replay
	done    bool // the cluster part is read
	err     error
}

// Next implements Replay.
func (c *clusterFirst) Next(dst []wire.Frame, maxMsgs, maxBytes int) ([]wire.Frame, bool) {
	if c.err != nil {
		return dst, false
	}
	if !c.done {
		var more bool
		var err error
		dst, more, err = c.cluster.Next(dst, maxMsgs, maxBytes)
		if err != nil {
			c.err = fmt.Errorf("couldn't read the cluster's history: %w", err)
			c.cluster.Close()
			return dst, false
		}
		if more {
			return dst, true
		}
		c.done = true
		c.cluster.Close()
		dst = append(dst, c.then...)
		c.then = nil
		return dst, c.rest != nil
	}
	if c.rest == nil {
		return dst, false
	}
	return c.rest.Next(dst, maxMsgs, maxBytes)
}

// ReplayErr is the error that ended a paced replay short of its end (the
// cluster's history could not be read), or nil.
func ReplayErr(r Replay) error {
	if c, ok := r.(*clusterFirst); ok {
		return c.err
	}
	return nil
}
