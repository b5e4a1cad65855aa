package space

// entry is a message in history.
type entry struct {
	m       *Message
	seq     uint64 // m's sequence number, kept once evicted (historyreplay.go)
	evicted bool
}

// topicState is one topic's history and retained message.
type topicState struct {
	hist     ring[*entry]
	retained *Message
	// rgen identifies retained's entry in the retained index
	// (retainedreplay.go).
	rgen uint64
	// evictedMax is the highest sequence number dropped from hist.
	evictedMax uint64
	// retainedSeq is the cluster's sequence number of the last retained
	// message (or clearing) seen for the topic (federation.go).
	retainedSeq uint64
	// id is the topic's place in the space's list of topics, in the order
	// they were created (Space.topicList, historyreplay.go).
	id uint64
}

// store appends msg to its topic's history and enforces the bounds. sp.mu held.
func (sp *Space) store(ts *topicState, msg *Message) {
	if sp.limits.HistoryPerTopic == 0 {
		ts.evictedMax = msg.Seq
		sp.noteEvict(msg.Topic, msg.Seq, msg.Seq)
		sp.maybeForget(msg.Topic, ts)
		return
	}
	e := &entry{m: msg, seq: msg.Seq}
	ts.hist.push(e)
	sp.order.push(e)
	sp.histSize += msgCost(msg)
	sp.histMsgs++
	for ts.hist.len() > sp.limits.HistoryPerTopic {
		old := ts.hist.pop()
		sp.evict(ts, old)
		sp.stubs++
	}
	for sp.histSize > sp.limits.HistoryBytes && sp.order.len() > 0 {
		old := sp.order.pop()
		if old.evicted {
			sp.stubs--
			continue
		}
		ots := sp.topics[old.m.Topic]
		ots.hist.pop() // the globally oldest entry is its topic's oldest
		t := old.m.Topic
		sp.evict(ots, old)
		sp.maybeForget(t, ots)
	}
	for sp.order.len() > 0 && sp.order.front().evicted {
		sp.order.pop()
		sp.stubs--
	}
	if sp.stubs > 1024 && sp.stubs > sp.order.len()/2 {
		var n ring[*entry]
		for i := 0; i < sp.order.len(); i++ {
			if e := sp.order.at(i); !e.evicted {
				n.push(e)
			}
		}
		sp.order, sp.stubs = n, 0
	}
}

// EntryOverhead approximates the memory of a history entry beyond its
// payload and topic (Message, entry and ring slots), so that empty payloads
// are bounded too.
const EntryOverhead = 96

// Cost is the memory a message is counted for in the history, retained and
// queue bounds: its payload and topic bytes plus EntryOverhead.
func Cost(m *Message) int64 { return msgCost(m) }

func msgCost(m *Message) int64 { return int64(len(m.Payload)+len(m.Topic)) + EntryOverhead }

func (sp *Space) evict(ts *topicState, e *entry) {
	e.evicted = true
	ts.evictedMax = max(ts.evictedMax, e.m.Seq)
	sp.replaysEvicted(ts, e.m.Topic, e.m.Seq)
	sp.noteEvict(e.m.Topic, e.m.Seq, ts.evictedMax)
	sp.histSize -= msgCost(e.m)
	sp.histMsgs--
	e.m = nil
	ts.hist.shrink()
}

// maybeForget drops a topic that holds nothing. sp.mu held.
func (sp *Space) maybeForget(name string, ts *topicState) {
	if ts.hist.len() == 0 && ts.retained == nil {
		sp.replaysForget(name, ts)
		sp.forgotten = max(sp.forgotten, ts.evictedMax)
		delete(sp.topics, name)
		sp.unlistTopic(ts)
		sp.noteForgetTopic(name)
	}
}

// retainedFits reports whether m as ts's retained message (replacing the
// one it has; ts may be nil) keeps the retained messages within
// Limits.RetainedBytes. sp.mu held.
func (sp *Space) retainedFits(ts *topicState, m *Message) bool {
	size := sp.retainedSize + msgCost(m)
	if ts != nil && ts.retained != nil {
		size -= msgCost(ts.retained)
	}
	return size <= sp.limits.RetainedBytes
}

// setRetained makes m ts's retained message, replacing the one it has.
// sp.mu held.
func (sp *Space) setRetained(ts *topicState, m *Message) {
	sp.clearRetained(ts)
	ts.retained = m
	sp.indexRetained(ts, m)
	sp.retainedSize += msgCost(m)
	sp.retainedCount++
}

// clearRetained drops ts's retained message, if any (ts may be nil).
// sp.mu held.
func (sp *Space) clearRetained(ts *topicState) {
	if ts != nil && ts.retained != nil {
		sp.retainedSize -= msgCost(ts.retained)
		sp.retainedCount--
		sp.unindexRetained(ts)
		ts.retained = nil
	}
}
