package cluster

import (
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"errors"
	"hash/fnv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/auth"
	"github.com/quiot/quiot/internal/topic"
	"github.com/quiot/quiot/internal/wire"
)

// Cluster-wide sequence numbers (the default; Options.LocalNumbering turns
// them off). The history stream orders every message of the cluster: its
// stream sequence number is the message's sequence number on every broker,
// and the stream's identity is the cluster's epoch. Each link reads the
// stream in order through one ordered consumer filtered on its local
// subscribers' subjects, its own messages included, and applies them to
// its broker (space.Space.ApplySequenced): the broker applies nothing it accepts
// before the stream has numbered it. So every broker delivers the
// cluster's messages in the same order under the same numbers. A
// subscription on a filter the consumer does not read waits until a new
// consumer does (Cover); a resume from before that point reads the stream
// (Replay); and live messages up to a resume point are not sent again. So a
// subscriber that saw up to N on one broker resumes after N on any other,
// with gap frames only for what the stream no longer holds.

// epochKey is the stream metadata key that holds the cluster epoch (16 hex
// digits), chosen by the broker that created the stream.
const epochKey = "quiot_epoch"

// randomEpoch returns a random non-zero epoch.
func randomEpoch() uint64 {
	for {
		var b [8]byte
		_, _ = crand.Read(b[:])
		if e := binary.BigEndian.Uint64(b[:]); e != 0 {
			return e
		}
	}
}

// streamEpoch is the cluster epoch of a stream: its quiot_epoch metadata,
// or for a stream made without it (by an administrator) a hash of its name
// and creation time. A stream deleted and made again has another epoch,
// so resume points of the old one are announced as a restart.
func streamEpoch(info *jetstream.StreamInfo) uint64 {
	if e, err := wire.ParseEpoch(info.Config.Metadata[epochKey]); err == nil {
		return e
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(info.Config.Name))
	_ = binary.Write(h, binary.BigEndian, info.Created.UnixNano())
	if e := h.Sum64(); e != 0 {
		return e
	}
	return 1
}

// maxConsumerSubjects bounds the subjects of the stream consumer's filter;
// with more local filters than that the link reads the whole stream.
const maxConsumerSubjects = 256

// errReseq ends a consumer whose filters are to change.
var errReseq = errors.New("local interest changed")

// seqLoop reads the history stream in order and applies each message to the
// broker under its stream sequence number. It (re)starts after the last
// number applied whenever the consumer fails or local interest gains a
// filter.
func (l *Link) seqLoop() {
	defer l.wg.Done()
	backoff := l.o.ReconnectWait
	var epoch uint64
	for l.ctx.Err() == nil {
		l.mu.Lock()
		ready := l.ready
		l.mu.Unlock()
		if ready {
			e, err := l.consume(epoch)
			epoch = e
			if err == nil || errors.Is(err, errReseq) {
				backoff = l.o.ReconnectWait
				continue
			}
			if l.ctx.Err() != nil {
				return
			}
			l.log.Warn("cluster link: reading the history stream failed, retrying", "err", err, "in", backoff)
		}
		t := time.NewTimer(backoff)
		select {
		case <-l.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		if ready {
			backoff = min(backoff*2, l.o.MaxReconnectWait)
		}
	}
}

// errEpochChanged: the stream was made again under another epoch.
var errEpochChanged = errors.New("history stream was deleted and made again (new epoch): restart the broker to take its numbers")

// coverChanged wakes Cover's waiters. l.mu held.
func (l *Link) coverChanged() {
	close(l.coverGen)
	l.coverGen = make(chan struct{})
}

// consume runs one ordered consumer from the broker's last sequence number,
// filtered on the local interest, until it fails or the interest gains a
// filter (errReseq). epoch is the cluster epoch known so far (0: none); it
// returns the one it found. Its phases: the stream and its epoch
// (openStream), the consumer's filter (localFilters, consumerSubjects), the
// consumer (openConsumer), what it covers (setCover), the watch for a new
// filter (watchReseq) and the read loop (readStream).
func (l *Link) consume(epoch uint64) (uint64, error) {
	select { // what asked for this consumer is served by it
	case <-l.reseq:
	default:
	}
	str, info, epoch, err := l.openStream(epoch)
	if err != nil {
		return epoch, err
	}
	start := l.b.Stats().LastSeq + 1
	if first := info.State.FirstSeq; first > start {
		// Gone from the stream (its bounds) before this broker read them.
		l.b.Space().ForgetThrough(first - 1)
	}
	limit := info.Config.MaxMsgsPerSubject
	filters := l.localFilters()
	subjects, all := l.consumerSubjects(filters)
	it, err := l.openConsumer(str, subjects, all, start)
	if err != nil {
		return epoch, err
	}
	defer it.Stop()
	l.setCover(filters, subjects, all, start, info.State.LastSeq)
	reseq, unwatch := l.watchReseq(it)
	defer unwatch()
	r := &streamRead{
		l:     l,
		str:   str,
		all:   all,
		start: start,
		limit: limit,
		// Until it has caught up with the stream, the consumer counts each
		// subject's messages: a subject that has as many as the stream keeps per
		// subject may have lost older ones, after start, to that bound (MarkEvicted).
		counts: map[string]*subjectCount{},
		last:   start - 1,
	}
	err = r.readStream(it, reseq)
	return epoch, err
}

// openStream looks up the history stream and checks its cluster epoch
// against epoch, the one known so far (0: none). The first epoch found is
// given to the broker and logged; another one than known is logged and
// fails with errEpochChanged. It returns the stream, its cached info and
// the epoch now known (stored in l.epoch); on an error, epoch unchanged.
// l.mu not held.
func (l *Link) openStream(epoch uint64) (jetstream.Stream, *jetstream.StreamInfo, uint64, error) {
	ctx, cancel := context.WithTimeout(l.ctx, l.o.AckTimeout)
	str, err := l.js.Stream(ctx, l.stream)
	cancel()
	if err != nil {
		return nil, nil, epoch, err
	}
	info := str.CachedInfo()
	e := streamEpoch(info)
	if epoch == 0 {
		l.b.Space().SetClusterEpoch(e)
		l.log.Info("cluster-wide sequence numbers", "epoch", wire.FormatEpoch(e), "stream", l.stream)
	} else if e != epoch {
		l.log.Error("cluster link: "+errEpochChanged.Error(), "was", wire.FormatEpoch(epoch), "now", wire.FormatEpoch(e))
		return nil, nil, epoch, errEpochChanged
	}
	l.epoch.Store(e)
	return str, info, e, nil
}

// localFilters returns a copy of the local interest's filters, in no
// particular order. It takes l.mu.
func (l *Link) localFilters() []string {
	l.mu.Lock()
	filters := make([]string, 0, len(l.interest))
	for f := range l.interest {
		filters = append(filters, f)
	}
	l.mu.Unlock()
	return filters
}

// consumerSubjects returns the stream subjects a consumer reads for
// filters: the gap notes' subject first, then each filter's subjects once
// (disjointSubjects drops those another one covers). all reports that the
// consumer is to read the whole stream instead: two subjects that remain
// still collide, or there are more than maxConsumerSubjects. It holds no
// lock and changes nothing.
func (l *Link) consumerSubjects(filters []string) (subjects []string, all bool) {
	subjects = []string{l.o.Prefix + ".gap"}
	seen := map[string]bool{}
	for _, f := range filters {
		for _, s := range FilterSubjects(f) {
			if !seen[s] {
				seen[s] = true
				subjects = append(subjects, l.subjM+s)
			}
		}
	}
	subjects, disjoint := disjointSubjects(subjects)
	all = !disjoint || len(subjects) > maxConsumerSubjects
	return subjects, all
}

// openConsumer makes an ordered consumer of str from stream number start
// (1: the stream's first), filtered on subjects unless all, and returns
// its message iterator; the caller stops it. l.mu not held.
func (l *Link) openConsumer(str jetstream.Stream, subjects []string, all bool, start uint64) (jetstream.MessagesContext, error) {
	cfg := jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy}
	if !all {
		cfg.FilterSubjects = subjects
	}
	if start > 1 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, start
	}
	ctx, cancel := context.WithTimeout(l.ctx, l.o.AckTimeout)
	cons, err := str.OrderedConsumer(ctx, cfg)
	cancel()
	if err != nil {
		return nil, err
	}
	return cons.Messages()
}

// setCover records what a new consumer covers and wakes Cover's waiters:
// filters read before keep their start (the consumer goes on after the
// last number applied); new ones begin at start, and their messages already
// published, up to lastSeq (the stream's last number when the consumer
// began, or the last number applied when the filter was subscribed with
// NATS unreachable, l.early, if earlier), are history, not news. Each
// filter leaves l.early. subjects and all are the consumer's filter
// (consumerSubjects). It takes l.mu.
func (l *Link) setCover(filters, subjects []string, all bool, start, lastSeq uint64) {
	l.mu.Lock()
	cover, fresh := map[string]uint64{}, map[string]uint64{}
	for _, f := range filters {
		if c, ok := l.cover[f]; ok {
			cover[f], fresh[f] = c, l.fresh[f]
		} else {
			cover[f], fresh[f] = start, lastSeq
			if e, ok := l.early[f]; ok {
				fresh[f] = min(e, fresh[f])
			}
		}
		delete(l.early, f)
	}
	l.cover, l.fresh, l.coverAll, l.allFrom = cover, fresh, all, start
	l.consSubjects = len(subjects) - 1 // without the gap notes'
	if all {
		l.consSubjects = 0
	}
	l.coverChanged()
	l.mu.Unlock()
}

// watchReseq stops it when the link shuts down or when a new consumer is
// asked for (l.reseq); the latter sets the returned flag first, so the read
// loop ends with errReseq. The caller must call unwatch (before stopping
// it) once done reading: it ends the watch.
func (l *Link) watchReseq(it jetstream.MessagesContext) (reseq *atomic.Bool, unwatch func()) {
	reseq = new(atomic.Bool)
	stop := context.AfterFunc(l.ctx, it.Stop)
	done := make(chan struct{})
	go func() {
		select {
		case <-l.reseq:
			reseq.Store(true)
			it.Stop()
		case <-done:
		}
	}()
	return reseq, func() {
		close(done)
		stop()
	}
}

// subjectCount is how many messages of one subject a consumer read before
// catching up with the stream, and the first one's stream number.
type subjectCount struct{ n, first uint64 }

// streamRead is the state of one consumer's read loop. Only that loop uses
// it: it needs no lock.
type streamRead struct {
	l       *Link
	str     jetstream.Stream
	all     bool   // the consumer reads the whole stream
	start   uint64 // the first stream number the consumer reads
	limit   int64  // the stream's messages kept per subject (0 or less: no bound)
	counts  map[string]*subjectCount
	last    uint64    // the last stream number read
	checked time.Time // the last look at the stream's start
}

// readStream applies the consumer's messages in order until it fails. It
// returns errReseq when the iterator was stopped for a new consumer
// (reseq set, watchReseq), or the error that ended the loop.
func (r *streamRead) readStream(it jetstream.MessagesContext, reseq *atomic.Bool) error {
	for {
		m, err := it.Next()
		if err != nil {
			if reseq.Load() {
				return errReseq
			}
			return err
		}
		if err := r.handle(m); err != nil {
			return err
		}
	}
}

// handle applies one message of the consumer (applyStream), after telling
// the broker of numbers missing before it (missing), and counts it until
// the consumer has caught up (caughtUp). It returns only an error reading
// the message's metadata.
func (r *streamRead) handle(m jetstream.Msg) error {
	md, err := m.Metadata()
	if err != nil {
		return err
	}
	seq := md.Sequence.Stream
	if seq > r.last+1 {
		r.missing(seq)
	}
	r.last = seq
	if r.counts != nil {
		c := r.counts[m.Subject()]
		if c == nil {
			c = &subjectCount{first: seq}
			r.counts[m.Subject()] = c
		}
		c.n++
	}
	r.l.applyStream(&nats.Msg{Subject: m.Subject(), Header: m.Headers(), Data: m.Data()}, seq)
	if r.counts != nil && md.NumPending == 0 {
		r.caughtUp()
	}
	return nil
}

// missing handles the numbers between the last one read and seq, which
// the consumer did not deliver: other subjects (filtered), or deleted
// before this broker read them. The latter are forgotten by the broker
// (ForgetThrough). Called before r.last moves to seq.
func (r *streamRead) missing(seq uint64) {
	l := r.l
	if r.all && r.counts == nil {
		// Reading the whole stream live, nothing is deleted this young
		// unless the stream's bounds overtook this broker: say so.
		l.b.Space().ForgetThrough(seq - 1)
	} else if time.Since(r.checked) > 250*time.Millisecond {
		// Old messages of full subjects are missing as expected
		// (counted by handle); the stream's start overtaking this
		// broker is not.
		r.checked = time.Now()
		ctx, cancel := context.WithTimeout(l.ctx, l.o.AckTimeout)
		if si, err := r.str.Info(ctx); err == nil && si.State.FirstSeq > r.last+1 {
			l.b.Space().ForgetThrough(min(si.State.FirstSeq, seq) - 1)
		}
		cancel()
	}
}

// caughtUp ends the counting once the consumer has caught up with the
// stream: a subject read after start as many times as the stream keeps per
// subject may have lost older messages to that bound, so the broker marks
// its topic evicted before the first one read (MarkEvicted).
func (r *streamRead) caughtUp() {
	l := r.l
	for subj, c := range r.counts {
		if r.limit > 0 && c.n >= uint64(r.limit) && c.first > r.start {
			if t, err := DecodeTopic(strings.TrimPrefix(subj, l.subjM)); err == nil && strings.HasPrefix(subj, l.subjM) {
				l.b.Space().MarkEvicted(t, c.first-1)
			}
		}
	}
	r.counts = nil // caught up
}

// errNotCovered: the stream consumer did not take up a filter in time.
var errNotCovered = errors.New("the cluster's history is not read for this filter yet (NATS unreachable?)")

// Cover implements broker.Coverer: it adds filter to the local interest
// and waits until the stream consumer reads it.
func (l *Link) Cover(filter string) (from, old uint64, release func(), err error) {
	l.Interest(filter, 1)
	release = func() { l.Interest(filter, -1) }
	l.mu.Lock()
	_, ok := l.cover[filter]
	ready := l.ready
	l.mu.Unlock()
	if !ok && !ready { // the consumer takes it up once NATS is back
		release()
		return 0, 0, func() {}, errNotCovered
	}
	t := time.NewTimer(l.o.AckTimeout)
	defer t.Stop()
	for {
		l.mu.Lock()
		c, ok := l.cover[filter]
		f := l.fresh[filter]
		gen := l.coverGen
		l.mu.Unlock()
		if ok {
			return c, f, release, nil
		}
		select {
		case <-gen:
		case <-t.C:
			release()
			return 0, 0, func() {}, errNotCovered
		case <-l.ctx.Done():
			release()
			return 0, 0, func() {}, ErrClosed
		}
	}
}

// willApplyLive reports whether the stream consumer has yet to apply a
// message of topic t numbered seq as news (a retained message from the
// bucket is then not handed to the taps as well).
func (l *Link) willApplyLive(t string, seq uint64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lastApplied >= seq {
		return false
	}
	for f := range l.cover {
		if l.fresh[f] < seq && topic.Match(f, t) {
			return true
		}
	}
	return false
}

// live reports whether a message of topic t numbered seq is news to local
// subscribers: a filter the consumer read before it was published matches.
func (l *Link) live(t string, seq uint64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lastApplied = seq
	for f := range l.cover {
		if l.fresh[f] < seq && topic.Match(f, t) {
			return true
		}
	}
	return false
}

// applyStream applies one message of the stream numbered seq.
func (l *Link) applyStream(nm *nats.Msg, seq uint64) {
	if nm.Subject == l.o.Prefix+".gap" {
		l.b.Space().AdvanceSequence(seq)
		l.remoteGap(nm.Data, "stream")
		return
	}
	in, err := l.parseMsg(nm)
	if err != nil {
		l.b.Space().AdvanceSequence(seq)
		l.refused.Add(1)
		l.log.Debug("cluster link: bad message in the stream", "subject", nm.Subject, "seq", seq, "err", err)
		return
	}
	own := in.origin == l.ID()
	if own {
		in.m.Origin = nm.Header.Get(hdrProto) // as accepted here: the MQTT bridge does not hand MQTT's own back
		if in.m.Origin == broker.OriginCluster || strings.TrimSpace(in.m.Origin) == "" {
			in.m.Origin = broker.ProtoH3
		}
	} else if a := l.b.Auth(); a != nil && !a.Allow(in.m.Identity, auth.Publish, in.m.Topic) {
		l.b.Space().AdvanceSequence(seq)
		n := l.denied.Add(1)
		if n&(n-1) == 0 {
			l.log.Warn("cluster: message refused by the local ACL", "identity", in.m.Identity, "topic", in.m.Topic, "origin", in.origin, "denied", n)
		}
		return
	}
	apply := l.b.Space().ApplySequencedHistory
	if l.live(in.m.Topic, seq) {
		apply = l.b.Space().ApplySequenced
	}
	if err := apply(in.m, seq); err != nil {
		if errors.Is(err, broker.ErrOutOfOrder) || errors.Is(err, broker.ErrShuttingDown) {
			return
		}
		if errors.Is(err, broker.ErrRetainedFull) { // delivered all the same
			if n := l.retainedFull.Add(1); n&(n-1) == 0 {
				l.log.Warn("cluster: retained message delivered but not kept (this broker's retained store is full)", "topic", in.m.Topic, "err", err, "times", n)
			}
			if !own {
				l.received.Add(1)
			}
			return
		}
		n := l.refused.Add(1)
		if n&(n-1) == 0 {
			l.log.Warn("cluster: broker refused a message of the cluster", "topic", in.m.Topic, "err", err, "refused", n)
		}
		return
	}
	if !own {
		l.received.Add(1)
	}
}
