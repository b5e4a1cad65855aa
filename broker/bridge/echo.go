package bridge

import (
	"hash/maphash"
	"sync"
	"time"
)

// echoGuard prevents loops where the upstream cannot be asked not to send
// the bridge's own publishes back (MQTT 3.1.1 has no No Local; quiot's
// HTTP/3 subscriptions neither): it remembers a fingerprint (remote topic
// and payload) of every message the bridge publishes up, and the first
// inbound message with a remembered fingerprint is taken for the
// upstream's copy and dropped. Fingerprints are forgotten after echoTTL or
// beyond echoMax (oldest first). A message published upstream by someone
// else with the same topic and payload within echoTTL of the bridge's own
// is dropped too (docs/bridge.md says so).
type echoGuard struct {
	seed maphash.Seed

	mu    sync.Mutex
	count map[uint64]int
	fifo  []echoEntry // oldest first
}

type echoEntry struct {
	key uint64
	at  time.Time
}

const (
	echoTTL = 2 * time.Minute
	echoMax = 65536
)

func newEchoGuard() *echoGuard {
	return &echoGuard{seed: maphash.MakeSeed(), count: map[uint64]int{}}
}

func (g *echoGuard) key(topic string, payload []byte) uint64 {
	var h maphash.Hash
	h.SetSeed(g.seed)
	_, _ = h.WriteString(topic)
	_ = h.WriteByte(0)
	_, _ = h.Write(payload)
	return h.Sum64()
}

// sent remembers a message published up on topic.
func (g *echoGuard) sent(topic string, payload []byte) {
	k := g.key(topic, payload)
	now := time.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	g.expireLocked(now)
	for len(g.fifo) >= echoMax {
		g.forgetLocked()
	}
	g.fifo = append(g.fifo, echoEntry{key: k, at: now})
	g.count[k]++
}

// echoed reports whether a message from the upstream is the copy of one
// the bridge published (and forgets that one).
func (g *echoGuard) echoed(topic string, payload []byte) bool {
	k := g.key(topic, payload)
	g.mu.Lock()
	defer g.mu.Unlock()
	g.expireLocked(time.Now())
	if g.count[k] == 0 {
		return false
	}
	if g.count[k]--; g.count[k] == 0 {
		delete(g.count, k)
	}
	return true
}

func (g *echoGuard) expireLocked(now time.Time) {
	for len(g.fifo) > 0 && now.Sub(g.fifo[0].at) > echoTTL {
		g.forgetLocked()
	}
}

// forgetLocked drops the oldest fingerprint (its count may already have
// been taken by echoed: then a later one of the same key goes early, which
// only shortens its time).
func (g *echoGuard) forgetLocked() {
	k := g.fifo[0].key
	g.fifo[0] = echoEntry{}
	g.fifo = g.fifo[1:]
	if len(g.fifo) == 0 {
		g.fifo = nil
	}
	if g.count[k] > 0 {
		if g.count[k]--; g.count[k] == 0 {
			delete(g.count, k)
		}
	}
}
