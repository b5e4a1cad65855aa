package cluster_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/cluster"
	"github.com/quiot/quiot/internal/testutil"
)

// deepTopic returns a topic under "t/" with n levels, the last one padded
// so that the topic is size bytes (size 0: no padding).
func deepTopic(n, size int) string {
	parts := []string{"t"}
	for len(parts) < n {
		parts = append(parts, "l")
	}
	s := strings.Join(parts, "/")
	if size > len(s) {
		s += strings.Repeat("x", size-len(s))
	}
	return s
}

// TestTopicLimitsFromCluster: a message arriving over the cluster link
// passes the receiving broker's topic limits (256 bytes, 16 levels by
// default) as a local publisher's does. Broker a allows longer topics
// (4096 bytes, 256 levels) and accepts them over HTTP/3; broker b, with
// the defaults, neither delivers them to its subscribers (HTTP/3 and
// MQTT/TCP) nor retains them, counts them refused, and delivers those
// within its limits, the largest allowed included. With cluster-wide
// numbers (the stream consumer and the retained bucket) and with
// LocalNumbering (NATS interest).
func TestTopicLimitsFromCluster(t *testing.T) {
	t.Parallel()
	for _, local := range []bool{false, true} {
		name := "cluster-wide numbers"
		if local {
			name = "local numbering"
		}
		t.Run(name, func(t *testing.T) { topicLimitsFromCluster(t, local) })
	}
}

func topicLimitsFromCluster(t *testing.T, local bool) {
	nc := startNATS(t, 1)
	pki := testutil.NewPKI(t)
	a := startNode(t, pki, "a", nc.urls(), func(bo *broker.Options, co *cluster.Options) {
		co.Replicas, co.LocalNumbering = 1, local
		bo.Limits.MaxTopicLength, bo.Limits.MaxTopicLevels = 4096, 256
	})
	b := startNode(t, pki, "b", nc.urls(), func(_ *broker.Options, co *cluster.Options) {
		co.Replicas, co.LocalNumbering = 1, local
	})
	sb := b.subscribe("t/#", "")
	mb := b.mqttConnect("mb")
	mb.subscribe("t/#")
	probe(t, a, "t/probe", func() bool { return len(sb.frames) > 0 && len(mb.got) > 0 })
	nextH3 := func() string {
		for {
			if f := sb.nextMessage(); string(f.Payload) != "probe" {
				return f.Topic
			}
		}
	}
	nextMQTT := func() string {
		for {
			if p := mb.next(); string(p.Payload) != "probe" {
				return p.Topic
			}
		}
	}
	for _, tc := range []struct {
		name   string
		topic  string
		retain bool
		ok     bool
	}{
		{"16 levels", deepTopic(16, 0), false, true},
		{"256 bytes retained", deepTopic(3, 256), true, true},
		{"17 levels", deepTopic(17, 0), false, false},
		{"257 bytes retained", deepTopic(3, 257), true, false},
		{"200 levels retained", deepTopic(200, 0), true, false},
		{"1000 bytes", deepTopic(3, 1000), false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			refused := b.link.Stats().Refused
			q := "qos=1"
			if tc.retain {
				q += "&retain=1"
			}
			a.publish(tc.topic, tc.name, q)
			a.publish("t/end", "end", "qos=1")
			for _, sub := range []struct {
				name string
				next func() string
			}{{"HTTP/3", nextH3}, {"MQTT/TCP", nextMQTT}} {
				got := sub.next()
				if tc.ok {
					if got != tc.topic {
						t.Fatalf("b's %s subscriber got %.40q, want the message on %.40q", sub.name, got, tc.topic)
					}
					got = sub.next()
				}
				if got != "t/end" {
					t.Fatalf("b's %s subscriber got %.60q (%d bytes, %d levels), want the end marker: the topic is beyond b's limits", sub.name, got, len(got), strings.Count(got, "/")+1)
				}
			}
			if !tc.ok {
				waitFor(t, func() bool { return b.link.Stats().Refused > refused }, "b's refusal count")
			}
		})
	}
	// Retained: b keeps the one within its limits and none beyond; a
	// retained message published after them reaches b's store after them.
	a.publish("t/after", "after", "qos=1&retain=1")
	waitFor(t, hasRetained(b, "t/after", "after"), "the retained message after the others")
	var kept []string
	for _, m := range b.b.Space().RetainedMessages() {
		kept = append(kept, fmt.Sprintf("%d bytes, %d levels", len(m.Topic), strings.Count(m.Topic, "/")+1))
	}
	if want := "256 bytes, 3 levels,7 bytes, 2 levels"; strings.Join(kept, ",") != want {
		t.Fatalf("b retains %v, want %s (nothing beyond its limits)", kept, want)
	}
	// a applies its own messages from the stream too, on its own consumer.
	waitFor(t, hasRetained(a, "t/after", "after"), "a to retain the message after the others")
	if n := len(a.b.Space().RetainedMessages()); n != 4 {
		t.Fatalf("a retains %d messages, want 4 (its limits allow them)", n)
	}
}
