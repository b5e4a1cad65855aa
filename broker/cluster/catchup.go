package cluster

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/quiot/quiot/internal/topic"
)

// catchUpMargin is how far before the moment the link noticed it was cut
// off the catch-up starts reading (messages in flight then).
const catchUpMargin = 2 * time.Second

// catchUpIdle ends a catch-up that receives nothing for this long.
const catchUpIdle = 3 * time.Second

// catchUp reads from the history stream what other brokers published while
// this link was cut off from NATS (plain NATS interest does not replay
// it), from since to the stream's end when it starts, and hands the
// messages local subscribers want to receiveLoop, whose duplicate check
// drops what did arrive. The NATS subscriptions are in place before it
// starts (the client renews them before it reports the reconnection), so
// what is published later arrives live.
func (l *Link) catchUp(since time.Time) {
	defer l.wg.Done()
	ctx, cancel := context.WithTimeout(l.ctx, 5*time.Minute)
	defer cancel()
	l.mu.Lock()
	var filters []string
	for f := range l.interest {
		filters = append(filters, f)
	}
	l.mu.Unlock()
	if len(filters) == 0 {
		return
	}
	str, err := l.js.Stream(ctx, l.stream)
	if err != nil {
		l.log.Warn("cluster link: couldn't catch up after reconnecting: messages of other brokers published meanwhile are missing here", "err", err)
		return
	}
	info, err := str.Info(ctx)
	if err != nil || info.State.LastSeq == 0 {
		return
	}
	last := info.State.LastSeq
	start := since.Add(-catchUpMargin)
	cons, err := str.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{l.subjM + ">", l.o.Prefix + ".gap"},
		DeliverPolicy:  jetstream.DeliverByStartTimePolicy,
		OptStartTime:   &start,
	})
	if err != nil {
		l.log.Warn("cluster link: couldn't catch up after reconnecting", "err", err)
		return
	}
	it, err := cons.Messages()
	if err != nil {
		l.log.Warn("cluster link: couldn't catch up after reconnecting", "err", err)
		return
	}
	defer it.Stop()
	// Next blocks until a message comes: stop at Close, and when nothing
	// comes for a while (the rest of the stream is older than start).
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	idle := time.AfterFunc(catchUpIdle, it.Stop)
	defer idle.Stop()
	n := 0
	for {
		m, err := it.Next()
		if err != nil {
			if !errors.Is(err, jetstream.ErrMsgIteratorClosed) && l.ctx.Err() == nil {
				l.log.Warn("cluster link: catch-up ended early", "err", err, "messages", n)
			}
			break
		}
		idle.Reset(catchUpIdle)
		md, err := m.Metadata()
		if err != nil {
			break
		}
		nm := &nats.Msg{Subject: m.Subject(), Header: m.Headers(), Data: m.Data()}
		if nm.Subject == l.o.Prefix+".gap" {
			l.remoteGap(nm.Data, "catch-up")
		} else if t, err := DecodeTopic(strings.TrimPrefix(nm.Subject, l.subjM)); err == nil && wanted(filters, t) {
			if !l.waitReceived(nm) { // receive.go
				return
			}
			n++
			l.caughtUp.Add(1)
		}
		if md.Sequence.Stream >= last {
			break
		}
	}
	l.log.Info("cluster link caught up after reconnecting", "from", start.UTC().Format(time.RFC3339), "messages", n)
}

// wanted reports whether one of the filters matches topic t.
func wanted(filters []string, t string) bool {
	for _, f := range filters {
		if topic.Match(f, t) {
			return true
		}
	}
	return false
}
