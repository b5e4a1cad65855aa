package bridge

import (
	"sync"

	"github.com/eclipse/paho.golang/paho"
)

// topicAliases gives the bridge's PUBLISH packets on one MQTT 5
// connection topic aliases (docs/bridge.md, "Going up"): the first
// publish of a topic carries its name and a new alias, the ones after it
// the alias alone (an empty topic name), saving the remote topic's bytes
// on every message. The upstream's CONNACK bounds the aliases (Topic Alias
// Maximum; 0: none); topics beyond them go with their name. A new
// connection starts a new table (aliases live as long as their
// connection).
//
// Only publishes the bridge itself writes carry an alias alone: paho
// resends the publishes of a session the upstream kept with the packet
// it first wrote, which on a new connection would name an alias the
// upstream no longer knows, so the bridge uses aliases only when no
// session outlives a connection (session_expiry 0).
type topicAliases struct {
	mu   sync.Mutex
	max  uint16
	next uint16
	ids  map[string]uint16
}

func newTopicAliases(max uint16) *topicAliases {
	return &topicAliases{max: max, ids: map[string]uint16{}}
}

// apply sets p's topic alias. The bridge writes its PUBLISH packets in
// the order it calls apply (window.go), so an alias is defined before its
// first use.
func (a *topicAliases) apply(p *paho.Publish) {
	if a == nil || a.max == 0 {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	id, ok := a.ids[p.Topic]
	if !ok {
		if a.next >= a.max {
			return // all taken: the name
		}
		a.next++
		id = a.next
		a.ids[p.Topic] = id
	}
	if p.Properties == nil {
		p.Properties = &paho.PublishProperties{}
	}
	p.Properties.TopicAlias = &id
	if ok {
		p.Topic = ""
	}
}

// reset forgets every alias: a publish that failed may not have reached
// the connection, so the next one of each topic defines its alias again
// (redefining an alias is allowed).
func (a *topicAliases) reset() {
	if a == nil {
		return
	}
	a.mu.Lock()
	clear(a.ids)
	a.next = 0
	a.mu.Unlock()
}
