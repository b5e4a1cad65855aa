package cluster_test

import (
	"context"
	"strings"
	"testing"

	"github.com/quiot/quiot/broker"
)

// TestDollarFromClusterDropped: a `$` message another broker hands over
// (a broker that did not refuse it) is not delivered or retained here: the
// local ACL check every cluster message passes refuses every publish to a
// `$` topic (docs/security.md), also without an ACL.
func TestDollarFromClusterDropped(t *testing.T) {
	t.Parallel()
	_, n := threeBrokers(t, nil)
	s2 := n[1].subscribe("$SYS/#", "")
	ctx := context.Background()
	spoof := func(m broker.Message) {
		t.Helper()
		m.Payload, m.QoS, m.Origin = []byte("spoof"), 1, broker.ProtoH3
		if _, err := n[0].b.Publish(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	spoof(broker.Message{Topic: "$SYS/broker/uptime", Retain: true})
	// Published again until b2 has refused one: b2's interest in $SYS/#
	// reaches the cluster some time after the subscription began.
	waitFor(t, func() bool {
		spoof(broker.Message{Topic: "$SYS/x"})
		return n[1].link.Stats().Denied >= 2
	}, "denial of the $SYS messages")
	select {
	case f := <-s2.frames:
		if f.Topic != "" {
			t.Fatalf("delivered from the cluster: %s %q", f.Topic, f.Payload)
		}
	default:
	}
	// A retained message published after the spoof reaches b2 and b3 after
	// it: by then the spoof was refused, not retained.
	spoof(broker.Message{Topic: "ok/after", Retain: true})
	for _, nd := range n[1:] {
		waitFor(t, hasRetained(nd, "ok/after", "spoof"), "the retained message after the spoof")
		for _, m := range nd.b.Space().RetainedMessages() {
			if strings.HasPrefix(m.Topic, "$") {
				t.Fatalf("retained from the cluster: %s %q", m.Topic, m.Payload)
			}
		}
	}
}
