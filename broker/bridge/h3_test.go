package bridge_test

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/bridge"
	"github.com/quiot/quiot/broker/brokertest"
	"github.com/quiot/quiot/internal/testutil"
)

// TestQuiotUpstreamHTTP3 bridges an edge quiot to a second quiot over
// HTTP/3 (https://, QoS 1): messages go up and come down; local messages
// that go up and match the remote subscription are not brought back down
// (the echo guard: HTTP/3 has no No Local); and when the upstream broker
// stops mid-stream and a new one starts on the same port while the edge
// keeps publishing, every message reaches an HTTP/3 subscriber of the
// upstream (which resumes), in order once duplicates are removed, and a
// message published on the new upstream comes down (the bridge's
// subscription resumes across the restart).
func TestQuiotUpstreamHTTP3(t *testing.T) {
	pki := testutil.NewPKI(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	edge := startEdge(t, pki)
	up := brokertest.Start(t, pki, nil)
	addr := up.Addr().(*net.UDPAddr)
	caFile := pki.CAFile(t)
	upSub := edgeSub(ctx, t, up, "site-1/sensors/#")
	down := edgeSub(ctx, t, edge, "cmd/#")
	br := startBridge(t, edge.Broker, config(t, fmt.Sprintf(`
[[bridge]]
name          = "peer"
url           = "https://localhost:%d"
ca_file       = %q
out           = ["sensors/#", "cmd/ok/#"]
in            = ["cmd/#"]
remote_prefix = "site-1/"
identity      = "cloud"
reconnect_min = "50ms"
reconnect_max = "500ms"
`, addr.Port, caFile)))
	if err := br.WaitFor(ctx, func(s bridge.Stats) bool { return s.Connected && s.Subscribed > 0 }); err != nil {
		t.Fatalf("bridge never connected and subscribed: %+v", br.Stats())
	}

	// Down: a message published on the upstream comes to the edge.
	publish(ctx, t, up.Broker, "site-1/cmd/ok/c1", "down-1", false)
	if m := nextEdge(ctx, t, down, "down-1"); m.Topic != "cmd/ok/c1" || string(m.Payload) != "down-1" {
		t.Fatalf("edge got %s %q, want cmd/ok/c1 down-1", m.Topic, m.Payload)
	}
	// No echo: a local cmd/ok message goes up (out) and comes back on the
	// bridge's subscription, where the echo guard drops it.
	publish(ctx, t, edge.Broker, "cmd/ok/local", "from-edge", false)
	if m := nextEdge(ctx, t, down, "the local message"); string(m.Payload) != "from-edge" {
		t.Fatalf("edge got %q", m.Payload)
	}
	if err := br.WaitFor(ctx, func(s bridge.Stats) bool { return s.Echoes == 1 }); err != nil {
		t.Fatalf("the upstream's copy of the local message was not dropped: %+v", br.Stats())
	}
	publish(ctx, t, up.Broker, "site-1/cmd/ok/c2", "down-2", false)
	if m := nextEdge(ctx, t, down, "down-2"); string(m.Payload) != "down-2" {
		t.Fatalf("edge got %s %q, want down-2 (an echo of the local message?)", m.Topic, m.Payload)
	}

	const per = 100
	seen := map[int]int{}
	var order []int
	read := func(until int) {
		for len(seen) < until {
			m := nextEdge(ctx, t, upSub, fmt.Sprintf("message %d of %d", len(seen)+1, until))
			if m.Gap {
				continue // the upstream's restart, announced to its subscriber
			}
			var n int
			if _, err := fmt.Sscanf(m.Topic+" "+string(m.Payload), "site-1/sensors/seq m-%d", &n); err != nil {
				t.Fatalf("upstream got %s %q", m.Topic, m.Payload)
			}
			if seen[n] == 0 {
				order = append(order, n)
			}
			seen[n]++
		}
	}
	pub := func(from, to int) {
		for i := from; i < to; i++ {
			publish(ctx, t, edge.Broker, "sensors/seq", fmt.Sprintf("m-%d", i), false)
		}
	}
	pub(0, per)
	read(per)
	if err := up.Close(); err != nil {
		t.Fatal(err)
	}
	if err := br.WaitFor(ctx, func(s bridge.Stats) bool { return !s.Connected }); err != nil {
		t.Fatal("the bridge never noticed the upstream was gone")
	}
	pub(per, 2*per) // while the upstream is down: queued
	up2 := brokertest.Start(t, pki, &broker.Options{Listen: addr.String()})
	publish(ctx, t, up2.Broker, "site-1/cmd/ok/c3", "after-restart", false)
	pub(2*per, 3*per)
	read(3 * per)
	if m := nextEdge(ctx, t, down, "the message published on the restarted upstream"); string(m.Payload) != "after-restart" {
		t.Fatalf("edge got %s %q, want after-restart", m.Topic, m.Payload)
	}
	if err := br.WaitFor(ctx, func(s bridge.Stats) bool { return s.Queued == 0 }); err != nil {
		t.Fatal(err)
	}
	dups := 0
	for _, c := range seen {
		dups += c - 1
	}
	for i, n := range order {
		if n != i {
			t.Fatalf("order broken at %d: got m-%d", i, n)
		}
	}
	s := br.Stats()
	t.Logf("all %d messages arrived in order; %d duplicates; bridge stats %+v", 3*per, dups, s)
	if s.Dropped != 0 || s.Refused != 0 || s.Connects < 2 || s.In != 3 {
		t.Fatalf("stats %+v: want no drops or refusals, a reconnect and 3 messages in", s)
	}
}
