package bridge_test

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/quiot/quiot/broker/bridge"
	"github.com/quiot/quiot/broker/brokertest"
	"github.com/quiot/quiot/broker/mqttquic"
	"github.com/quiot/quiot/broker/mqttquic/mqtttest"
	"github.com/quiot/quiot/internal/testutil"
)

// TestQuiotUpstreamQUIC bridges an edge quiot to a second quiot over MQTT
// over QUIC (mqtt-quic://, the lean profile): messages go up and come
// down, and when the upstream's MQTT over QUIC listener stops mid-stream
// and starts again on the same port while the edge keeps publishing QoS
// 1, every message reaches an HTTP/3 subscriber of the upstream, in order
// once duplicates from cut publishes are removed.
func TestQuiotUpstreamQUIC(t *testing.T) {
	pki := testutil.NewPKI(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	edge := startEdge(t, pki)
	up := brokertest.Start(t, pki, nil)
	ms := mqtttest.Start(t, pki, mqttquic.Options{Broker: up.Broker})
	addr := ms.QUICAddr().(*net.UDPAddr)
	caFile := pki.CAFile(t)
	upSub := edgeSub(ctx, t, up, "site-1/sensors/#")
	down := edgeSub(ctx, t, edge, "cmd/#")
	br := startBridge(t, edge.Broker, config(t, fmt.Sprintf(`
[[bridge]]
name          = "peer"
url           = "mqtt-quic://localhost:%d"
ca_file       = %q
out           = ["sensors/#"]
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

	// Up, with a restart of the upstream's listener mid-stream.
	const per = 100
	seen := map[int]int{}
	var order []int
	read := func(until int) {
		for len(seen) < until {
			m := nextEdge(ctx, t, upSub, fmt.Sprintf("message %d of %d", len(seen)+1, until))
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
	read(per / 3)
	_ = ms.Close()
	if err := br.WaitFor(ctx, func(s bridge.Stats) bool { return !s.Connected }); err != nil {
		t.Fatal("the bridge never noticed the upstream was gone")
	}
	pub(per, 2*per)
	if s := br.Stats(); s.Queued == 0 {
		t.Fatalf("nothing queued while the upstream is down: %+v", s)
	}
	mqtttest.Start(t, pki, mqttquic.Options{Broker: up.Broker, QUICAddr: addr.String()})
	pub(2*per, 3*per)
	read(3 * per)
	if err := br.WaitFor(ctx, func(s bridge.Stats) bool { return s.Queued == 0 }); err != nil {
		t.Fatal(err)
	}
	dups := 0
	for n, c := range seen {
		if n < 0 || n >= 3*per {
			t.Fatalf("unexpected message m-%d", n)
		}
		dups += c - 1
	}
	for i, n := range order {
		if n != i {
			t.Fatalf("order broken at %d: got m-%d (order %v)", i, n, order)
		}
	}
	s := br.Stats()
	t.Logf("all %d messages arrived in order over mqtt-quic; %d duplicates; bridge stats %+v", 3*per, dups, s)
	if s.Dropped != 0 || s.Connects < 2 {
		t.Fatalf("stats %+v: want no drops and a reconnect", s)
	}

	// Down again on the new connection.
	if err := br.WaitFor(ctx, func(s bridge.Stats) bool { return s.Subscribed >= 2 }); err != nil {
		t.Fatalf("no subscription on the new connection: %+v", br.Stats())
	}
	publish(ctx, t, up.Broker, "site-1/cmd/ok/c2", "down-2", false)
	if m := nextEdge(ctx, t, down, "down-2"); string(m.Payload) != "down-2" {
		t.Fatalf("edge got %s %q, want down-2", m.Topic, m.Payload)
	}
}
