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
// (in topic name order), then the history after the resume point in
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
	// Topic gaps: the last topic announced, in name order.
	gapName    string
	gapStarted bool
	gapsDone   bool
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
	r := &HistoryReplay{sp: sp, filter: filter, from: from, top: top, pos: from}
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

// pendingGap reports whether name's topic gap is still to come in the
// replay's first part. r.sp.mu held.
func (r *HistoryReplay) pendingGap(name string) bool {
	return !r.gapsDone && (!r.gapStarted || name > r.gapName)
}

// topicGap is the gap the replay announces for ts, if any: its messages
// lost after the resume point, up to those the replay covers. A topic
// created after the replay started has none (its messages are live).
func (r *HistoryReplay) topicGap(ts *topicState) (to uint64, ok bool) {
	if ts.first > r.top {
		return 0, false
	}
	to = min(ts.evictedMax, r.top)
	return to, to > r.from
}

// replaysEvicted notes, for the paced replays under way, the eviction of
// topic's message seq. sp.mu held.
func (sp *Space) replaysEvicted(name string, seq uint64) {
	for _, r := range sp.replays {
		if seq > r.top || seq <= r.pos || !topic.Match(r.filter, name) {
			continue
		}
		if r.pendingGap(name) {
			continue // its topic gap, still to come, covers it
		}
		r.note(name, seq, seq)
	}
}

// replaysForget notes, for the paced replays under way, that topic ts is
// dropped before its topic gap was announced. sp.mu held.
func (sp *Space) replaysForget(name string, ts *topicState) {
	for _, r := range sp.replays {
		if !r.pendingGap(name) || !topic.Match(r.filter, name) {
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

// nextGaps appends the next topic gaps, in topic name order, and notes
// when they are all announced. sp.mu held.
func (r *HistoryReplay) nextGaps(dst []wire.Frame, maxMsgs, maxBytes int) []wire.Frame {
	type cand struct {
		name string
		to   uint64
	}
	// The next maxMsgs names after gapName, found in one pass over the
	// topics without holding them all.
	var next []cand
	more := false
	trim := func() {
		slices.SortFunc(next, func(a, b cand) int {
			if a.name < b.name {
				return -1
			}
			if a.name > b.name {
				return 1
			}
			return 0
		})
		if len(next) > maxMsgs {
			next, more = next[:maxMsgs], true
		}
	}
	for name, ts := range r.sp.topics {
		if r.gapStarted && name <= r.gapName || !topic.Match(r.filter, name) {
			continue
		}
		if to, ok := r.topicGap(ts); ok {
			next = append(next, cand{name, to})
			if len(next) >= 2*maxMsgs {
				trim()
			}
		}
	}
	trim()
	bytes := 0
	for i, c := range next {
		if i > 0 && bytes >= maxBytes {
			more = true
			break
		}
		dst = append(dst, wire.GapFrame(wire.Gap{Topic: c.name, From: r.from + 1, To: c.to}))
		r.gapName, r.gapStarted = c.name, true
		bytes += len(c.name) + 16
	}
	r.gapsDone = !more
	return dst
}
