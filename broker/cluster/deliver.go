package cluster

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/auth"
	"github.com/quiot/quiot/internal/wire"
)

// dedup remembers the last n message keys (origin-seq).
type dedup struct {
	set  map[string]struct{}
	ring []string
	next int
}

func newDedup(n int) dedup {
	return dedup{set: make(map[string]struct{}, n), ring: make([]string, n)}
}

// add reports whether key is new, and remembers it.
func (d *dedup) add(key string) bool {
	if _, ok := d.set[key]; ok {
		return false
	}
	if old := d.ring[d.next]; old != "" {
		delete(d.set, old)
	}
	d.ring[d.next] = key
	d.next = (d.next + 1) % len(d.ring)
	d.set[key] = struct{}{}
	return true
}

// deliver hands one message from another broker to the local broker, once,
// if the local ACL lets its publisher publish to its topic.
func (l *Link) deliver(in incoming) {
	if in.origin == l.ID() && !l.seqMode.Load() {
		return // with cluster-wide numbers the broker keeps its own retained messages from the bucket too
	}
	if !l.seen.add(in.key) {
		l.dups.Add(1)
		return
	}
	if a := l.b.Auth(); a != nil && in.origin != l.ID() && !a.Allow(in.m.Identity, auth.Publish, in.m.Topic) {
		n := l.denied.Add(1)
		if n&(n-1) == 0 {
			l.log.Warn("cluster: message refused by the local ACL", "identity", in.m.Identity, "topic", in.m.Topic, "origin", in.origin, "denied", n)
		}
		return
	}
	if l.seqMode.Load() {
		// Only retained messages come here (from the bucket; the stream's
		// messages go through seq.go): kept for later subscribers.
		if in.origin == l.ID() {
			in.m.Origin = in.proto // the MQTT side has its own MQTT messages
			if in.m.Origin == "" || in.m.Origin == broker.OriginCluster {
				in.m.Origin = broker.ProtoH3
			}
		}
		if err := l.b.Space().SetRetained(in.m, !l.willApplyLive(in.m.Topic, in.m.Seq)); err != nil {
			l.refused.Add(1)
		}
		return
	}
	ctx, cancel := context.WithTimeout(l.ctx, 30*time.Second)
	defer cancel()
	if _, err := l.b.Publish(ctx, in.m); err != nil {
		if errors.Is(err, broker.ErrShuttingDown) || l.ctx.Err() != nil {
			return
		}
		n := l.refused.Add(1)
		if n&(n-1) == 0 {
			l.log.Warn("cluster: broker refused a message from another broker", "topic", in.m.Topic, "err", err, "refused", n)
		}
		return
	}
	l.received.Add(1)
}

// Retained bucket values: version byte 1, then uvarint-length-prefixed
// origin, identity and protocol, uvarint sequence number, varint time,
// QoS byte, then the payload (empty: the retained message was cleared).

// encodeRetained returns the bucket value of retained message m.
func encodeRetained(origin string, m *broker.Message, seq uint64) []byte {
	b := make([]byte, 0, 32+len(origin)+len(m.Identity)+len(m.Origin)+len(m.Payload))
	b = append(b, 1)
	for _, s := range []string{origin, m.Identity, m.Origin} {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	b = binary.AppendUvarint(b, seq)
	b = binary.AppendVarint(b, m.Time)
	b = append(b, m.QoS)
	return append(b, m.Payload...)
}

// errBadValue: a retained bucket value this version cannot read.
var errBadValue = errors.New("bad retained value")

// decodeRetained reads a bucket value (the inverse of encodeRetained);
// topic is the decoded key.
func decodeRetained(topic string, v []byte) (incoming, error) {
	var in incoming
	if len(v) == 0 || v[0] != 1 {
		return in, fmt.Errorf("%w: unknown version", errBadValue)
	}
	v = v[1:]
	var strs [3]string
	for i := range strs {
		n, k := binary.Uvarint(v)
		if k <= 0 || n > uint64(len(v)-k) {
			return in, fmt.Errorf("%w: truncated", errBadValue)
		}
		strs[i] = string(v[k : k+int(n)])
		v = v[k+int(n):]
	}
	seq, k := binary.Uvarint(v)
	if k <= 0 {
		return in, fmt.Errorf("%w: truncated", errBadValue)
	}
	v = v[k:]
	tm, k := binary.Varint(v)
	if k <= 0 || len(v) < k+1 {
		return in, fmt.Errorf("%w: truncated", errBadValue)
	}
	qos := v[k]
	if qos > 2 {
		return in, fmt.Errorf("%w: qos %d", errBadValue, qos)
	}
	payload := v[k+1:]
	in.origin, in.proto = strs[0], strs[2]
	in.key = fmt.Sprintf("%s-%d", strs[0], seq)
	in.m = broker.Message{Topic: topic, Payload: payload, QoS: qos, Retain: true, Time: tm, Seq: seq, Origin: broker.OriginCluster, Identity: strs[1]}
	return in, nil
}

// watchRetained feeds the bucket's retained messages (all of them at first,
// then each change) to receiveLoop.
func (l *Link) watchRetained(w jetstream.KeyWatcher) {
	defer l.wg.Done()
	defer func() { _ = w.Stop() }()
	defer l.watchedOnce.Do(func() { close(l.watched) }) // never leave requeueAfterMark waiting
	for {
		select {
		case <-l.ctx.Done():
			return
		case e, ok := <-w.Updates():
			if !ok {
				return
			}
			if e == nil {
				l.watchedOnce.Do(func() { close(l.watched) }) // the initial values are all in
				continue
			}
			if e.Operation() != jetstream.KeyValuePut {
				continue
			}
			if strings.HasPrefix(e.Key(), markPrefix) {
				if e.Key() == l.markKey() {
					l.mu.Lock()
					l.markVal = string(e.Value())
					l.mu.Unlock()
				}
				continue // mark.go
			}
			t, err := DecodeTopic(e.Key())
			if err != nil {
				l.refused.Add(1)
				continue
			}
			in, err := decodeRetained(t, e.Value())
			if err != nil {
				l.refused.Add(1)
				l.log.Debug("cluster link: bad retained value", "key", e.Key(), "err", err)
				continue
			}
			select {
			case l.retCh <- in:
			case <-l.ctx.Done():
				return
			}
		}
	}
}

// Stats returns the link's counters.
func (l *Link) Stats() Stats {
	l.mu.Lock()
	s := Stats{Connected: l.ready, Held: len(l.queue), HeldBytes: l.queueB, Subjects: len(l.subs)}
	if l.seqMode.Load() {
		s.Subjects = l.consSubjects
	}
	l.mu.Unlock()
	if s.Connected && l.nc != nil {
		s.Server = l.nc.ConnectedUrlRedacted()
	}
	s.Forwarded, s.Received, s.Duplicates = l.forwarded.Load(), l.received.Load(), l.dups.Load()
	s.Denied, s.Refused, s.Dropped, s.Resent = l.denied.Load(), l.refused.Load(), l.dropped.Load(), l.resent.Load()
	s.SlowConsumer, s.RemoteGaps, s.Reconnects = l.slow.Load(), l.remoteGaps.Load(), l.reconn.Load()
	s.CaughtUp = l.caughtUp.Load()
	s.Epoch = l.epoch.Load()
	return s
}

// Status implements broker.FederationStatus: one line for /healthz.
func (l *Link) Status() string {
	s := l.Stats()
	l.mu.Lock()
	down := l.downSince
	l.mu.Unlock()
	numbers := fmt.Sprintf("%d subjects", s.Subjects) // LocalNumbering: NATS interest
	if l.seqMode.Load() {
		numbers = "cluster-wide numbers, epoch " + wire.FormatEpoch(s.Epoch)
	}
	if s.Connected {
		return fmt.Sprintf("connected %s (id %s, %d held, %s)", s.Server, l.ID(), s.Held, numbers)
	}
	since := ""
	if !down.IsZero() {
		since = " since " + down.UTC().Format(time.RFC3339)
	}
	return fmt.Sprintf("down%s (id %s, %d held, %d dropped; local delivery goes on)", since, l.ID(), s.Held, s.Dropped)
}

// Close stops the link: held messages not yet acknowledged are lost (their
// publishers' commits end with ErrClosed), the NATS connection is closed.
func (l *Link) Close() error {
	l.cancel()
	if l.nc != nil {
		l.nc.Close()
	}
	l.wg.Wait()
	l.mu.Lock()
	q := l.queue
	l.queue, l.queueB = nil, 0
	l.mu.Unlock()
	for _, it := range q {
		it.c.finish(ErrClosed)
	}
	return nil
}
