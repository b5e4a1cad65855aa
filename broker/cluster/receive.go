package cluster

import (
	"sync"

	"github.com/nats-io/nats.go"
)

// recvQueue holds the messages from the cluster waiting for receiveLoop,
// bounded by Options.ReceiveBuffer messages and Options.ReceiveBytes bytes
// (subject and payload). NATS hands a channel subscription's messages to
// a Go channel, which it bounds in number only (its pending byte limits do
// not apply to channel subscriptions): relayLoop moves them from that
// channel into this queue at once, and drops those beyond its bounds.
type recvQueue struct {
	mu    sync.Mutex
	q     []*nats.Msg
	bytes int
	wake  chan struct{} // cap 1: a message was queued
	room  chan struct{} // cap 1: a message was taken
}

func newRecvQueue() *recvQueue {
	return &recvQueue{wake: make(chan struct{}, 1), room: make(chan struct{}, 1)}
}

func msgSize(nm *nats.Msg) int { return len(nm.Subject) + len(nm.Data) }

// put queues nm unless that would exceed the bounds (an empty queue takes
// any one message); it reports whether nm was queued.
func (l *Link) putReceived(nm *nats.Msg) bool {
	r, size := l.rq, msgSize(nm)
	r.mu.Lock()
	if len(r.q) > 0 && (len(r.q) >= l.o.ReceiveBuffer || r.bytes+size > l.o.ReceiveBytes) {
		r.mu.Unlock()
		return false
	}
	r.q = append(r.q, nm)
	r.bytes += size
	r.mu.Unlock()
	signal(r.wake)
	return true
}

// takeReceived returns the oldest queued message, nil when there is none.
func (l *Link) takeReceived() *nats.Msg {
	r := l.rq
	r.mu.Lock()
	if len(r.q) == 0 {
		r.mu.Unlock()
		return nil
	}
	nm := r.q[0]
	r.q[0] = nil
	r.q = r.q[1:]
	if len(r.q) == 0 {
		r.q = nil
	}
	r.bytes -= msgSize(nm)
	r.mu.Unlock()
	signal(r.room)
	return nm
}

// relayLoop moves the subscriptions' messages into the receive queue,
// dropping (and counting as a slow consumer) those beyond its bounds.
func (l *Link) relayLoop() {
	defer l.wg.Done()
	for {
		select {
		case <-l.ctx.Done():
			return
		case nm := <-l.recv:
			if l.putReceived(nm) {
				continue
			}
			if n := l.slow.Add(1); n&(n-1) == 0 {
				l.log.Warn("cluster link: broker too slow for the cluster, messages dropped beyond the receive bound", "times", n,
					"receive_buffer", l.o.ReceiveBuffer, "receive_bytes", l.o.ReceiveBytes)
			}
		}
	}
}

// waitReceived queues nm, waiting for room (a catch-up reads the stream at
// the broker's pace, nothing is dropped); false once the link stops.
func (l *Link) waitReceived(nm *nats.Msg) bool {
	for !l.putReceived(nm) {
		select {
		case <-l.rq.room:
		case <-l.ctx.Done():
			return false
		}
	}
	return true
}
