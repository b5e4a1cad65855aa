package mqtt

import (
	"sync"

	"github.com/mochi-mqtt/server/v2/packets"
)

// quiot: the subscribers of a topic name with many, as publishToSubscribers
// finds them, kept until a subscription or the set of clients changes
// (QUIOT.md, change 27).
//
// For every message upstream walked the topic index, gathered the
// matching subscriptions into a map keyed by client id, and looked each
// client up by id under the clients' shared lock: a string hash, a map
// insert and a lookup per delivery. A topic's deliveries are now kept as
// a slice of clients and their merged subscriptions, valid while the
// index's and the clients' generations are those it was made at; any
// Subscribe, Unsubscribe, InlineSubscribe, InlineUnsubscribe, Clients.Add
// or Clients.Delete changes one of them. Topics with shared subscriptions
// are not kept: each message selects its own subscriber of a group. Nor
// are topics with fewer than minDeliveries subscribers: for them the
// lookups cost little, and a broker whose devices each publish to a
// topic of their own would otherwise fill and empty the cache with lists
// of one.

const (
	// maxDeliveryTopics bounds the topic names kept; beyond it the
	// cache starts again empty.
	maxDeliveryTopics = 1024
	// maxDeliveries bounds the deliveries kept over all topics (about 80
	// bytes each on 64-bit hosts, so at most about 5 MB); a topic with
	// more subscribers than this is never kept.
	maxDeliveries = 1 << 16
	// minDeliveries is the fewest subscribers a topic's list is kept for.
	minDeliveries = 8
)

// delivery is one subscriber of a topic and its merged subscription.
type delivery struct {
	cl  *Client
	sub packets.Subscription
}

// deliveryList is what a message published to a topic goes to.
type deliveryList struct {
	topicsGen, clientsGen uint64
	subs                  []delivery
	inline                []InlineSubscription
}

// deliveryCache keeps the deliveryLists of recent topic names.
type deliveryCache struct {
	mu sync.RWMutex
	m  map[string]*deliveryList
	n  int // deliveries held in m
}

// deliveriesTo returns the subscribers of topic, kept or found now, or
// nil and the Subscribers found when topic has shared subscriptions (the
// caller selects among them, per message) or fewer than minDeliveries.
func (s *Server) deliveriesTo(topic string) (*deliveryList, *Subscribers) {
	tg, cg := s.Topics.gen.Load(), s.Clients.gen.Load()
	c := &s.deliveries
	c.mu.RLock()
	l := c.m[topic]
	c.mu.RUnlock()
	if l != nil && l.topicsGen == tg && l.clientsGen == cg {
		return l, nil
	}
	subscribers := s.Topics.Subscribers(topic)
	if len(subscribers.Shared) > 0 || len(subscribers.Subscriptions)+len(subscribers.InlineSubscriptions) < minDeliveries {
		return nil, subscribers
	}
	l = &deliveryList{topicsGen: tg, clientsGen: cg}
	if len(subscribers.Subscriptions) > 0 {
		l.subs = make([]delivery, 0, len(subscribers.Subscriptions))
	}
	for id, sub := range subscribers.Subscriptions {
		if cl, ok := s.Clients.Get(id); ok {
			l.subs = append(l.subs, delivery{cl: cl, sub: sub})
		}
	}
	for _, in := range subscribers.InlineSubscriptions {
		l.inline = append(l.inline, in)
	}
	c.keep(topic, l)
	return l, nil
}

// keep stores l as topic's list within the cache's bounds.
func (c *deliveryCache) keep(topic string, l *deliveryList) {
	n := len(l.subs) + len(l.inline)
	if n > maxDeliveries {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.m[topic]; ok {
		if old.topicsGen > l.topicsGen || old.clientsGen > l.clientsGen {
			return // a newer list was kept meanwhile
		}
		c.n -= len(old.subs) + len(old.inline)
	} else if len(c.m) >= maxDeliveryTopics || c.n+n > maxDeliveries {
		c.m, c.n = nil, 0
	}
	if c.m == nil {
		c.m = make(map[string]*deliveryList)
	}
	c.m[topic] = l
	c.n += n
}
