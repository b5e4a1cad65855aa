package match

import (
	"time"
)

// Key identifies one packet: (flow, sequence) in active mode, (0, payload
// hash) in passive mode.
type Key struct {
	Flow uint64
	ID   uint64
}

// Sample is one matched packet.
type Sample struct {
	Key     Key
	Flow    uint64    // flow the packet belongs to
	Seq     uint64    // order within the flow at ingress (active: sequence number)
	In, Out time.Time // ingress and (first) egress timestamps
}

// Delay returns Out - In.
func (s Sample) Delay() time.Duration { return s.Out.Sub(s.In) }

// Counts are the matcher's counters.
type Counts struct {
	Ingress           uint64 // distinct packets seen at ingress
	Egress            uint64 // packets seen at egress, copies included
	Matched           uint64 // packets seen at both
	Lost              uint64 // seen at ingress, never at egress (after Expire/Finish)
	Duplicated        uint64 // egress copies beyond the first of a matched packet
	Reordered         uint64 // egress packets arriving after a later one of their flow
	EgressOnly        uint64 // seen at egress, never at ingress (after Expire/Finish)
	IngressDuplicated uint64 // a packet seen twice at ingress (the later copy is ignored)
	NegativeDelays    uint64 // matches whose egress time precedes the ingress time
}

type pending struct {
	flow, seq uint64
	t         time.Time
}

// Matcher pairs ingress and egress observations. Feed it from one goroutine.
// Egress observations may arrive before their ingress (two captures run
// concurrently); they wait for it until Expire.
//
// Memory is bounded by Expire: call it periodically with the current packet
// time (live use), or call Finish once after feeding everything (offline).
type Matcher struct {
	// OnMatch receives every matched packet (required).
	OnMatch func(Sample)

	in      map[Key]pending   // ingress waiting for egress
	early   map[Key]pending   // egress waiting for ingress (t = egress time)
	done    map[Key]time.Time // matched keys (value: egress time) to count copies
	maxSeq  map[uint64]uint64 // per flow: highest Seq seen at egress (+1)
	flowSeq map[uint64]uint64 // passive: next per-flow ingress sequence
	c       Counts
}

// NewMatcher returns a Matcher delivering matches to onMatch.
func NewMatcher(onMatch func(Sample)) *Matcher {
	return &Matcher{
		OnMatch: onMatch,
		in:      map[Key]pending{}, early: map[Key]pending{}, done: map[Key]time.Time{},
		maxSeq: map[uint64]uint64{}, flowSeq: map[uint64]uint64{},
	}
}

// Counts returns the counters so far.
func (m *Matcher) Counts() Counts { return m.c }

// Ingress records a packet at the ingress port. seq is its order within flow;
// pass NextSeq(flow) in passive mode.
func (m *Matcher) Ingress(k Key, flow, seq uint64, t time.Time) {
	if _, ok := m.in[k]; ok {
		m.c.IngressDuplicated++
		return
	}
	if _, ok := m.done[k]; ok {
		m.c.IngressDuplicated++
		return
	}
	m.c.Ingress++
	if e, ok := m.early[k]; ok {
		delete(m.early, k)
		m.match(k, pending{flow: flow, seq: seq, t: t}, e.t)
		return
	}
	m.in[k] = pending{flow: flow, seq: seq, t: t}
}

// NextSeq returns the next ingress order number of a flow (passive mode).
func (m *Matcher) NextSeq(flow uint64) uint64 {
	s := m.flowSeq[flow]
	m.flowSeq[flow] = s + 1
	return s
}

// Egress records a packet at the egress port.
func (m *Matcher) Egress(k Key, t time.Time) {
	m.c.Egress++
	if _, ok := m.done[k]; ok {
		m.c.Duplicated++
		return
	}
	p, ok := m.in[k]
	if !ok {
		if _, ok := m.early[k]; ok {
			m.c.Duplicated++ // a copy of a packet still waiting for its ingress
			return
		}
		m.early[k] = pending{t: t}
		return
	}
	delete(m.in, k)
	m.match(k, p, t)
}

func (m *Matcher) match(k Key, p pending, out time.Time) {
	m.c.Matched++
	m.done[k] = out
	if hi, ok := m.maxSeq[p.flow]; ok && p.seq+1 < hi {
		m.c.Reordered++
	} else {
		m.maxSeq[p.flow] = p.seq + 1
	}
	if out.Before(p.t) {
		m.c.NegativeDelays++
	}
	if m.OnMatch != nil {
		m.OnMatch(Sample{Key: k, Flow: p.flow, Seq: p.seq, In: p.t, Out: out})
	}
}

// Expire settles packets older than horizon before now: ingress packets
// without egress become Lost, egress packets without ingress EgressOnly, and
// matched keys are forgotten (later copies then count as EgressOnly).
func (m *Matcher) Expire(now time.Time, horizon time.Duration) {
	cut := now.Add(-horizon)
	for k, p := range m.in {
		if p.t.Before(cut) {
			delete(m.in, k)
			m.c.Lost++
		}
	}
	for k, p := range m.early {
		if p.t.Before(cut) {
			delete(m.early, k)
			m.c.EgressOnly++
		}
	}
	for k, t := range m.done {
		if t.Before(cut) {
			delete(m.done, k)
		}
	}
}

// Finish settles everything still pending (end of an offline run).
func (m *Matcher) Finish() Counts {
	m.c.Lost += uint64(len(m.in))
	m.c.EgressOnly += uint64(len(m.early))
	clear(m.in)
	clear(m.early)
	return m.c
}

// Pending returns the number of ingress packets waiting for egress.
func (m *Matcher) Pending() int { return len(m.in) }

// PendingEgress returns the number of egress packets waiting for ingress.
func (m *Matcher) PendingEgress() int { return len(m.early) }
