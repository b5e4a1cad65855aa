package mqtt

import (
	"sync"
	"sync/atomic"

	"github.com/mochi-mqtt/server/v2/packets"
)

// writeQueueKeep is the largest backing array (in packets) a writeQueue
// keeps once it is empty; a larger one goes back to the garbage collector.
const writeQueueKeep = 8

// writeQueue is a client's queue of packets waiting for its writer, at most
// max of them. quiot: upstream used a channel of MaximumClientWritesPending
// slots made whole with the client (2 KiB with quiot's 256 slots, held for
// the life of every connection, idle or not); the queue's backing array now
// grows as packets are queued and is dropped when the queue empties, so an
// idle client holds none (QUIOT.md).
type writeQueue struct {
	mu    sync.Mutex
	items []*packets.Packet // items[head:] are queued, oldest first
	head  int
	n     atomic.Int32 // len(items) - head, read without the lock
	max   int32        // an int32 beside n, so the Client fits a smaller size class (QUIOT.md, change 19)
}

// push queues pk, or reports false if the queue is full.
func (q *writeQueue) push(pk *packets.Packet) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.items)-q.head >= int(q.max) {
		return false
	}
	if q.head > 0 && len(q.items) == cap(q.items) { // reuse the taken slots before growing
		n := copy(q.items, q.items[q.head:])
		clear(q.items[n:])
		q.items, q.head = q.items[:n], 0
	}
	q.items = append(q.items, pk)
	q.n.Add(1)
	return true
}

// pop takes the oldest queued packet, or reports false if the queue is
// empty.
func (q *writeQueue) pop() (*packets.Packet, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.head == len(q.items) {
		return nil, false
	}
	pk := q.items[q.head]
	q.items[q.head] = nil
	q.head++
	if q.head == len(q.items) {
		q.head = 0
		if cap(q.items) > writeQueueKeep {
			q.items = nil
		} else {
			q.items = q.items[:0]
		}
	}
	q.n.Add(-1)
	return pk, true
}

// len is the number of queued packets.
func (q *writeQueue) len() int { return int(q.n.Load()) }

// cap is the most packets the queue holds.
func (q *writeQueue) cap() int { return int(q.max) }
