package broker

import (
	"sort"
	"sync"
	"time"
)

// BridgeStatus is the state of one bridge to an upstream broker
// (broker/bridge, docs/bridge.md) as /v1/stats and /healthz report it.
type BridgeStatus struct {
	// Name is the bridge's name, URL its upstream.
	Name, URL string
	// Connected reports a live upstream connection, since ConnectedSince;
	// DownSince is when the bridge was last without one (its start, or the
	// loss of its connection; zero while connected).
	Connected      bool
	ConnectedSince time.Time `json:",omitzero"`
	DownSince      time.Time `json:",omitzero"`
	// Queued and QueuedBytes are the messages waiting to go up (memory and
	// store) and the bytes of those in memory.
	Queued      int
	QueuedBytes int64
	// Sent counts messages the upstream accepted, Dropped those dropped
	// from a full queue or store.
	Sent, Dropped uint64
	// LastError is the last connection or publish error ("" if none).
	LastError string
	// Degraded says why /healthz reports the broker degraded because of
	// this bridge (down longer than its down_alert); "" when it does not.
	Degraded string `json:",omitempty"`
}

// BridgeReporter is a bridge that reports its state to the broker. The
// broker does not know the bridge package; a bridge registers itself with
// AddBridge.
type BridgeReporter interface {
	BridgeStatus() BridgeStatus
}

// bridgeSet holds the registered bridges.
type bridgeSet struct {
	mu   sync.Mutex
	next uint64
	m    map[uint64]BridgeReporter
}

// AddBridge registers r: its state appears in Stats (Bridges, and so
// /v1/stats) and in /healthz. The returned function removes it.
func (b *Broker) AddBridge(r BridgeReporter) (remove func()) {
	s := &b.stats.bridges
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[uint64]BridgeReporter{}
	}
	s.next++
	id := s.next
	s.m[id] = r
	return func() {
		s.mu.Lock()
		delete(s.m, id)
		s.mu.Unlock()
	}
}

// bridgeStatuses returns the registered bridges' states, by name.
func (b *Broker) bridgeStatuses() []BridgeStatus {
	s := &b.stats.bridges
	s.mu.Lock()
	rs := make([]BridgeReporter, 0, len(s.m))
	for _, r := range s.m {
		rs = append(rs, r)
	}
	s.mu.Unlock()
	if len(rs) == 0 {
		return nil
	}
	out := make([]BridgeStatus, 0, len(rs))
	for _, r := range rs {
		out = append(out, r.BridgeStatus())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
