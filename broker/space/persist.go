package space

import (
	"context"
	"fmt"
	"slices"
)

// Store keeps the topic space across broker runs: the sequence counter and
// epoch, the resume history and the retained messages. The space talks to it
// through this interface only (broker/store has the bbolt implementation;
// without a store everything lives in memory).
//
// With a store, a message is applied (history, retained, delivery to
// subscribers, taps) only once it is committed, in sequence order, so
// nothing a subscriber has seen can be missing after a crash, and a
// publisher's QoS 1 acknowledgement waits for the commit. QoS 0 publishes
// are answered once accepted.
type Store interface {
	// Load returns the state an earlier run saved; State.Fresh reports an
	// empty store. It is called once, before Start.
	Load() (*StoredState, error)
	// Start begins committing. epoch is this run's epoch (kept from the
	// saved state, or new). apply is called from one goroutine with each
	// committed batch in sequence order (err != nil: the batch was not
	// stored and must not be applied).
	Start(epoch uint64, apply func(msgs []*Message, err error)) error
	// Append queues m for the next commit. It is called with the space's lock
	// held, in sequence order, and must not block on I/O.
	Append(m *Message) Commit
	// Forget queues the removal of evicted history (written with the next
	// commit; a crash before it only means the eviction is redone at the
	// next load). Called with the space's lock held.
	Forget(ops []ForgetOp)
	// Close commits what is queued, marks the state as cleanly closed and
	// releases the store.
	Close() error
}

// Commit is a pending commit of Store.Append.
type Commit interface {
	// Done is closed once the commit has ended.
	Done() <-chan struct{}
	// Err is the commit's error once Done is closed (nil: durable).
	Err() error
}

// StoredState is what Store.Load returns.
type StoredState struct {
	// Fresh reports an empty store (no earlier run): a new epoch is taken.
	Fresh bool
	// Epoch and Seq are the saved run's epoch and last sequence number.
	Epoch, Seq uint64
	// Forgotten is the highest sequence number lost with a dropped topic.
	Forgotten uint64
	// History holds the saved history messages, oldest first.
	History []*Message
	// Retained holds the retained messages.
	Retained []*Message
	// Evicted maps a topic to the highest sequence number evicted from its
	// history.
	Evicted map[string]uint64
	// Unclean reports that the saved run did not close the store (a crash
	// or kill): what it had committed is kept.
	Unclean bool
}

// ForgetKind says what a ForgetOp removes.
type ForgetKind byte

const (
	// ForgetMessage removes history message Seq; Topic's highest evicted
	// sequence number becomes Evicted.
	ForgetMessage ForgetKind = iota
	// ForgetTopic drops Topic (nothing held any more); the broker's
	// forgotten mark becomes Evicted.
	ForgetTopic
)

// ForgetOp is one removal from the store, in the order the space made it.
type ForgetOp struct {
	// Kind says what is removed.
	Kind ForgetKind
	// Topic is the message's or the dropped topic's name.
	Topic string
	// Seq is the removed message (ForgetMessage).
	Seq uint64
	// Evicted is the topic's highest evicted sequence number
	// (ForgetMessage), or the broker's forgotten mark (ForgetTopic).
	Evicted uint64
}

// persistPublish hands an accepted message to the store and waits for its
// commit when the publisher asked for QoS 1 or 2. sp.mu is held on entry and
// released here.
func (sp *Space) persistPublish(ctx context.Context, msg *Message) (uint64, error) {
	var w *pubWait
	if msg.QoS > 0 && len(sp.holds) > 0 {
		// committed leaves the hold taps' commits here (AddHoldTap).
		w = &pubWait{}
		if sp.waits == nil {
			sp.waits = map[*Message]*pubWait{}
		}
		sp.waits[msg] = w
	}
	c := sp.persist.Append(msg)
	sp.mu.Unlock()
	if msg.QoS == 0 && !waitCommit(ctx) { // WithCommitWait
		return msg.Seq, nil
	}
	var held []Commit
	if w != nil {
		defer func() {
			sp.mu.Lock()
			delete(sp.waits, msg)
			sp.mu.Unlock()
		}()
	}
	select {
	case <-c.Done():
		if err := c.Err(); err != nil {
			return 0, fmt.Errorf("couldn't store message: %w", err)
		}
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	if w != nil {
		sp.mu.Lock()
		held = w.held
		sp.mu.Unlock()
	}
	if err := waitHeld(ctx, msg, held); err != nil {
		return 0, err
	}
	return msg.Seq, nil
}

// committed applies a committed batch (Store.Start's apply).
func (sp *Space) committed(msgs []*Message, err error) {
	if err != nil {
		return
	}
	sp.mu.Lock()
	for _, m := range msgs {
		held := sp.apply(m, true)
		if w := sp.waits[m]; w != nil {
			w.held = held
		}
		sp.applied = m.Seq
		sp.forward(m) // the cluster gets it once committed (not waited for)
	}
	sp.flushForget()
	sp.mu.Unlock()
	for _, m := range msgs {
		sp.countIn(m.Origin)
	}
}

// flushForget hands the removals made since the last call to the store. sp.mu held.
func (sp *Space) flushForget() {
	if len(sp.forget) > 0 {
		sp.persist.Forget(sp.forget)
		sp.forget = nil
	}
}

// noteEvict records that seq left topic's history. sp.mu held.
func (sp *Space) noteEvict(topic string, seq, evictedMax uint64) {
	if sp.persist != nil {
		sp.forget = append(sp.forget, ForgetOp{Kind: ForgetMessage, Topic: topic, Seq: seq, Evicted: evictedMax})
	}
}

// noteForgetTopic records that topic was dropped. sp.mu held.
func (sp *Space) noteForgetTopic(topic string) {
	if sp.persist != nil {
		sp.forget = append(sp.forget, ForgetOp{Kind: ForgetTopic, Topic: topic, Evicted: sp.forgotten})
	}
}

// restore loads saved state into the empty space: the sequence counter, the
// retained messages, and the history, replayed through the current limits
// (evictions it causes are passed to the store at Start).
func (sp *Space) restore(st *StoredState) {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	get := func(name string) *topicState {
		ts := sp.topics[name]
		if ts == nil {
			ts = sp.newTopic(name)
		}
		return ts
	}
	sp.seq = st.Seq
	sp.applied = st.Seq
	sp.forgotten = st.Forgotten
	for name, ev := range st.Evicted {
		get(name).evictedMax = ev
	}
	retained := slices.Clone(st.Retained) // indexed in sequence order
	slices.SortFunc(retained, func(a, b *Message) int { return cmpU64(a.Seq, b.Seq) })
	for _, m := range retained {
		ts := get(m.Topic)
		sp.clearRetained(ts)
		ts.retained = m
		sp.indexRetained(ts, m)
		sp.retainedSize += msgCost(m)
		sp.retainedCount++
	}
	for _, m := range st.History {
		sp.seq = max(sp.seq, m.Seq)
		sp.applied = sp.seq
		sp.store(get(m.Topic), m)
	}
	for name, ts := range sp.topics {
		sp.maybeForget(name, ts)
	}
}

// OpenStore connects the space to its store, before it is used: it loads
// and restores the saved state (the sequence counter, the retained
// messages and the history, replayed through the current limits) and
// starts committing. The epoch becomes the saved one, or a new one for a
// fresh store. The caller closes the store once nothing publishes any more.
func (sp *Space) OpenStore(s Store) (*StoredState, error) {
	st, err := s.Load()
	if err != nil {
		return nil, err
	}
	sp.persist = s
	epoch := st.Epoch
	if st.Fresh || epoch == 0 {
		epoch = NewEpoch()
	} else {
		sp.restore(st)
	}
	if err := s.Start(epoch, sp.committed); err != nil {
		return nil, err
	}
	sp.epoch.Store(epoch)
	sp.mu.Lock()
	sp.flushForget()
	sp.mu.Unlock()
	return st, nil
}

// commitWaitKey marks a publish context whose QoS 0 message must be stored
// before Publish returns (a QoS 1 message always is).
type commitWaitKey struct{}

// WithCommitWait makes Publish wait for the commit of a QoS 0 message too
// (with a store: the stream inflight bound of docs/durability.md).
func WithCommitWait(ctx context.Context) context.Context {
	return context.WithValue(ctx, commitWaitKey{}, true)
}

// waitCommit reports whether ctx asks Publish to wait for the commit.
func waitCommit(ctx context.Context) bool {
	v, _ := ctx.Value(commitWaitKey{}).(bool)
	return v
}

// RetainedMessages returns the retained messages, in sequence order (for
// another protocol's view of the topic space after a restart).
func (sp *Space) RetainedMessages() []*Message {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	var out []*Message
	for _, ts := range sp.topics {
		if ts.retained != nil {
			out = append(out, ts.retained)
		}
	}
	slices.SortFunc(out, func(a, b *Message) int { return cmpU64(a.Seq, b.Seq) })
	return out
}

// HistoryAfter returns the history messages with sequence numbers above
// seq, oldest first, and the last sequence number applied (a message above
// it reaches the taps after this call). The messages are shared: do not
// modify them.
func (sp *Space) HistoryAfter(seq uint64) (msgs []*Message, last uint64) {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	for i := 0; i < sp.order.len(); i++ {
		if e := sp.order.at(i); !e.evicted && e.m.Seq > seq {
			msgs = append(msgs, e.m)
		}
	}
	last = sp.seq
	if sp.persist != nil {
		last = sp.applied
	}
	return msgs, last
}
