package space

import (
	"math"
	"slices"
	"sort"

	"github.com/quiot/quiot/internal/topic"
	"github.com/quiot/quiot/internal/wire"
)

// Replay reads what a paced subscription starts with (its retained
// messages, or the history after its resume point with the gaps), a
// bounded chunk at a time: *RetainedReplay or *HistoryReplay.
type Replay interface {
	// Next appends to dst the next frames: at most maxMsgs messages (or
	// topic gaps) and, once one is appended, no more than maxBytes of
	// payload and topic (gaps for losses the replay noted meanwhile come
	// beyond these bounds: 65 at most). It returns dst and whether more
	// may follow (false: the replay is complete).
	Next(dst []wire.Frame, maxMsgs, maxBytes int) ([]wire.Frame, bool)
}

// HistoryReplay reads the history a subscription with a resume point
// starts with, a bounded chunk at a time (Next), so that the subscriber's
// stream takes it as it is written: the broker never holds the whole
// history, nor a gap announcement per topic, for a subscriber that does
// not read (docs/security.md, "Worst cases").
//
// It replays what Subscribe returns at once: first a gap announcement for
// each matching topic whose history lost messages after the resume point
// (in the order the topics were created), then the history after the resume point in
// sequence order, up to the last message applied when the subscription
// started (later ones come live, through the Subscriber's queue). Messages
// evicted, and topics dropped, while it is under way are not replayed but
// announced as gaps on their topic (after 64 topics, one gap without topic
// for the others, as a Subscriber's queue announces its losses), once
// the replay has passed them: every message after the resume point
// arrives once, in order, or is announced lost.
type HistoryReplay struct {
	sp     *Space
	filter string
	from   uint64 // the resume point
	top    uint64 // the last message applied when the subscription started
	// Topic gaps: the topics up to lastTopic (Space.topicList) have been
	// examined; those created after topTopic came after the start.
	lastTopic, topTopic uint64
	gapsDone            bool
	// Messages: the sequence number of the last history entry examined.
	pos  uint64
	done bool
	// Losses while under way, to announce before the next chunk.
	lost      map[string]*wire.Gap
	lostOrder []string
}

// newHistoryReplay starts a paced replay of the history after from and
// registers it with the space (its losses are noted). sp.mu held.
func (sp *Space) newHistoryReplay(filter string, from uint64) *HistoryReplay {
	top := sp.seq
	if sp.persist != nil {
		top = sp.applied
	}
	r := &HistoryReplay{sp: sp, filter: filter, from: from, top: top, pos: from, topTopic: sp.topicIDs}
	sp.replays = append(sp.replays, r)
	return r
}

// finish ends the replay: it notes no more losses. sp.mu held.
func (r *HistoryReplay) finish() {
	if r == nil || r.done {
		return
	}
	r.done = true
	r.lost, r.lostOrder = nil, nil
	if i := slices.Index(r.sp.replays, r); i >= 0 {
		r.sp.replays = slices.Delete(r.sp.replays, i, i+1)
	}
}

// note records the loss of topic's messages from..to. r.sp.mu held.
func (r *HistoryReplay) note(name string, from, to uint64) {
	if r.lost == nil {
		r.lost = map[string]*wire.Gap{}
	}
	g := r.lost[name]
	if g == nil {
		if len(r.lost) >= 64 {
			name = "" // too many topics to list: one "several topics" gap
			g = r.lost[name]
		}
		if g == nil {
			g = &wire.Gap{Topic: name, From: from, To: to}
			r.lost[name] = g
			r.lostOrder = append(r.lostOrder, name)
		}
	}
	g.From = min(g.From, from)
	g.To = max(g.To, to)
}

// topicRef is a topic in the space's list of topics (Space.topicList);
// ts is nil once the topic was dropped (a stub until the list is
// compacted).
type topicRef struct {
	id   uint64
	name string
	ts   *topicState
}

// newTopic adds the topic name, which the space does not have. sp.mu held.
func (sp *Space) newTopic(name string) *topicState {
	sp.topicIDs++
	ts := &topicState{id: sp.topicIDs}
	sp.topics[name] = ts
	sp.topicList = append(sp.topicList, topicRef{id: ts.id, name: name, ts: ts})
	return ts
}

// findTopic returns the position of the topic id in the list of topics,
// or where it would be. sp.mu held.
func (sp *Space) findTopic(id uint64) (int, bool) {
	return slices.BinarySearchFunc(sp.topicList, id, func(t topicRef, id uint64) int { return cmpU64(t.id, id) })
}

// unlistTopic makes the list entry of the dropped topic ts a stub, and
// compacts the list once stubs are most of it. sp.mu held.
func (sp *Space) unlistTopic(ts *topicState) {
	if i, ok := sp.findTopic(ts.id); ok && sp.topicList[i].ts != nil {
		sp.topicList[i] = topicRef{id: ts.id}
		sp.topicStubs++
	}
	if sp.topicStubs > 64 && sp.topicStubs > len(sp.topicList)/2 {
		sp.topicList = slices.DeleteFunc(sp.topicList, func(t topicRef) bool { return t.ts == nil })
		sp.topicStubs = 0
	}
}

// pendingGap reports whether ts's topic gap is still to come in the
// replay's first part. r.sp.mu held.
func (r *HistoryReplay) pendingGap(ts *topicState) bool {
	return !r.gapsDone && ts.id > r.lastTopic && ts.id <= r.topTopic
}

// topicGap is the gap the replay announces for ts, if any: its messages
// lost after the resume point, up to those the replay covers.
func (r *HistoryReplay) topicGap(ts *topicState) (to uint64, ok bool) {
	to = min(ts.evictedMax, r.top)
	return to, to > r.from
}

// replaysEvicted notes, for the paced replays under way, the eviction of
// topic ts's message seq. sp.mu held.
func (sp *Space) replaysEvicted(ts *topicState, name string, seq uint64) {
	for _, r := range sp.replays {
		if seq > r.top || seq <= r.pos || !topic.Match(r.filter, name) {
			continue
		}
		if r.pendingGap(ts) {
			continue // its topic gap, still to come, covers it
		}
		r.note(name, seq, seq)
	}
}

// replaysForget notes, for the paced replays under way, that topic ts is
// dropped before its topic gap was announced. sp.mu held.
func (sp *Space) replaysForget(name string, ts *topicState) {
	for _, r := range sp.replays {
		if !r.pendingGap(ts) || !topic.Match(r.filter, name) {
			continue
		}
		if to, ok := r.topicGap(ts); ok {
			r.note(name, r.from+1, to)
		}
	}
}

// Next appends to dst the next frames of the replay (see Replay): topic
// gaps, or history messages flagged 0 (the caller flags them replayed)
// with the gaps of losses noted before them.
func (r *HistoryReplay) Next(dst []wire.Frame, maxMsgs, maxBytes int) ([]wire.Frame, bool) {
	if r == nil {
		return dst, false
	}
	sp := r.sp
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if r.done {
		return dst, false
	}
	maxMsgs = max(maxMsgs, 1)
	if !r.gapsDone {
		dst = r.nextGaps(dst, maxMsgs, maxBytes)
		return dst, true
	}
	// The history is in sequence order (evicted entries keep theirs).
	i := sort.Search(sp.order.len(), func(i int) bool { return sp.order.at(i).seq > r.pos })
	bytes, n := 0, 0
	for scanned := 0; i < sp.order.len(); i++ {
		if n == maxMsgs || n > 0 && bytes >= maxBytes || scanned == replayScan {
			return dst, true
		}
		e := sp.order.at(i)
		if e.seq > r.top {
			break
		}
		r.pos = e.seq
		scanned++
		if e.evicted || !topic.Match(r.filter, e.m.Topic) {
			continue
		}
		dst = r.flushLost(dst, e.seq)
		dst = append(dst, frameOf(e.m, 0))
		bytes += len(e.m.Payload) + len(e.m.Topic)
		n++
	}
	dst = r.flushLost(dst, math.MaxUint64)
	r.finish()
	return dst, false
}

// flushLost appends the gaps noted for losses before seq: a gap comes
// once the messages up to its last are replayed, so that a subscriber
// that moves its resume point to a gap's end (internal/wire) loses
// nothing if the stream breaks after it. r.sp.mu held.
func (r *HistoryReplay) flushLost(dst []wire.Frame, seq uint64) []wire.Frame {
	if len(r.lostOrder) == 0 {
		return dst
	}
	kept := r.lostOrder[:0]
	for _, name := range r.lostOrder {
		if g := r.lost[name]; g.To < seq {
			dst = append(dst, wire.GapFrame(*g))
			delete(r.lost, name)
		} else {
			kept = append(kept, name)
		}
	}
	clear(r.lostOrder[len(kept):])
	r.lostOrder = kept
	return dst
}

// nextGaps appends the next topic gaps, in the order the topics were
// created, examining at most replayScan topics, and notes when they are
// all announced. sp.mu held.
func (r *HistoryReplay) nextGaps(dst []wire.Frame, maxMsgs, maxBytes int) []wire.Frame {
	sp := r.sp
	i, found := sp.findTopic(r.lastTopic)
	if found {
		i++ // examined
	}
	bytes, n := 0, 0
	for scanned := 0; i < len(sp.topicList); i++ {
		if n == maxMsgs || n > 0 && bytes >= maxBytes || scanned == replayScan {
			return dst
		}
		t := sp.topicList[i]
		if t.id > r.topTopic {
			break // created after the replay started: its messages are live
		}
		r.lastTopic = t.id
		scanned++
		if t.ts == nil || !topic.Match(r.filter, t.name) {
			continue
		}
		if to, ok := r.topicGap(t.ts); ok {
			dst = append(dst, wire.GapFrame(wire.Gap{Topic: t.name, From: r.from + 1, To: to}))
			bytes += len(t.name) + 16
			n++
		}
	}
	r.gapsDone = true
	return dst
}
