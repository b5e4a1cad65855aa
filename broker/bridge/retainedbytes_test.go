package bridge_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/auth"
	"github.com/quiot/quiot/broker/bridge"
	"github.com/quiot/quiot/broker/brokertest"
	"github.com/quiot/quiot/broker/mqttquic"
	"github.com/quiot/quiot/broker/mqttquic/mqtttest"
	"github.com/quiot/quiot/broker/space"
	"github.com/quiot/quiot/internal/testutil"
)

// TestBridgeRetainedBytes: retained messages coming down a bridge count
// against the edge's retained-bytes bound (--retained-bytes) as a local
// client's do: 20 retained messages of 1 KiB on the upstream (a second
// quiot, over MQTT over QUIC and HTTP/3) against an 8 KiB bound leave the
// edge holding as many as fit, within the bound; the others are refused
// and counted, and later subscribers on the edge, HTTP/3 and MQTT/TCP
// (mosquitto_sub), get only the ones kept.
func TestBridgeRetainedBytes(t *testing.T) {
	for _, scheme := range []string{"mqtt-quic", "https"} {
		t.Run(scheme, func(t *testing.T) { bridgeRetainedBytes(t, scheme) })
	}
}

func bridgeRetainedBytes(t *testing.T, scheme string) {
	const (
		n     = 20
		bound = 8 << 10
	)
	pki := testutil.NewPKI(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a, err := auth.Parse([]byte(edgeACL))
	if err != nil {
		t.Fatal(err)
	}
	edge := brokertest.Start(t, pki, &broker.Options{Auth: a, Limits: broker.Limits{RetainedBytes: bound}})
	ms := mqtttest.Start(t, pki, mqttquic.Options{QUICAddr: "off", TCPAddr: "127.0.0.1:0", Broker: edge.Broker})
	_, mqttPort, err := net.SplitHostPort(ms.TCPAddr())
	if err != nil {
		t.Fatal(err)
	}
	up := startUpstream(t, pki, nil, scheme)
	payload := strings.Repeat("r", 1<<10)
	for i := range n {
		publish(ctx, t, up.b.Broker, fmt.Sprintf("site-1/cmd/ok/r/%02d", i), payload, true)
	}
	cost := space.Cost(&broker.Message{Topic: "cmd/ok/r/00", Payload: []byte(payload)})
	fit := int(bound / cost)
	if fit == 0 || fit >= n {
		t.Fatalf("a retained message costs %d bytes: %d of them fit in %d, want some but not all", cost, fit, bound)
	}

	br := startBridge(t, edge.Broker, config(t, fmt.Sprintf(`
[[bridge]]
name          = "cloud"
url           = %q
in            = ["cmd/#"]
remote_prefix = "site-1/"
identity      = "cloud"
reconnect_min = "50ms"
reconnect_max = "500ms"
%s`, up.url, up.extra)))
	if err := br.WaitFor(ctx, func(s bridge.Stats) bool { return s.In+s.InRefused >= n }); err != nil {
		t.Fatalf("the retained messages did not all come down: %+v", br.Stats())
	}
	if s := br.Stats(); s.In != uint64(fit) || s.InRefused != uint64(n-fit) {
		t.Fatalf("stats %+v: want %d accepted (as many as fit %d bytes), %d refused", s, fit, bound, n-fit)
	}
	st := edge.Broker.Space().Stats()
	if st.Retained != fit || st.RetainedBytes > bound {
		t.Fatalf("edge holds %d retained messages, %d bytes; want %d within %d bytes", st.Retained, st.RetainedBytes, fit, bound)
	}

	// The MQTT side takes the broker's messages in order on its own
	// goroutine: once a message published after them reaches an MQTT
	// subscriber, it has the retained ones.
	mark := mosquittoSub(ctx, t, "-p", mqttPort, "-t", "cmd/ok/sync", "-V", "mqttv5")
	publish(ctx, t, edge.Broker, "cmd/ok/sync", "sync", false)
	if l := mark.next(ctx, t, "the sync message"); l != "cmd/ok/sync sync" {
		t.Fatalf("MQTT subscriber got %q", l)
	}

	// Later subscribers get the kept ones, and nothing more before a live
	// end marker.
	h3 := edgeSub(ctx, t, edge, "cmd/#")
	mq := mosquittoSub(ctx, t, "-p", mqttPort, "-t", "cmd/#", "-V", "mqttv5", "-F", "%t %r")
	subs := []struct {
		name string
		next func() (topic string, retained bool)
	}{
		{"HTTP/3", func() (string, bool) {
			m := nextEdge(ctx, t, h3, "a message")
			return m.Topic, m.Retained
		}},
		{"MQTT/TCP", func() (string, bool) {
			tp, flag, _ := strings.Cut(mq.next(ctx, t, "a message"), " ")
			return tp, flag == "1"
		}},
	}
	for _, sub := range subs {
		for range fit {
			if tp, retained := sub.next(); !retained || !strings.HasPrefix(tp, "cmd/ok/r/") {
				t.Fatalf("%s subscriber got %s (retained %v), want the %d retained messages the edge kept", sub.name, tp, retained, fit)
			}
		}
	}
	publish(ctx, t, up.b.Broker, "site-1/cmd/ok/end", "end", false)
	for _, sub := range subs {
		if tp, retained := sub.next(); tp != "cmd/ok/end" {
			t.Fatalf("%s subscriber got %s (retained %v) after the %d retained messages the edge kept, want the end marker", sub.name, tp, retained, fit)
		}
	}
}
