package cluster

import (
	"context"
	"strconv"
	"time"

	"github.com/quiot/quiot/broker"
)

// A durable broker (--data-dir) acknowledges a publish once its store has
// it; the copy for the cluster is held in memory until JetStream has it. So
// that a crash or restart in between loses nothing for the other brokers,
// the link keeps a mark, "this broker run has forwarded up to sequence N",
// in the retained bucket under a key no topic encodes to (markPrefix), and a
// link started on a restored store (same epoch, so the same origin id and
// message ids) forwards again what the store holds after the mark.
// JetStream drops a resend it already stored within its 2-minute duplicate
// window; older resends may reach other brokers twice (at least once, never
// lost while the history holds the message).

// markPrefix starts the bucket keys of forwarded marks: "=_" is no topic's
// encoding (an escape is = and two hex digits).
const markPrefix = "=_fwd."

// markEvery bounds how often the mark is written while messages flow.
const markEvery = 250 * time.Millisecond

func (l *Link) markKey() string { return markPrefix + l.ID() }

// putMark records that everything up to seq is in the stream.
func (l *Link) putMark(seq uint64) {
	if l.kv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(l.ctx, l.o.AckTimeout)
	defer cancel()
	if _, err := l.kv.Put(ctx, l.markKey(), []byte(strconv.FormatUint(seq, 10))); err != nil {
		l.log.Debug("cluster link: couldn't write the forwarded mark", "err", err)
	}
}

// requeueAfterMark puts the broker's history after this run's mark (a
// restored store's messages that may never have reached the cluster) in
// front of the held messages. Called once, when the link is first ready.
func (l *Link) requeueAfterMark() {
	// The bucket watcher reads the mark with the retained messages (no
	// direct get: fewer JetStream API permissions).
	select {
	case <-l.watched:
	case <-l.ctx.Done():
		return
	}
	l.mu.Lock()
	v := l.markVal
	l.mu.Unlock()
	if v == "" {
		return
	}
	mark, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return
	}
	msgs, _ := l.b.Space().HistoryAfter(mark)
	l.mu.Lock()
	defer l.mu.Unlock()
	var first uint64 // the first message forwarded by this run
	if len(l.queue) > 0 {
		first = l.queue[0].m.Seq
	}
	var again []item
	for _, m := range msgs {
		if m.Origin == broker.OriginCluster || first != 0 && m.Seq >= first {
			continue
		}
		again = append(again, item{m: m, size: int64(len(m.Topic) + len(m.Payload))})
	}
	if len(again) == 0 {
		return
	}
	for _, it := range again {
		l.queueB += it.size
	}
	l.queue = append(again, l.queue...)
	l.log.Info("cluster link: forwarding again what the restored store holds after the last forwarded mark", "mark", mark, "messages", len(again))
	signal(l.wake)
}
