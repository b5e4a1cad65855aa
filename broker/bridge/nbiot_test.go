package bridge_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/quiot/quiot/broker/bridge"
	"github.com/quiot/quiot/broker/brokertest"
	"github.com/quiot/quiot/broker/mqttquic"
	"github.com/quiot/quiot/broker/mqttquic/mqtttest"
	"github.com/quiot/quiot/internal/linkprofile"
	"github.com/quiot/quiot/internal/netimpair"
	"github.com/quiot/quiot/internal/testutil"
)

// TestQuiotUpstreamNBIoTBlackout bridges an edge quiot to a second quiot
// over MQTT over QUIC (lean) through the userspace link emulator with the
// nbiot profile (300 ms each way, 20/25 kbit/s, 1 % loss, 20 datagrams of
// queue), publishes 10 QoS 1 messages a second on the edge and cuts the
// link silently for 60 s in the middle (docs/bridge.md): every message
// reaches an HTTP/3 subscriber of the upstream, in order once duplicates
// are removed, and the bridge drops none. The blackout begins 5 s in and
// the publishing ends with it: the 600 messages queued meanwhile drain
// after, max_inflight (16) at a time a round trip (with one publish in
// flight, about 1.6 a second on this link, they took over 5 minutes).
func TestQuiotUpstreamNBIoTBlackout(t *testing.T) {
	if testing.Short() || raceDetector {
		// Over a minute of mostly waiting; the race detector sees the same
		// code paths in the shorter bridge tests.
		t.Skip("a 60 s link blackout: runs without -short and -race only")
	}
	const (
		rate     = 10 // messages a second
		before   = 5 * time.Second
		blackout = 60 * time.Second
	)
	pki := testutil.NewPKI(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	edge := startEdge(t, pki)
	up := brokertest.Start(t, pki, nil)
	ms := mqtttest.Start(t, pki, mqttquic.Options{Broker: up.Broker})
	prof, err := linkprofile.Get("nbiot")
	if err != nil {
		t.Fatal(err)
	}
	relay, err := netimpair.New(netimpair.Options{Upstream: ms.QUICAddr().String(), Up: prof.Up, Down: prof.Down, Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = relay.Close() })
	caFile := pki.CAFile(t)
	upSub := edgeSub(ctx, t, up, "site-1/sensors/#")
	br := startBridge(t, edge.Broker, config(t, fmt.Sprintf(`
[[bridge]]
name          = "nbiot"
url           = "mqtt-quic://localhost:%d"
ca_file       = %q
out           = ["sensors/#"]
remote_prefix = "site-1/"
tuning        = "lean"
reconnect_min = "1s"
reconnect_max = "5s"
`, relay.Addr().Port, caFile)))
	if err := br.WaitFor(ctx, func(s bridge.Stats) bool { return s.Connected }); err != nil {
		t.Fatalf("bridge never connected over the nbiot link: %+v", br.Stats())
	}

	// The load: rate messages a second, with the blackout between before
	// and before+blackout (the publishing is timed; nothing is asserted
	// on time).
	total := int((before + blackout).Seconds()) * rate
	tick := time.NewTicker(time.Second / rate)
	defer tick.Stop()
	start := time.Now()
	cut := false
	for i := range total {
		<-tick.C
		if !cut && time.Since(start) >= before {
			relay.SetBlackout(true)
			cut = true
		}
		publish(ctx, t, edge.Broker, "sensors/seq", fmt.Sprintf("m-%d", i), false)
	}
	<-tick.C
	relay.SetBlackout(false)
	lifted := time.Now()

	seen := map[int]int{}
	var order []int
	for len(seen) < total {
		m := nextEdge(ctx, t, upSub, fmt.Sprintf("message %d of %d (bridge %+v)", len(seen)+1, total, br.Stats()))
		var n int
		if _, err := fmt.Sscanf(m.Topic+" "+string(m.Payload), "site-1/sensors/seq m-%d", &n); err != nil || n < 0 || n >= total {
			t.Fatalf("upstream got %s %q", m.Topic, m.Payload)
		}
		if seen[n] == 0 {
			order = append(order, n)
		}
		seen[n]++
	}
	for i, n := range order {
		if n != i {
			t.Fatalf("order broken at %d: got m-%d", i, n)
		}
	}
	// The last PUBACKs may come after the subscriber had the messages.
	if err := br.WaitFor(ctx, func(s bridge.Stats) bool { return s.Queued == 0 }); err != nil {
		t.Fatalf("queue never empty: %+v", br.Stats())
	}
	dups := 0
	for _, c := range seen {
		dups += c - 1
	}
	s := br.Stats()
	rs := relay.Stats()
	t.Logf("all %d messages arrived in order through a %v blackout on nbiot, the last %v after it ended; %d duplicates; bridge %+v; relay up %+v down %+v",
		total, blackout, time.Since(lifted).Round(time.Second), dups, s, rs.Up, rs.Down)
	if s.Dropped != 0 {
		t.Fatalf("the bridge dropped %d messages", s.Dropped)
	}
}
