package space

import (
	"cmp"
	"slices"

	"github.com/quiot/quiot/internal/topic"
	"github.com/quiot/quiot/internal/wire"
)

// retEntry is one retained message in the space's retained index
// (Space.retIdx); m is nil once the message was replaced or cleared (a
// stub until the index is compacted).
type retEntry struct {
	seq uint64 // m's sequence number (kept by a stub)
	gen uint64 // the index's count of insertions when it was added
	m   *Message
}

// cmpRet orders entries of the retained index: by sequence number, then
// by insertion.
func cmpRet(seqA, genA, seqB, genB uint64) int {
	if c := cmp.Compare(seqA, seqB); c != 0 {
		return c
	}
	return cmp.Compare(genA, genB)
}

// indexRetained adds ts's retained message m to the retained index, in
// sequence order. sp.mu held.
func (sp *Space) indexRetained(ts *topicState, m *Message) {
	sp.retGen++
	e := retEntry{seq: m.Seq, gen: sp.retGen, m: m}
	ts.rgen = e.gen
	n := len(sp.retIdx)
	if n == 0 || sp.retIdx[n-1].seq <= m.Seq {
		sp.retIdx = append(sp.retIdx, e)
		return
	}
	// An older sequence number (a store's or another broker's retained
	// message): insert it in order.
	i, _ := sp.findRetained(e.seq, e.gen)
	sp.retIdx = slices.Insert(sp.retIdx, i, e)
}

// findRetained returns the position of the index entry (seq, gen), or
// where it would be. sp.mu held.
func (sp *Space) findRetained(seq, gen uint64) (int, bool) {
	return slices.BinarySearchFunc(sp.retIdx, retEntry{seq: seq, gen: gen}, func(x, t retEntry) int { return cmpRet(x.seq, x.gen, t.seq, t.gen) })
}

// unindexRetained makes the index entry of ts's retained message a stub,
// and compacts the index once stubs are most of it. sp.mu held.
func (sp *Space) unindexRetained(ts *topicState) {
	if ts.retained == nil {
		return
	}
	if i, ok := sp.findRetained(ts.retained.Seq, ts.rgen); ok {
		sp.retIdx[i].m = nil
		sp.retStubs++
	}
	ts.rgen = 0
	if sp.retStubs > 64 && sp.retStubs > len(sp.retIdx)/2 {
		sp.retIdx = slices.DeleteFunc(sp.retIdx, func(e retEntry) bool { return e.m == nil })
		sp.retStubs = 0
	}
}

// RetainedReplay reads the retained messages a subscription starts with,
// a bounded chunk at a time (Next), so that a subscriber's stream takes
// them as it is written: the broker never holds the whole set for a
// subscriber that does not read (docs/security.md, "Worst cases"). It
// replays, in sequence order, the messages retained when the subscription
// started that are still retained when their turn comes: one replaced or
// cleared since is not replayed (its replacement, published after the
// subscription started, comes as a live message).
type RetainedReplay struct {
	sp     *Space
	filter string
	gen    uint64 // entries added after the subscription started are live
	// The last entry examined (started: at least one was).
	seq, egen uint64
	started   bool
	done      bool
}

// replayScan bounds the entries one Next examines with the space locked
// (a selective filter over many retained messages).
const replayScan = 4096

// Next appends to dst, as frames flagged wire.FlagRetained, the next
// retained messages: at most maxMsgs of them and, once one is appended,
// no more than maxBytes of payload and topic. It returns dst and whether
// more may follow (false: the replay is complete).
func (r *RetainedReplay) Next(dst []wire.Frame, maxMsgs, maxBytes int) ([]wire.Frame, bool) {
	if r == nil || r.done {
		return dst, false
	}
	sp := r.sp
	sp.mu.Lock()
	defer sp.mu.Unlock()
	i := 0
	if r.started {
		var found bool
		if i, found = sp.findRetained(r.seq, r.egen); found {
			i++ // examined
		}
	}
	bytes, n := 0, 0
	for scanned := 0; i < len(sp.retIdx); i++ {
		if n == maxMsgs || n > 0 && bytes >= maxBytes || scanned == replayScan {
			return dst, true
		}
		e := &sp.retIdx[i]
		r.seq, r.egen, r.started = e.seq, e.gen, true
		scanned++
		if e.m == nil || e.gen > r.gen || !topic.Match(r.filter, e.m.Topic) {
			continue
		}
		dst = append(dst, frameOf(e.m, wire.FlagRetained))
		bytes += len(e.m.Payload) + len(e.m.Topic)
		n++
	}
	r.done = true
	return dst, false
}
