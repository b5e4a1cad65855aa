// Package cluster is the federation link of a quiot broker: several brokers
// share one topic space, its retained messages and its history through a
// NATS cluster with JetStream.
//
// A message a broker accepts (from any protocol) is published by its link to
// the JetStream stream PREFIX_HISTORY on subject PREFIX.m.<topic tokens>
// (subject.go), tagged with the broker's origin id, the publisher's
// identity, QoS, retain flag and send time. The stream keeps the history
// (bounded as the broker's history) with JetStream's replication; the same
// publish reaches, through plain NATS interest, every other broker whose
// local subscribers (HTTP/3 or MQTT) have a matching filter. The receiving
// link checks the publisher's identity against the local ACL and hands the
// message to its broker with Origin space.OriginCluster, which is never
// forwarded again: no loops. Messages a broker receives twice (overlapping
// filters, a resend after a lost acknowledgement) are delivered once.
// Retained messages are also kept in the key-value bucket PREFIX_retained,
// which every link watches, so a broker knows every retained message of the
// cluster whatever its subscribers.
//
// While NATS is unreachable local delivery goes on; the messages for the
// cluster are held (bounded by Options.HoldMessages/HoldBytes) and sent on
// reconnection; when the bound forces the link to drop some, it counts and
// logs them and announces the gap to the other brokers. A link that was cut
// off reads what it missed from the history stream when it is back
// (catchup.go). See docs/cluster.md.
//
// The link works on the broker's topic space (broker/space, reached with
// Broker.Space()), not on the HTTP/3 front end: it is the space's
// Federation (and, numbering messages cluster-wide, its Sequencer and
// Coverer), and hands the space the cluster's messages, retained messages
// and losses (space.Space.ApplySequenced, SetRetained, ForgetThrough,
// MarkEvicted, AnnounceLoss).
package cluster

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/internal/wire"
)

// Message headers of a forwarded message.
const (
	hdrOrigin   = "Quiot-Origin"
	hdrSeq      = "Quiot-Seq"
	hdrIdentity = "Quiot-Identity"
	hdrProto    = "Quiot-Proto"
	hdrQoS      = "Quiot-QoS"
	hdrRetain   = "Quiot-Retain"
	hdrTime     = "Quiot-Time"
)

// Errors of the link.
var (
	// ErrClosed: the link was closed before the message reached the cluster.
	ErrClosed = errors.New("cluster link closed")
	// ErrDropped: the message was dropped from the held messages (bound
	// reached while NATS was unreachable).
	ErrDropped = errors.New("cluster hold full: message dropped")
)

// Stats are the link's counters.
type Stats struct {
	// Connected reports a live NATS connection with the stream ready.
	Connected bool
	// Server is the NATS server connected to ("" when down).
	Server string
	// Forwarded counts messages JetStream acknowledged.
	Forwarded uint64
	// Received counts messages from other brokers handed to this one.
	Received uint64
	// Duplicates counts messages received more than once (dropped).
	Duplicates uint64
	// Denied counts received messages the local ACL refused.
	Denied uint64
	// Refused counts received messages the broker refused (bad topic, too
	// large, retained store full).
	Refused uint64
	// Held is the number of messages waiting to be sent; HeldBytes their
	// payload and topic bytes.
	Held      int
	HeldBytes int64
	// Dropped counts held messages dropped at the hold bound.
	Dropped uint64
	// Resent counts messages sent again after a failed acknowledgement.
	Resent uint64
	// SlowConsumer counts messages from the cluster dropped because this
	// broker did not take them fast enough: each one beyond
	// Options.ReceiveBuffer or ReceiveBytes, and once each time NATS itself
	// dropped some.
	SlowConsumer uint64
	// RemoteGaps counts gaps other brokers announced.
	RemoteGaps uint64
	// Reconnects counts reconnections to NATS.
	Reconnects uint64
	// CaughtUp counts messages read from the history stream after a
	// reconnection (those published while this broker was cut off; the
	// duplicate check drops the ones that had arrived).
	CaughtUp uint64
	// Subjects is the number of NATS subscriptions for local interest.
	Subjects int
	// Epoch is the cluster epoch once the link read it from the stream
	// (cluster-wide numbering; 0 before, or with LocalNumbering).
	Epoch uint64
}

// item is one message on its way to the cluster.
type item struct {
	m    *broker.Message
	id   uint64 // this broker run's number for it (the message id)
	size int64
	c    *commit
}

// commit implements broker.Commit.
// (and broker.SeqCommit).
type commit struct {
	once sync.Once
	done chan struct{}
	err  error
	seq  uint64 // the stream sequence number (set before done is closed)
}

func (c *commit) Done() <-chan struct{} { return c.done }
func (c *commit) Err() error            { return c.err }
func (c *commit) Seq() uint64           { return c.seq }
func (c *commit) finish(err error)      { c.finishSeq(0, err) }
func (c *commit) finishSeq(seq uint64, err error) {
	if c != nil {
		c.once.Do(func() {
			c.seq, c.err = seq, err
			close(c.done)
		})
	}
}

// Link is one broker's connection to the cluster. It implements
// broker.Federation and broker.FederationStatus.
type Link struct {
	o      Options
	idp    atomic.Pointer[string] // origin tag: name-epoch (ID)
	log    *slog.Logger
	subjM  string // PREFIX.m.
	stream string
	bucket string

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu        sync.Mutex
	queue     []item // held for the cluster, oldest first
	queueB    int64
	wake      chan struct{} // cap 1: queue or connection changed
	ready     bool          // connected and JetStream set up
	interest  map[string]int
	subs      map[string]*nats.Subscription
	dirty     chan struct{} // cap 1: interest changed
	lost      gapNote       // dropped while held, not yet announced
	lostLocal []string      // topics of dropped messages not yet announced to local subscribers (seqMode)
	nextID    uint64        // the last item id (seqMode: the hub does not number)
	// seqMode: the link numbers messages with the stream's sequence (set at
	// Start: not Options.LocalNumbering and the broker has no Store).
	seqMode atomic.Bool
	// With cluster-wide numbers (seq.go): cover maps a filter the stream
	// consumer reads to the first stream number read for it, fresh to the
	// stream's last number when that began; coverAll: the consumer reads the
	// whole stream since allFrom; coverGen is closed when cover changes;
	// reseq asks for a consumer with the current filters; lastApplied is the
	// last stream number the consumer read.
	cover, fresh map[string]uint64
	coverAll     bool
	allFrom      uint64
	coverGen     chan struct{}
	reseq        chan struct{}
	lastApplied  uint64
	consSubjects int // the consumer's subject filters (0: the whole stream)
	// early: filters subscribed while NATS was unreachable, with the last
	// number applied then (their news begins there, not at the stream's end).
	early     map[string]uint64
	gapsSeen  map[string]struct{}
	marked    bool      // requeueAfterMark ran (sendLoop only)
	markVal   string    // this run's forwarded mark as the bucket has it
	markAt    time.Time // last putMark (sendLoop only)
	downSince time.Time

	b    *broker.Broker
	nc   *nats.Conn
	js   jetstream.JetStream
	kv   jetstream.KeyValue
	recv chan *nats.Msg
	// rq holds recv's messages for receiveLoop, bounded in bytes (receive.go).
	rq *recvQueue
	// retCh carries retained messages from the bucket's watcher to
	// receiveLoop, so that both paths share one duplicate check.
	retCh chan incoming
	// watched is closed once the bucket watcher has read the initial values.
	watched     chan struct{}
	watchedOnce sync.Once
	seen        dedup

	forwarded, received, dups, denied, refused atomic.Uint64
	dropped, resent, slow, remoteGaps, reconn  atomic.Uint64
	caughtUp                                   atomic.Uint64
	epoch, retainedFull                        atomic.Uint64 // seq.go

	// fault, set by tests only (export_test.go), fails a bucket put (op
	// "put", the key) or a gap announcement (op "gap", the note's topics
	// joined by ",") when it returns an error; it is also told of a remote
	// gap note's arrival (op "remote-gap-enter", key the path), its
	// taking (op "remote-gap") or its being ignored (op
	// "remote-gap-ignored"), where a test may hold the caller.
	fault atomic.Pointer[func(op, key string) error]

	gapMu sync.Mutex // remoteGap's check and announcement, one note at a time
}

// gapNote is a run of dropped messages (this broker's message ids) and
// their topics (at most maxGapTopics; More: there were more).
type gapNote struct {
	From, To, Count uint64
	Topics          []string
	More            bool
}

// then returns the note for g followed by the later drops of next (a note
// not announced yet and the drops since).
func (g gapNote) then(next gapNote) gapNote {
	if next.Count == 0 {
		return g
	}
	if g.Count == 0 {
		return next
	}
	g.To = next.To
	g.Count += next.Count
	g.More = g.More || next.More
	g.Topics = slices.Clone(g.Topics)
	for _, t := range next.Topics {
		if slices.Contains(g.Topics, t) {
			continue
		}
		if len(g.Topics) < maxGapTopics {
			g.Topics = append(g.Topics, t)
		} else {
			g.More = true
		}
	}
	return g
}

// maxGapTopics bounds the topics a gap note names.
const maxGapTopics = 64

var _ broker.Federation = (*Link)(nil)

// New checks the options and returns a link that is not connected yet:
// pass it as broker.Options.Cluster, then Start it with the broker.
func New(o Options) (*Link, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	var rb [4]byte
	_, _ = crand.Read(rb[:])
	l := &Link{
		o:        o,
		log:      o.Logger.With("part", "cluster"),
		subjM:    o.Prefix + ".m.",
		stream:   o.Prefix + "_history",
		bucket:   o.Prefix + "_retained",
		wake:     make(chan struct{}, 1),
		dirty:    make(chan struct{}, 1),
		interest: map[string]int{},
		gapsSeen: map[string]struct{}{},
		subs:     map[string]*nats.Subscription{},
		cover:    map[string]uint64{},
		fresh:    map[string]uint64{},
		early:    map[string]uint64{},
		coverGen: make(chan struct{}),
		reseq:    make(chan struct{}, 1),
		recv:     make(chan *nats.Msg, o.ReceiveBuffer),
		rq:       newRecvQueue(),
		retCh:    make(chan incoming, 1024),
		watched:  make(chan struct{}),
		seen:     newDedup(1 << 16),
	}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	l.setID(sanitizeName(o.Name) + "-" + hex.EncodeToString(rb[:])) // Start: name-epoch
	return l, nil
}

// sanitizeName keeps a name usable in a header and a log.
func sanitizeName(s string) string {
	var b strings.Builder
	for _, r := range s {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			b.WriteRune(r)
		}
	}
	if b.Len() == 0 {
		return "quiot"
	}
	return b.String()
}

// ID returns this link's origin tag: --cluster-name and the broker's epoch
// (unique per broker run; kept across restarts of a durable broker).
func (l *Link) ID() string { return *l.idp.Load() }

func (l *Link) setID(id string) { l.idp.Store(&id) }

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// Forward implements broker.Federation: it queues m for the cluster. When
// the link is up, the returned commit ends with JetStream's
// acknowledgement (and, with cluster-wide numbers, carries the stream
// sequence number); while it is down, nil (the publisher is not held up:
// the message waits in the bounded hold; with LocalNumbering local delivery
// goes on, with cluster-wide numbers it is delivered, here too, once the
// stream has numbered it). After Close: nil, or with cluster-wide numbers a
// commit failed with ErrClosed.
func (l *Link) Forward(m *broker.Message) broker.Commit {
	it := item{m: m, id: m.Seq, size: int64(len(m.Topic) + len(m.Payload))}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ctx.Err() != nil {
		if m.Seq == 0 { // cluster-wide numbers: nobody will number it, the publisher must know
			c := &commit{done: make(chan struct{})}
			c.finish(ErrClosed)
			return c
		}
		return nil
	}
	if m.Seq == 0 { // cluster-wide numbers (also before Start): the hub did not number it
		l.nextID++
		it.id = l.nextID
	}
	if l.ready {
		it.c = &commit{done: make(chan struct{})}
	}
	for len(l.queue) > 0 && (len(l.queue) >= l.o.HoldMessages || l.queueB+it.size > l.o.HoldBytes) {
		old := l.queue[0]
		l.queue[0] = item{}
		l.queue = l.queue[1:]
		l.queueB -= old.size
		old.c.finish(ErrDropped)
		l.noteDropped(old)
	}
	l.queue = append(l.queue, it)
	l.queueB += it.size
	signal(l.wake)
	if it.c == nil {
		return nil
	}
	return it.c
}

// noteDropped records a message lost at the hold bound. l.mu held.
func (l *Link) noteDropped(it item) {
	seq := it.id
	n := l.dropped.Add(1)
	if l.lost.Count == 0 {
		l.lost.From = seq
	}
	l.lost.To = seq
	l.lost.Count++
	if !slices.Contains(l.lost.Topics, it.m.Topic) {
		if len(l.lost.Topics) < maxGapTopics {
			l.lost.Topics = append(l.lost.Topics, it.m.Topic)
		} else {
			l.lost.More = true
		}
	}
	if it.m.Seq == 0 {
		// Never numbered, so never delivered here either: the local
		// subscribers are told by the send loop (the hub's lock is held now).
		if len(l.lostLocal) <= maxGapTopics && !slices.Contains(l.lostLocal, it.m.Topic) {
			l.lostLocal = append(l.lostLocal, it.m.Topic)
		}
		signal(l.wake)
	}
	if n&(n-1) == 0 {
		l.log.Warn("cluster hold full: dropping messages for other brokers (a gap is announced when the link is back)", "dropped", n, "hold_messages", l.o.HoldMessages, "hold_bytes", l.o.HoldBytes)
	}
}

// Interest implements broker.Federation.
func (l *Link) Interest(filter string, delta int) {
	l.mu.Lock()
	n := l.interest[filter] + delta
	if n <= 0 {
		delete(l.interest, filter)
		delete(l.cover, filter) // seq.go
		delete(l.fresh, filter)
		delete(l.early, filter)
	} else {
		l.interest[filter] = n
		if _, ok := l.cover[filter]; !ok {
			if l.coverAll { // the whole stream is read: covered from here on
				l.cover[filter], l.fresh[filter] = l.allFrom, l.lastApplied
				l.coverChanged()
			} else {
				if _, ok := l.early[filter]; !ok && !l.ready {
					// NATS is unreachable: what reaches the stream until the
					// consumer reads this filter may be news to it.
					l.early[filter] = l.lastApplied
				}
				signal(l.reseq) // seq.go: read it too
			}
		}
	}
	l.mu.Unlock()
	signal(l.dirty)
}

// Start connects to NATS (in the background: an unreachable cluster is
// retried with backoff while the broker serves locally) and begins
// forwarding and receiving for b. Call it once, after broker.New with
// Options.Cluster = l.
func (l *Link) Start(b *broker.Broker) error {
	l.b = b
	// The origin id is the name and the broker's epoch: a durable broker
	// keeps its epoch across restarts, so its message ids stay the same
	// (mark.go); a memory-only broker takes a new epoch each run.
	l.setID(sanitizeName(l.o.Name) + "-" + strconv.FormatUint(b.Epoch(), 16))
	lim := b.Limits()
	if l.o.HistoryPerTopic == 0 {
		l.o.HistoryPerTopic = max(lim.HistoryPerTopic, 0)
	}
	if l.o.HistoryBytes == 0 {
		l.o.HistoryBytes = lim.HistoryBytes
	}
	opts, err := l.natsOptions()
	if err != nil {
		return err
	}
	nc, err := nats.Connect(l.o.URLs, opts...)
	if err != nil {
		return fmt.Errorf("couldn't connect to nats: %w", err)
	}
	l.nc = nc
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return fmt.Errorf("couldn't open jetstream: %w", err)
	}
	l.js = js
	l.seqMode.Store(b.Space().Sequenced())
	if !l.seqMode.Load() {
		why := "--cluster-local-numbering"
		if !l.o.LocalNumbering {
			why = "a durable broker (--data-dir) numbers its messages itself"
		}
		l.log.Info("per-broker sequence numbers: a resume on another broker is announced as a gap", "why", why)
	}
	l.wg.Add(4)
	go l.relayLoop() // receive.go
	go l.sendLoop()
	go l.interestLoop()
	go l.receiveLoop()
	if l.seqMode.Load() {
		l.wg.Add(1)
		go l.seqLoop() // seq.go
	}
	return nil
}

// Sequencing implements broker.Sequencer: the cluster numbers messages
// unless Options.LocalNumbering.
func (l *Link) Sequencing() bool { return !l.o.LocalNumbering }

// natsOptions turns Options into the NATS client's.
func (l *Link) natsOptions() ([]nats.Option, error) {
	o := l.o
	opts := []nats.Option{
		nats.Name("quiot " + l.ID()),
		nats.NoEcho(), // our own messages are not handed back to us
		nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1),
		nats.ReconnectBufSize(-1), // the link holds messages itself, bounded
		nats.CustomReconnectDelay(func(attempts int) time.Duration {
			d := o.ReconnectWait << min(attempts, 16)
			d = min(d, o.MaxReconnectWait)
			return d/2 + rand.N(d/2+1)
		}),
		nats.ConnectHandler(func(nc *nats.Conn) {
			l.log.Info("cluster link connected", "server", nc.ConnectedUrlRedacted(), "id", l.ID())
			signal(l.wake)
		}),
		nats.DisconnectErrHandler(func(nc *nats.Conn, err error) {
			l.setDown(err)
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			l.reconn.Add(1)
			l.log.Info("cluster link reconnected", "server", nc.ConnectedUrlRedacted())
			signal(l.wake)
		}),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			if errors.Is(err, nats.ErrSlowConsumer) {
				n := l.slow.Add(1)
				if n&(n-1) == 0 {
					l.log.Warn("cluster link: broker too slow for the cluster, NATS dropped messages", "times", n)
				}
				return
			}
			l.log.Warn("cluster link error", "err", err)
		}),
	}
	switch {
	case o.User != "" || o.Password != "":
		opts = append(opts, nats.UserInfo(o.User, o.Password))
	case o.Token != "":
		opts = append(opts, nats.Token(o.Token))
	case o.NKeySeedFile != "":
		nk, err := nats.NkeyOptionFromSeed(o.NKeySeedFile)
		if err != nil {
			return nil, fmt.Errorf("couldn't read nkey seed: %w", err)
		}
		opts = append(opts, nk)
	case o.CredsFile != "":
		opts = append(opts, nats.UserCredentials(o.CredsFile))
	}
	if o.CAFile != "" {
		opts = append(opts, nats.RootCAs(o.CAFile))
	}
	if o.CertFile != "" {
		opts = append(opts, nats.ClientCert(o.CertFile, o.KeyFile))
	}
	return opts, nil
}

// setDown marks the link down (NATS disconnected).
func (l *Link) setDown(err error) {
	l.mu.Lock()
	was := l.ready
	l.ready = false
	if l.downSince.IsZero() {
		l.downSince = time.Now()
	}
	l.mu.Unlock()
	if was && l.ctx.Err() == nil {
		l.log.Warn("cluster link down: local delivery goes on, messages for other brokers are held", "err", err, "hold_messages", l.o.HoldMessages)
	}
	signal(l.wake)
}

// setup creates (or finds) the history stream and the retained bucket.
func (l *Link) setup(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, l.o.AckTimeout)
	defer cancel()
	cfg := jetstream.StreamConfig{
		Name:       l.stream,
		Metadata:   map[string]string{epochKey: wire.FormatEpoch(randomEpoch())}, // seq.go
		Subjects:   []string{l.subjM + ">", l.o.Prefix + ".gap"},
		Storage:    jetstream.FileStorage,
		Replicas:   l.o.Replicas,
		Discard:    jetstream.DiscardOld,
		Duplicates: 2 * time.Minute,
		MaxBytes:   l.o.HistoryBytes,
	}
	if l.o.HistoryPerTopic > 0 {
		cfg.MaxMsgsPerSubject = int64(l.o.HistoryPerTopic)
	} else {
		cfg.MaxMsgsPerSubject = 1
	}
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = -1
	}
	if _, err := l.js.CreateStream(ctx, cfg); err != nil {
		if !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return fmt.Errorf("couldn't create stream %s: %w", l.stream, err)
		}
		if _, err := l.js.Stream(ctx, l.stream); err != nil {
			return fmt.Errorf("couldn't find stream %s: %w", l.stream, err)
		}
	}
	if l.kv == nil {
		kv, err := l.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket:   l.bucket,
			History:  1,
			Storage:  jetstream.FileStorage,
			Replicas: l.o.Replicas,
		})
		if err != nil {
			return fmt.Errorf("couldn't open bucket %s: %w", l.bucket, err)
		}
		l.kv = kv
		w, err := kv.WatchAll(l.ctx)
		if err != nil {
			l.kv = nil
			return fmt.Errorf("couldn't watch bucket %s: %w", l.bucket, err)
		}
		l.wg.Add(1)
		go l.watchRetained(w)
	}
	return nil
}

// sendLoop forwards the held messages in order, with JetStream
// acknowledgements, and (re)establishes the JetStream state.
func (l *Link) sendLoop() {
	defer l.wg.Done()
	backoff := l.o.ReconnectWait
	wait := func(d time.Duration) bool {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-l.ctx.Done():
			return false
		case <-l.wake:
			return true
		case <-t.C:
			return true
		}
	}
	for l.ctx.Err() == nil {
		l.mu.Lock()
		ready := l.ready
		lostLocal := l.lostLocal
		l.lostLocal = nil
		l.mu.Unlock()
		if len(lostLocal) > 0 {
			if len(lostLocal) > maxGapTopics {
				lostLocal = nil // several topics: every subscriber
			}
			l.b.Space().AnnounceLoss(lostLocal)
		}
		if !ready {
			if !l.nc.IsConnected() {
				if !wait(time.Second) {
					return
				}
				continue
			}
			if err := l.setup(l.ctx); err != nil {
				l.log.Warn("cluster link: jetstream not ready, retrying", "err", err, "in", backoff)
				if !wait(backoff) {
					return
				}
				backoff = min(backoff*2, l.o.MaxReconnectWait)
				continue
			}
			// The gap note goes into the stream before any held message,
			// so that other brokers' subscribers learn of the loss before
			// they see the messages after it: announced again until the
			// stream has it (a failed announcement given up lost the gap,
			// and a later message came first).
			if err := l.announceLost(); err != nil {
				l.log.Warn("cluster link: couldn't announce a gap, retrying before the held messages are sent", "err", err, "in", backoff)
				if !wait(backoff) {
					return
				}
				backoff = min(backoff*2, l.o.MaxReconnectWait)
				continue
			}
			backoff = l.o.ReconnectWait
			l.mu.Lock()
			l.ready = true
			down := l.downSince
			l.downSince = time.Time{}
			l.mu.Unlock()
			if !down.IsZero() {
				l.log.Info("cluster link up again", "down_for", time.Since(down).Round(time.Millisecond))
				if !l.seqMode.Load() { // the stream consumer resumes by itself (seq.go)
					l.wg.Add(1)
					go l.catchUp(down) // catchup.go
				}
			}
			l.log.Info("cluster link ready", "stream", l.stream, "bucket", l.bucket, "replicas", l.o.Replicas, "id", l.ID())
			if !l.marked {
				l.marked = true
				l.requeueAfterMark() // mark.go
			}
			signal(l.dirty)
		}
		l.mu.Lock()
		n := min(len(l.queue), 256)
		batch := make([]item, n)
		copy(batch, l.queue[:n])
		l.mu.Unlock()
		if n == 0 {
			if !wait(time.Minute) {
				return
			}
			continue
		}
		sent := l.sendBatch(batch)
		l.mu.Lock()
		// The hold may have dropped some of the batch meanwhile: remove
		// only what is still at the front.
		for _, it := range batch[:sent] {
			if len(l.queue) > 0 && l.queue[0].m == it.m {
				l.queue[0] = item{}
				l.queue = l.queue[1:]
				l.queueB -= it.size
			}
		}
		if len(l.queue) == 0 {
			l.queue = nil
		}
		l.mu.Unlock()
		if sent > 0 && !l.seqMode.Load() && (time.Since(l.markAt) >= markEvery || sent == n && l.heldCount() == 0) {
			l.markAt = time.Now()
			l.putMark(batch[sent-1].id)
		}
		if sent < n {
			l.resent.Add(uint64(n - sent))
			if !wait(backoff) {
				return
			}
			backoff = min(backoff*2, l.o.MaxReconnectWait)
		} else {
			backoff = l.o.ReconnectWait
		}
	}
}

// heldCount is the number of held messages.
func (l *Link) heldCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.queue)
}

// sendBatch publishes the batch and returns how many from the front are
// acknowledged (their commits are finished).
func (l *Link) sendBatch(batch []item) int {
	futs := make([]jetstream.PubAckFuture, 0, len(batch))
	for _, it := range batch {
		f, err := l.js.PublishMsgAsync(l.msgOf(it), jetstream.WithMsgID(l.ID()+"-"+strconv.FormatUint(it.id, 10)), jetstream.WithExpectStream(l.stream))
		if err != nil {
			break
		}
		futs = append(futs, f)
	}
	timer := time.NewTimer(l.o.AckTimeout)
	defer timer.Stop()
	sent := 0
	for i, f := range futs {
		var ack *jetstream.PubAck
		select {
		case ack = <-f.Ok():
		case err := <-f.Err():
			l.log.Debug("cluster publish failed", "err", err)
			return sent
		case <-timer.C:
			l.log.Debug("cluster publish: no acknowledgement", "timeout", l.o.AckTimeout)
			return sent
		case <-l.ctx.Done():
			return sent
		}
		it := batch[i]
		seq := it.m.Seq // numbered by the broker (LocalNumbering, a Store)
		if seq == 0 {
			seq = ack.Sequence // cluster-wide numbers
		}
		if it.m.Retain {
			l.putRetained(it.m, seq)
		}
		it.c.finishSeq(seq, nil)
		l.forwarded.Add(1)
		sent++
	}
	return sent
}

// msgOf is the NATS message of a forwarded broker message.
func (l *Link) msgOf(it item) *nats.Msg {
	m := it.m
	h := nats.Header{}
	h.Set(hdrOrigin, l.ID())
	h.Set(hdrSeq, strconv.FormatUint(it.id, 10))
	if m.Identity != "" {
		h.Set(hdrIdentity, m.Identity)
	}
	if m.Origin != "" {
		h.Set(hdrProto, m.Origin)
	}
	if m.QoS != 0 {
		h.Set(hdrQoS, strconv.Itoa(int(m.QoS)))
	}
	if m.Retain {
		h.Set(hdrRetain, "1")
	}
	if m.Time != 0 {
		h.Set(hdrTime, strconv.FormatInt(m.Time, 10))
	}
	return &nats.Msg{Subject: l.subjM + EncodeTopic(m.Topic), Header: h, Data: m.Payload}
}

// putRetained stores a retained message (or its clearing) in the bucket,
// with its sequence number seq. The message is in the history stream
// already, so a put that fails (no acknowledgement within AckTimeout under
// load, a leader election of the bucket's stream, NATS unreachable) is made
// again, with the reconnect backoff, until it is stored or the link stops:
// given up, the other brokers would never learn the topic's retained
// message (a broker of a cluster missing a device's last value). The send
// loop makes the puts one after the other, so a retry cannot overwrite a
// newer value of the same topic; a put that failed on the client's side but
// was stored is stored again, which the brokers ignore (same sequence number).
func (l *Link) putRetained(m *broker.Message, seq uint64) {
	if l.kv == nil {
		return
	}
	key, val := EncodeTopic(m.Topic), encodeRetained(l.ID(), m, seq)
	backoff := l.o.ReconnectWait
	for failed := uint64(1); ; failed++ {
		err := l.kvPut(key, val)
		if err == nil {
			if failed > 1 {
				l.log.Info("cluster link: retained message stored", "topic", m.Topic, "attempts", failed)
			}
			return
		}
		if failed&(failed-1) == 0 { // 1st, 2nd, 4th, ... failure
			l.log.Warn("cluster link: couldn't store retained message, trying again", "topic", m.Topic, "err", err, "attempts", failed)
		}
		t := time.NewTimer(backoff)
		select {
		case <-l.ctx.Done():
			t.Stop()
			l.log.Warn("cluster link: retained message not stored (link stopped)", "topic", m.Topic)
			return
		case <-t.C:
		}
		backoff = min(2*backoff, l.o.MaxReconnectWait)
	}
}

// kvPut puts one bucket value, within AckTimeout.
func (l *Link) kvPut(key string, val []byte) error {
	if f := l.fault.Load(); f != nil {
		if err := (*f)("put", key); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(l.ctx, l.o.AckTimeout)
	defer cancel()
	_, err := l.kv.Put(ctx, key, val)
	return err
}

// announceLost announces the messages dropped at the hold bound while the
// link was down (l.lost), until none are left: drops while an announcement
// is on its way make another one. On failure the note waits in l.lost,
// followed by the drops since. The link is not ready yet, so nothing held
// is sent meanwhile.
func (l *Link) announceLost() error {
	for {
		l.mu.Lock()
		lost := l.lost
		l.lost = gapNote{}
		l.mu.Unlock()
		if lost.Count == 0 {
			return nil
		}
		if err := l.announceGap(lost); err != nil {
			l.mu.Lock()
			l.lost = lost.then(l.lost)
			l.mu.Unlock()
			return err
		}
	}
}

// announceGap tells the other brokers that messages of this one were lost
// on their way to the cluster. The note goes into the history stream, so a
// broker that reconnects later reads it in its catch-up.
func (l *Link) announceGap(g gapNote) error {
	body, _ := json.Marshal(gapBody{Origin: l.ID(), From: g.From, To: g.To, Count: g.Count, Topics: g.Topics, More: g.More})
	if f := l.fault.Load(); f != nil {
		if err := (*f)("gap", strings.Join(g.Topics, ",")); err != nil {
			return fmt.Errorf("announce gap %s: %w", body, err)
		}
	}
	ctx, cancel := context.WithTimeout(l.ctx, l.o.AckTimeout)
	defer cancel()
	if _, err := l.js.Publish(ctx, l.o.Prefix+".gap", body); err != nil {
		return fmt.Errorf("announce gap %s: %w", body, err)
	}
	l.log.Warn("cluster link: messages for other brokers were dropped while the link was down (gap announced)", "from_seq", g.From, "to_seq", g.To, "count", g.Count)
	return nil
}

// gapBody is a gap note on PREFIX.gap: messages From..To (the origin's
// message ids), Count of them, on Topics (More: and others) never reached
// the cluster.
type gapBody struct {
	Origin string   `json:"origin"`
	From   uint64   `json:"from"`
	To     uint64   `json:"to"`
	Count  uint64   `json:"count"`
	Topics []string `json:"topics,omitempty"`
	More   bool     `json:"more,omitempty"`
}

// remoteGap notes a gap another broker announced (once, whether it came
// live, in a catch-up or through the stream) and tells the local
// subscribers of its topics (all of them when it does not name them all).
//
// The note is marked seen and its subscribers told under l.gapMu, so a
// second copy (another path) returns only once the first one's
// announcement is queued: a caller that goes on to apply the origin's
// later messages cannot deliver them ahead of the gap. via names the path
// ("core", "stream", "catch-up") for the test seam.
func (l *Link) remoteGap(body []byte, via string) {
	if len(body) > 64<<10 {
		body = body[:64<<10] // a bound on what is remembered; it no longer parses
	}
	if f := l.fault.Load(); f != nil {
		_ = (*f)("remote-gap-enter", via)
	}
	l.gapMu.Lock()
	defer l.gapMu.Unlock()
	l.mu.Lock()
	_, seen := l.gapsSeen[string(body)]
	if !seen {
		if len(l.gapsSeen) > 1024 {
			clear(l.gapsSeen)
		}
		l.gapsSeen[string(body)] = struct{}{}
	}
	l.mu.Unlock()
	if seen {
		return
	}
	if f := l.fault.Load(); f != nil {
		_ = (*f)("remote-gap", via)
	}
	var g gapBody
	if err := json.Unmarshal(body, &g); err != nil || g.More {
		g.Topics = nil
	}
	if g.Origin == l.ID() {
		return // our own note (through the stream): our subscribers were told
	}
	told := l.b.Space().AnnounceLoss(g.Topics)
	l.remoteGaps.Add(1) // after the subscribers were told (tests wait on it)
	l.log.Warn("cluster: another broker lost messages on their way to the cluster", "gap", string(body), "subscriptions_told", told)
}

// interestLoop keeps the NATS subscriptions equal to the local interest.
func (l *Link) interestLoop() {
	defer l.wg.Done()
	gapSub, err := l.nc.Subscribe(l.o.Prefix+".gap", func(m *nats.Msg) {
		if l.seqMode.Load() {
			// With cluster-wide numbers the stream consumer reads every gap
			// note in its place among the messages (seq.go); taken here too,
			// out of that order, a note could be marked seen by this path
			// while the consumer goes on to the origin's later messages.
			if f := l.fault.Load(); f != nil {
				_ = (*f)("remote-gap-ignored", "core")
			}
			return
		}
		l.remoteGap(m.Data, "core")
	})
	if err != nil {
		l.log.Warn("cluster link: couldn't subscribe to gap announcements", "err", err)
	}
	defer func() {
		if gapSub != nil {
			_ = gapSub.Unsubscribe()
		}
	}()
	for {
		select {
		case <-l.ctx.Done():
			return
		case <-l.dirty:
		}
		l.syncInterest()
	}
}

// syncInterest subscribes and unsubscribes NATS subjects (with cluster-wide
// numbers every message comes from the stream instead, seq.go).
func (l *Link) syncInterest() {
	if l.seqMode.Load() {
		return
	}
	l.mu.Lock()
	want := map[string]bool{}
	for f := range l.interest {
		for _, s := range FilterSubjects(f) {
			want[l.subjM+s] = true
		}
	}
	var add, drop []string
	for s := range want {
		if l.subs[s] == nil {
			add = append(add, s)
		}
	}
	for s := range l.subs {
		if !want[s] {
			drop = append(drop, s)
		}
	}
	l.mu.Unlock()
	for _, s := range drop {
		l.mu.Lock()
		sub := l.subs[s]
		delete(l.subs, s)
		l.mu.Unlock()
		_ = sub.Unsubscribe()
	}
	for _, s := range add {
		sub, err := l.nc.ChanSubscribe(s, l.recv)
		if err != nil {
			l.log.Warn("cluster link: couldn't subscribe", "subject", s, "err", err)
			continue
		}
		l.mu.Lock()
		l.subs[s] = sub
		l.mu.Unlock()
	}
	if len(add) > 0 || len(drop) > 0 {
		_ = l.nc.FlushTimeout(5 * time.Second)
	}
}

// WaitInterest returns once the NATS subscriptions for the current local
// interest are registered with the NATS server (for tests and benchmarks;
// other NATS nodes learn of it shortly after).
func (l *Link) WaitInterest(ctx context.Context) error {
	for {
		l.mu.Lock()
		ok := true
		for f := range l.interest {
			for _, s := range FilterSubjects(f) {
				if l.subs[l.subjM+s] == nil {
					ok = false
				}
			}
		}
		l.mu.Unlock()
		if ok {
			return l.nc.FlushWithContext(ctx)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// incoming is a message from another broker.
type incoming struct {
	key    string // origin-seq: the duplicate check
	origin string
	proto  string // the protocol it came in by (retained bucket values)
	m      broker.Message
}

// parseMsg reads a forwarded message.
func (l *Link) parseMsg(nm *nats.Msg) (incoming, error) {
	var in incoming
	name, ok := strings.CutPrefix(nm.Subject, l.subjM)
	if !ok {
		return in, fmt.Errorf("%w: %q outside %s", ErrBadSubject, nm.Subject, l.subjM)
	}
	t, err := DecodeTopic(name)
	if err != nil {
		return in, err
	}
	in.origin = nm.Header.Get(hdrOrigin)
	seq := nm.Header.Get(hdrSeq)
	if in.origin == "" || seq == "" {
		return in, errors.New("message without origin")
	}
	in.key = in.origin + "-" + seq
	qos, _ := strconv.Atoi(nm.Header.Get(hdrQoS))
	tm, _ := strconv.ParseInt(nm.Header.Get(hdrTime), 10, 64)
	in.m = broker.Message{
		Topic:    t,
		Payload:  nm.Data,
		QoS:      byte(min(max(qos, 0), 2)),
		Retain:   nm.Header.Get(hdrRetain) == "1",
		Time:     tm,
		Origin:   broker.OriginCluster,
		Identity: nm.Header.Get(hdrIdentity),
	}
	return in, nil
}

// receiveLoop hands other brokers' messages to the broker, once each.
func (l *Link) receiveLoop() {
	defer l.wg.Done()
	for {
		select {
		case <-l.ctx.Done():
			return
		case <-l.rq.wake:
			for nm := l.takeReceived(); nm != nil && l.ctx.Err() == nil; nm = l.takeReceived() {
				in, err := l.parseMsg(nm)
				if err != nil {
					l.refused.Add(1)
					l.log.Debug("cluster link: bad message", "subject", nm.Subject, "err", err)
					continue
				}
				l.deliver(in)
			}
		case in := <-l.retCh:
			l.deliver(in)
		}
	}
}
