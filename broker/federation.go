package broker

import (
	"context"
	"fmt"
)

// OriginCluster is the Message.Origin of messages that another broker
// accepted and the federation link (broker/cluster) hands to this one. They
// are not forwarded again, so nothing loops between brokers.
const OriginCluster = "cluster"

// Federation joins this broker's topic space to other brokers' (the NATS
// link in broker/cluster). The hub talks to it through this interface only,
// as it does to its Store; messages from other brokers come in through
// Broker.Publish with Origin OriginCluster.
type Federation interface {
	// Forward hands a message this broker accepted (any origin but
	// OriginCluster) to the other brokers. It is called with the hub's lock
	// held, in sequence order, and must not block. The returned Commit (nil:
	// nothing to wait for) ends once the cluster has the message; a QoS 1
	// or 2 publisher's acknowledgement waits for it (without a Store).
	Forward(m *Message) Commit
	// Interest reports that a local subscription on filter began (delta +1)
	// or ended (-1), so that the link asks the cluster only for what local
	// subscribers want. Called with the hub's lock held; must not block.
	Interest(filter string, delta int)
}

// FederationStatus is implemented by a Federation that reports its state
// on /healthz (one line, e.g. "connected nats://...").
type FederationStatus interface {
	Status() string
}

// forward hands msg to the federation link. h.mu held.
func (h *hub) forward(msg *Message) Commit {
	if h.fed == nil || msg.Origin == OriginCluster {
		return nil
	}
	return h.fed.Forward(msg)
}

// interest reports a subscription's start or end to the link. h.mu held.
func (h *hub) interest(filter string, delta int) {
	if h.fed != nil {
		h.fed.Interest(filter, delta)
	}
}

// waitForward waits for the cluster to hold a QoS 1 or 2 message.
func waitForward(ctx context.Context, msg *Message, c Commit) (uint64, error) {
	if c == nil || msg.QoS == 0 {
		return msg.Seq, nil
	}
	select {
	case <-c.Done():
		if err := c.Err(); err != nil {
			return 0, fmt.Errorf("couldn't hand message to the cluster: %w", err)
		}
		return msg.Seq, nil
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// AddInterest reports a subscription on filter that does not go through the
// hub (MQTT subscriptions live in mochi) to the federation link: delta +1
// when it begins, -1 when it ends.
func (b *Broker) AddInterest(filter string, delta int) {
	h := b.hub
	h.mu.Lock()
	h.interest(filter, delta)
	h.mu.Unlock()
}

// clusterStatus is the federation link's /healthz line ("" without one).
func (b *Broker) clusterStatus() string {
	if s, ok := b.opts.Cluster.(FederationStatus); ok {
		return s.Status()
	}
	return ""
}
