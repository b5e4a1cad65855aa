package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/auth"
	"github.com/quiot/quiot/internal/wire"
)

// A resume's replay from the stream (Replay) is paced: it looks up the
// subjects of the filter at the stream's per-subject bound first, which
// tells the per-topic gaps, then reads the messages a chunk at a time, each chunk fetched from the stream only when the subscriber's
// stream took the previous one (docs/cluster.md). A subscriber that does
// not read holds one chunk, whatever the range.
const (
	// replayTimeout bounds the start of a replay, and each chunk, with
	// their retries (a replicated stream electing its leader).
	replayTimeout = 30 * time.Second
	// maxReplaySubjects bounds the topic gaps a replay holds; the topics
	// beyond it share one gap without topic, at the replay's end.
	maxReplaySubjects = 4096
	// replayInactive is how long the stream keeps the consumer of a
	// replay whose subscriber does not read (it is made again after).
	replayInactive = 30 * time.Second
)

// errReplayClosed: the replay was closed (its subscriber left).
var errReplayClosed = errors.New("replay closed")

// Replay implements broker.Coverer: it starts reading filter's messages
// numbered (since, to] from the stream (those the local ACL lets their
// publisher publish), after gap frames for what the stream no longer
// holds: below its first message (no topic), and on a topic whose messages
// after since are as many as the stream keeps per topic (older ones may
// have gone). It returns once those gaps are known; the messages are read
// by the returned replay's Next, a chunk at a time.
func (l *Link) Replay(filter string, since, to uint64) (broker.ClusterReplay, error) {
	ctx, cancel := context.WithCancel(l.ctx)
	r := &streamReplay{l: l, filter: filter, since: since, to: to, pos: since, ctx: ctx, cancel: cancel}
	for _, s := range FilterSubjects(filter) {
		r.subjects = append(r.subjects, l.subjM+s)
	}
	if err := r.retry(r.start); err != nil {
		cancel()
		return nil, err
	}
	return r, nil
}

// streamReplay is a paced read of a resume's messages from the stream.
type streamReplay struct {
	l         *Link
	filter    string
	subjects  []string
	since, to uint64
	ctx       context.Context
	cancel    context.CancelFunc

	mu     sync.Mutex
	str    jetstream.Stream
	cons   jetstream.Consumer // reads from pos+1; nil: to make
	pos    uint64             // the last sequence number accounted for
	head   []wire.Frame       // gaps to send before the messages
	carry  []wire.Frame       // messages fetched beyond a chunk's bytes
	tail   *wire.Gap          // the gap of subjects not told apart, last
	end    bool               // every message up to to was read
	closed bool
}

// retry runs f until it succeeds, the replay is closed or replayTimeout
// passed: JetStream's API answers errors while a replicated stream elects
// its leader (right after start, or after a node died).
func (r *streamReplay) retry(f func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(r.ctx, replayTimeout)
	defer cancel()
	wait := 100 * time.Millisecond
	for {
		err := f(ctx)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			if r.ctx.Err() != nil {
				return errReplayClosed
			}
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		}
		r.l.log.Debug("cluster link: reading the history for a resume failed, retrying", "filter", r.filter, "err", err, "in", wait)
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
		wait = min(2*wait, 2*time.Second)
	}
}

// start looks up the stream and notes the gaps: below its first message,
// and on the topics that may have lost messages after since to the
// stream's per-subject bound.
func (r *streamReplay) start(ctx context.Context) error {
	str, err := r.l.js.Stream(ctx, r.l.stream)
	if err != nil {
		return err
	}
	info := str.CachedInfo()
	r.str, r.head, r.tail = str, nil, nil
	if first := info.State.FirstSeq; first > r.since+1 {
		r.head = append(r.head, wire.GapFrame(wire.Gap{From: r.since + 1, To: min(first-1, r.to)}))
		r.pos = min(first-1, r.to)
	}
	if info.State.LastSeq <= r.since {
		r.end = true
		return nil
	}
	limit := info.Config.MaxMsgsPerSubject
	if limit <= 0 {
		return nil // no per-subject bound: no per-topic gaps
	}
	// A subject holding as many messages as the stream keeps per subject,
	// none of them at or before since, may have lost older ones after
	// since: a gap on its topic up to its oldest. The stream's per-subject
	// state tells which are at the bound; each one's oldest is asked for.
	gaps := 0
	for _, subj := range r.subjects {
		si, err := str.Info(ctx, jetstream.WithSubjectFilter(subj))
		if err != nil {
			return err
		}
		for s, n := range si.State.Subjects {
			if n < uint64(limit) {
				continue
			}
			if gaps == maxReplaySubjects {
				// Beyond what the replay holds gaps for: one gap without
				// topic says so, once every message it spans was sent.
				r.tail = &wire.Gap{From: r.since + 1, To: r.to}
				continue
			}
			m, err := str.GetMsg(ctx, info.State.FirstSeq, jetstream.WithGetMsgSubject(s))
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				continue // gone since the state was read
			}
			if err != nil {
				return err
			}
			if m.Sequence <= r.since+1 {
				continue
			}
			t, err := DecodeTopic(strings.TrimPrefix(s, r.l.subjM))
			if err != nil {
				continue
			}
			r.head = append(r.head, wire.GapFrame(wire.Gap{Topic: t, From: r.since + 1, To: min(m.Sequence-1, r.to)}))
			gaps++
		}
	}
	return nil
}

// Next implements broker.ClusterReplay: the gaps first, then the
// messages, each chunk read from the stream when asked for.
func (r *streamReplay) Next(dst []wire.Frame, maxMsgs, maxBytes int) ([]wire.Frame, bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return dst, false, nil
	}
	maxMsgs = max(maxMsgs, 1)
	if len(r.head) > 0 {
		n := min(maxMsgs, len(r.head))
		dst = append(dst, r.head[:n]...)
		clear(r.head[:n])
		r.head = r.head[n:]
		return dst, true, nil
	}
	if len(r.carry) > 0 {
		dst = r.take(dst, maxMsgs, maxBytes)
		return dst, true, nil
	}
	if !r.end {
		err := r.retry(func(ctx context.Context) error { return r.fetch(ctx, maxMsgs) })
		if err != nil {
			r.closeLocked()
			return dst, false, err
		}
		if len(r.carry) > 0 || !r.end {
			dst = r.take(dst, maxMsgs, maxBytes)
			return dst, true, nil
		}
	}
	if r.tail != nil {
		dst = append(dst, wire.GapFrame(*r.tail))
	}
	r.closeLocked()
	return dst, false, nil
}

// take moves the frames fetched to dst, at most maxMsgs and, once one is
// moved, maxBytes of payload and topic; the rest waits for the next chunk.
func (r *streamReplay) take(dst []wire.Frame, maxMsgs, maxBytes int) []wire.Frame {
	n, bytes := 0, 0
	for n < len(r.carry) && n < maxMsgs && (n == 0 || bytes < maxBytes) {
		bytes += len(r.carry[n].Payload) + len(r.carry[n].Topic)
		n++
	}
	dst = append(dst, r.carry[:n]...)
	clear(r.carry[:n])
	r.carry = r.carry[n:]
	if len(r.carry) == 0 {
		r.carry = nil
	}
	return dst
}

// fetch reads the next messages of the range into r.carry (at most n, or
// none when the stream has no more), with a gap before them for those
// the stream dropped meanwhile (its start overtook the replay). r.mu held.
func (r *streamReplay) fetch(ctx context.Context, n int) error {
	if r.cons == nil {
		cons, err := r.str.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
			FilterSubjects:    r.subjects,
			DeliverPolicy:     jetstream.DeliverByStartSequencePolicy,
			OptStartSeq:       r.pos + 1,
			InactiveThreshold: replayInactive,
		})
		if err != nil {
			return err
		}
		r.cons = cons
	}
	batch, err := r.cons.FetchNoWait(n)
	if err != nil {
		r.dropConsumer()
		return err
	}
	a := r.l.b.Auth()
	checked := false
	got := 0
	for m := range batch.Messages() {
		got++
		if r.end {
			continue // beyond to: drained
		}
		md, err := m.Metadata()
		if err != nil {
			r.dropConsumer()
			return err
		}
		seq := md.Sequence.Stream
		if seq <= r.pos {
			continue // read before a retry
		}
		if seq > r.pos+1 && !checked {
			// Other subjects, or gone from the stream since the replay
			// began: only the latter needs a gap.
			checked = true
			if err := r.dropped(ctx, seq); err != nil {
				r.dropConsumer()
				return err
			}
		}
		if seq > r.to {
			r.pos, r.end = r.to, true
			continue
		}
		r.pos = seq
		if md.NumPending == 0 || seq == r.to {
			r.end = true
		}
		in, err := r.l.parseMsg(&nats.Msg{Subject: m.Subject(), Header: m.Headers(), Data: m.Data()})
		if err != nil {
			continue
		}
		if in.origin != r.l.ID() && a != nil && !a.Allow(in.m.Identity, auth.Publish, in.m.Topic) {
			continue
		}
		r.carry = append(r.carry, wire.Frame{Seq: seq, Time: in.m.Time, Topic: in.m.Topic, Payload: in.m.Payload})
	}
	if err := batch.Error(); err != nil {
		r.dropConsumer()
		return err
	}
	if got == 0 {
		r.end = true
	}
	if r.end {
		r.pos = r.to
	}
	return nil
}

// dropped appends to r.carry a gap without topic for the numbers before
// seq the stream no longer holds (its first message is beyond them), if
// any. r.mu held.
func (r *streamReplay) dropped(ctx context.Context, seq uint64) error {
	info, err := r.str.Info(ctx)
	if err != nil {
		return err
	}
	if first := info.State.FirstSeq; first > r.pos+1 {
		to := min(first-1, seq-1, r.to)
		r.carry = append(r.carry, wire.GapFrame(wire.Gap{From: r.pos + 1, To: to}))
		r.pos = to
	}
	return nil
}

// Close implements broker.ClusterReplay: it ends the reading (the
// subscriber left or the replay is over).
func (r *streamReplay) Close() {
	r.cancel()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closeLocked()
}

// closeLocked releases what the replay holds, its consumer on the
// stream included. r.mu held.
func (r *streamReplay) closeLocked() {
	r.cancel()
	r.closed = true
	r.dropConsumer()
	r.str, r.head, r.carry, r.tail = nil, nil, nil, nil
}

// dropConsumer deletes the replay's consumer (a new one reads from pos+1
// when needed). r.mu held.
func (r *streamReplay) dropConsumer() {
	if r.cons != nil {
		go r.deleteConsumer(r.str, r.cons)
		r.cons = nil
	}
}

// deleteConsumer deletes cons from the stream rather than letting it wait
// for its inactivity threshold; an error only leaves it to that.
func (r *streamReplay) deleteConsumer(str jetstream.Stream, cons jetstream.Consumer) {
	info := cons.CachedInfo()
	if info == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.l.o.AckTimeout)
	defer cancel()
	if err := str.DeleteConsumer(ctx, info.Name); err != nil {
		r.l.log.Debug("cluster link: deleting a resume's consumer failed", "consumer", info.Name, "err", err)
	}
}
