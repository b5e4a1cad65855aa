// SPDX-License-Identifier: MIT

package mqtt

// quiot: a SUBSCRIBE's retained replay, paced (QUIOT.md, change 14).
//
// mochi v2.7.9 copied every retained message matching the filter
// (TopicsIndex.Messages) and queued them all at once on the client's
// reading goroutine: QoS 1 and 2 deliveries beyond the client's bounds (its
// Receive Maximum, then Capabilities.MaximumInflight) were dropped, and the
// client's PUBACKs were read only once the whole replay was queued. The
// replay now walks the retained messages in the order they were retained
// (retainedIndex), a chunk at a time, and sends one only when the client
// has room for it; what does not fit continues on a goroutine of the
// client's (replayer) that waits for room (a PUBACK, the writer taking a
// packet) while the reader goes on reading.

import (
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
)

const (
	// replayScan bounds the retained messages one step of a replay
	// examines with the index locked (a selective filter over many
	// retained messages).
	replayScan = 4096
	// replayChunk bounds the topics a replay holds picked and not yet
	// sent.
	replayChunk = 64
	// replayWait bounds one wait of a replay for room; a lost wake-up
	// costs that much.
	replayWait = time.Second
	// replayWaitShared is the wait when the bound reached is the one of
	// all clients (MaximumWritesPendingBytes): no event of this client's
	// makes room there.
	replayWaitShared = 20 * time.Millisecond
)

// retainedEntry is a retained message's place in the order of
// retainedIndex: gen orders the entries; a stub (the message was replaced
// or cleared since) keeps its gen until the index is compacted.
type retainedEntry struct {
	gen   uint64
	topic string
	stub  bool
}

// retainedIndex orders the retained messages by when they were retained,
// each under a number (gen) that grows with every retain, so a replay can
// walk them a chunk at a time from a cursor (the last gen it examined)
// while messages are retained, replaced and cleared. A replaced message
// gets a new gen (its old entry becomes a stub). Its zero value is empty
// and ready.
type retainedIndex struct {
	mu      sync.RWMutex
	entries []retainedEntry // ascending gen
	gen     uint64          // the last gen handed out
	stubs   int
}

// add puts topic at the end of the order, making a stub of its previous
// entry old (0: none), and returns its gen.
func (x *retainedIndex) add(topic string, old uint64) uint64 {
	x.mu.Lock()
	defer x.mu.Unlock()
	if old != 0 {
		x.stubLocked(old)
	}
	x.gen++
	x.entries = append(x.entries, retainedEntry{gen: x.gen, topic: topic})
	return x.gen
}

// remove makes a stub of the entry gen (0: none).
func (x *retainedIndex) remove(gen uint64) {
	if gen == 0 {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	x.stubLocked(gen)
}

// last returns the gen of the last retain.
func (x *retainedIndex) last() uint64 {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.gen
}

// stubLocked makes a stub of the entry gen and compacts the index once
// stubs are most of it. x.mu held.
func (x *retainedIndex) stubLocked(gen uint64) {
	i := x.search(gen)
	if i < len(x.entries) && x.entries[i].gen == gen && !x.entries[i].stub {
		x.entries[i].stub = true
		x.entries[i].topic = ""
		x.stubs++
	}
	if x.stubs > 64 && x.stubs > len(x.entries)/2 {
		live := make([]retainedEntry, 0, len(x.entries)-x.stubs+len(x.entries)/8)
		for _, e := range x.entries {
			if !e.stub {
				live = append(live, e)
			}
		}
		x.entries, x.stubs = live, 0
	}
}

// search returns the position of the first entry whose gen is at least
// gen.
func (x *retainedIndex) search(gen uint64) int {
	return sort.Search(len(x.entries), func(i int) bool { return x.entries[i].gen >= gen })
}

// next appends to dst the topics of the retained messages after the entry
// cursor, up to the entry limit, that filter matches (matchRetained): at
// most `most` topics, examining at most scan entries. It returns dst, the
// gen of the last entry examined (the next cursor), the number examined
// and whether the walk reached limit.
func (x *retainedIndex) next(filter string, cursor, limit uint64, dst []string, most, scan int) ([]string, uint64, int, bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	i := x.search(cursor + 1)
	scanned := 0
	for ; i < len(x.entries); i++ {
		e := &x.entries[i]
		if e.gen > limit {
			break
		}
		if len(dst) == most || scanned == scan {
			return dst, cursor, scanned, false
		}
		scanned++
		cursor = e.gen
		if !e.stub && matchRetained(filter, e.topic) {
			dst = append(dst, e.topic)
		}
	}
	return dst, cursor, scanned, true
}

// clearRetained deletes topic's retained message (an expired one). Unlike
// mochi v2.7.9, which deleted it from Retained only, it also leaves the
// retained order and clears the topic's place in the tree.
func (x *TopicsIndex) clearRetained(topic string) {
	x.root.Lock()
	defer x.root.Unlock()
	if n := x.seek(topic, 0); n != nil {
		n.Lock()
		x.order.remove(n.rgen)
		n.rgen = 0
		n.retainPath = ""
		n.Unlock()
		x.trim(n)
	}
	x.Retained.Delete(topic)
}

// fewRetained returns the topics of the retained messages filter (with a
// wildcard) matches, in the order retained up to the entry limit, if its
// branch of the tree (below the filter's levels before the first
// wildcard) holds at most `most` retained messages among at most
// replayScan particles; otherwise false. A selective filter then costs
// a walk of its branch, as in mochi, rather than a walk of every
// retained message.
//
// It holds the tree's lock (x.root), under which the tree and its
// particles' retained messages change, for the walk: at most replayScan
// particles. (Taking each particle's lock inside the walk instead would
// deadlock with RetainMessage, which holds a particle's lock while trim
// takes its parent's particles.)
func (x *TopicsIndex) fewRetained(filter string, limit uint64, most int) ([]string, bool) {
	x.root.Lock()
	defer x.root.Unlock()
	n := x.root
	for rest := filter; ; {
		level, more := cutLevel(rest)
		if level == "+" || level == "#" {
			break
		}
		if n = n.particles.get(level); n == nil {
			return nil, true
		}
		if !more {
			break
		}
		rest = rest[len(level)+1:]
	}
	type found struct {
		gen   uint64
		topic string
	}
	var fs []found
	visited := 0
	var walk func(n *particle) bool
	walk = func(n *particle) bool {
		n.particles.RLock()
		defer n.particles.RUnlock()
		for _, c := range n.particles.internal {
			if visited++; visited > replayScan {
				return false
			}
			if topic, gen := c.retainPath, c.rgen; topic != "" && gen != 0 && gen <= limit && matchRetained(filter, topic) {
				if len(fs) == most {
					return false
				}
				fs = append(fs, found{gen, topic})
			}
			if !walk(c) {
				return false
			}
		}
		return true
	}
	if !walk(n) {
		return nil, false
	}
	sort.Slice(fs, func(i, j int) bool { return fs[i].gen < fs[j].gen })
	topics := make([]string, len(fs))
	for i, f := range fs {
		topics[i] = f.topic
	}
	return topics, true
}

// matchRetained reports whether the retained message of topic is one that
// mochi's TopicsIndex.Messages returns for filter, a filter with a
// wildcard: level by level, '+' any one level and '#' any levels from
// there on but at least one (so "a/#" does not match "a", as in mochi's
// walk of the tree), and a wildcard at the first level does not match a
// topic under $SYS.
func matchRetained(filter, topic string) bool {
	for i := 0; ; i++ {
		f, fmore := cutLevel(filter)
		t, tmore := cutLevel(topic)
		if i == 0 && (f == "+" || f == "#") && t == SysPrefix {
			return false
		}
		switch f {
		case "#":
			return true
		case "+":
		default:
			if f != t {
				return false
			}
		}
		if !fmore {
			return !tmore
		}
		if !tmore {
			return false
		}
		filter, topic = filter[len(f)+1:], topic[len(t)+1:]
	}
}

// cutLevel returns the first level of s and whether more follow.
func cutLevel(s string) (string, bool) {
	if i := strings.IndexByte(s, '/'); i >= 0 {
		return s[:i], true
	}
	return s, false
}

// retainedReplay is one subscription's retained replay: where it is in
// the retained order and the topics it has picked and not yet sent.
type retainedReplay struct {
	sub       packets.Subscription
	exact     bool        // a filter without wildcards: its one topic
	limit     uint64      // the last retain before the subscription: later ones reached it live
	cursor    uint64      // the last entry examined
	walked    bool        // the walk reached limit
	picked    []string    // topics picked, not yet sent (picked[next:])
	next      int         //
	cancelled atomic.Bool // a newer SUBSCRIBE to the same filter replaced it
}

// replayStatus is what a step of a replay came to.
type replayStatus int

const (
	replayDone    replayStatus = iota // every message sent (or the client gone)
	replayBlocked                     // the client has no room: wait
	replayShared                      // the bound of all clients: wait a little
	replayMore                        // scanned its share: step again
)

// step sends the replay's next messages while the client has room for
// them, examining at most replayScan retained messages. async: on the
// replayer, where the subscription may be gone (UNSUBSCRIBE) by now.
func (r *retainedReplay) step(s *Server, cl *Client, async bool) replayStatus {
	if async {
		if _, ok := cl.State.Subscriptions.Get(r.sub.Filter); !ok {
			return replayDone
		}
	}
	scanned := 0
	for {
		if cl.Closed() || r.cancelled.Load() {
			return replayDone
		}
		if r.next == len(r.picked) {
			if r.walked {
				return replayDone
			}
			if scanned == replayScan {
				return replayMore
			}
			var n int
			r.picked, r.next = r.picked[:0], 0
			r.picked, r.cursor, n, r.walked = s.Topics.order.next(r.sub.Filter, r.cursor, r.limit, r.picked, replayChunk, replayScan-scanned)
			scanned += n
			continue
		}
		pk, ok := s.Topics.Retained.Get(r.picked[r.next])
		if !ok {
			r.picked[r.next] = ""
			r.next++
			continue
		}
		if st := s.replayRoom(cl, r.sub, &pk); st != replayMore {
			return st
		}
		r.picked[r.next] = ""
		r.next++
		if _, err := s.publishToClient(cl, r.sub, pk); err != nil {
			s.Log.Debug("failed to publish retained message", "error", err, "client", cl.ID, "listener", cl.Net.Listener, "packet", pk)
			continue
		}
		s.hooks.OnRetainPublished(cl, pk)
	}
}

// replayRoom reports whether cl has room for a retained delivery of pk
// under sub (replayMore), leaving half of its write queue, and of its
// session's QoS 1 and 2 messages (Capabilities.MaximumInflight), to live
// deliveries; a QoS 1 or 2 delivery also waits for the client's Receive
// Maximum, rather than being held in the session. A message that can
// never fit is let through (publishToClient drops it, as mochi did).
func (s *Server) replayRoom(cl *Client, sub packets.Subscription, pk *packets.Packet) replayStatus {
	if cl.State.outbound.len() >= max(1, cl.State.outbound.cap()/2) {
		return replayBlocked
	}
	caps := s.Options.Capabilities
	qos := min(pk.FixedHeader.Qos, sub.Qos, caps.MaximumQos)
	if qos > 0 {
		if cl.State.Inflight.Len() >= max(1, int(caps.MaximumInflight)/2) {
			return replayBlocked
		}
		if atomic.LoadInt32(&cl.State.Inflight.maximumSendQuota) > 0 && atomic.LoadInt32(&cl.State.Inflight.sendQuota) <= 0 {
			return replayBlocked
		}
		return replayMore
	}
	n := int64(len(pk.TopicName) + len(pk.Payload))
	if m := caps.MaximumClientWritesPendingBytes; m > 0 && n <= m {
		if q := cl.State.outboundBytes.Load(); q > 0 && q+n > m/2 {
			return replayBlocked
		}
	}
	if m := caps.MaximumWritesPendingBytes; m > 0 && n <= m && atomic.LoadInt64(&s.Info.PendingWriteBytes)+n > m {
		if cl.State.outbound.len() > 0 {
			return replayBlocked
		}
		return replayShared
	}
	return replayMore
}

// replays is the server's replayers, one per client with a retained
// replay waiting for room.
type replays struct {
	mu     sync.Mutex // adding a replay, a replayer's queue and its end
	m      sync.Map   // *Client -> *replayer
	active atomic.Int32
}

// replayer sends a client's retained replays that did not fit at once,
// one after the other, waiting for room between steps.
type replayer struct {
	cl    *Client
	queue []*retainedReplay // queue[0] is being sent; replays.mu
	wake  chan struct{}
}

// RetainedReplays returns the number of clients whose retained replay
// (publishRetainedToClient) waits for room. quiot: for tests and metrics.
func (s *Server) RetainedReplays() int { return int(s.replays.active.Load()) }

// signal wakes cl's replayer, if it has one: cl has handled a packet (a
// PUBACK or PUBCOMP may have freed room).
func (rs *replays) signal(cl *Client) {
	if rs.active.Load() == 0 {
		return
	}
	if v, ok := rs.m.Load(cl); ok {
		select {
		case v.(*replayer).wake <- struct{}{}:
		default:
		}
	}
}

// publishRetainedToClient replays the retained messages sub matches to
// cl, after its SUBACK, as far as cl has room for them now; the rest
// follows on cl's replayer as room frees up (quiot: mochi v2.7.9 queued
// them all at once, and dropped what did not fit, QUIOT.md).
func (s *Server) publishRetainedToClient(cl *Client, sub packets.Subscription, existed bool) {
	if IsSharedFilter(sub.Filter) {
		return // 4.8.2 Non-normative - Shared Subscriptions - No Retained Messages are sent to the Session when it first subscribes.
	}

	if sub.RetainHandling == 1 && existed || sub.RetainHandling == 2 { // [MQTT-3.3.1-10] [MQTT-3.3.1-11]
		return
	}

	sub.FwdRetainedFlag = true
	r := &retainedReplay{sub: sub, limit: s.Topics.order.last()} // [MQTT-3.8.4-4]
	if !strings.ContainsAny(sub.Filter, "+#") {
		if _, ok := s.Topics.Retained.Get(sub.Filter); !ok {
			return
		}
		r.exact, r.walked, r.picked = true, true, []string{sub.Filter}
	} else if topics, ok := s.Topics.fewRetained(sub.Filter, r.limit, replayChunk); ok {
		if len(topics) == 0 {
			return
		}
		r.walked, r.picked = true, topics
	}

	s.replays.mu.Lock()
	if v, ok := s.replays.m.Load(cl); ok { // behind the client's replays
		rp := v.(*replayer)
		kept := rp.queue[:1]
		for _, q := range rp.queue[1:] {
			if q.sub.Filter == sub.Filter {
				q.cancelled.Store(true)
			} else {
				kept = append(kept, q)
			}
		}
		if rp.queue[0].sub.Filter == sub.Filter {
			rp.queue[0].cancelled.Store(true)
		}
		rp.queue = append(kept, r)
		s.replays.mu.Unlock()
		s.replays.signal(cl)
		return
	}
	s.replays.mu.Unlock()

	if r.step(s, cl, false) == replayDone {
		return
	}

	s.replays.mu.Lock()
	rp := &replayer{cl: cl, queue: []*retainedReplay{r}, wake: make(chan struct{}, 1)}
	s.replays.m.Store(cl, rp)
	s.replays.active.Add(1)
	s.replays.mu.Unlock()
	go s.runReplays(rp)
}

// runReplays sends rp's replays in turn, waiting for room (a packet from
// the client, the writer taking a packet, at most replayWait), until they
// are done or the client is gone.
func (s *Server) runReplays(rp *replayer) {
	cl := rp.cl
	for {
		s.replays.mu.Lock()
		if len(rp.queue) == 0 || cl.Closed() {
			rp.queue = nil
			s.replays.m.Delete(cl)
			s.replays.active.Add(-1)
			s.replays.mu.Unlock()
			return
		}
		r := rp.queue[0]
		s.replays.mu.Unlock()

		room := cl.roomChan() // quiot: before the step looks for room (QUIOT.md, change 19)
		wait := replayWait
		switch r.step(s, cl, true) {
		case replayDone:
			s.replays.mu.Lock()
			rp.queue[0] = nil
			rp.queue = rp.queue[1:]
			s.replays.mu.Unlock()
			continue
		case replayMore:
			continue
		case replayShared:
			wait = replayWaitShared
		}

		t := time.NewTimer(wait)
		select {
		case <-rp.wake:
		case <-room:
		case <-cl.State.open.doneChan():
		case <-t.C:
		}
		t.Stop()
	}
}
