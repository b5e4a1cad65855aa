package bridge_test

import (
	"context"
	"fmt"
	"net"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/auth"
	"github.com/quiot/quiot/broker/bridge"
	"github.com/quiot/quiot/broker/brokertest"
	"github.com/quiot/quiot/broker/mqttquic"
	"github.com/quiot/quiot/broker/mqttquic/mqtttest"
	"github.com/quiot/quiot/device/client"
	"github.com/quiot/quiot/internal/testutil"
)

// quiotUpstream is a second quiot in this process, the upstream of a
// bridge over MQTT over QUIC or HTTP/3.
type quiotUpstream struct {
	b *brokertest.Broker
	// url is the bridge's url key, extra the keys it needs (ca_file).
	url, extra string
}

// startUpstream starts a quiot upstream with opts (nil: loopback only)
// reached by scheme "mqtt-quic" or "https".
func startUpstream(t *testing.T, pki *testutil.PKI, opts *broker.Options, scheme string) quiotUpstream {
	t.Helper()
	up := brokertest.Start(t, pki, opts)
	caFile := pki.CAFile(t)
	u := quiotUpstream{b: up, extra: fmt.Sprintf("ca_file = %q\n", caFile)}
	switch scheme {
	case "mqtt-quic":
		ms := mqtttest.Start(t, pki, mqttquic.Options{Broker: up.Broker})
		u.url = fmt.Sprintf("mqtt-quic://localhost:%d", ms.QUICAddr().(*net.UDPAddr).Port)
	case "https":
		u.url = fmt.Sprintf("https://localhost:%d", up.Addr().(*net.UDPAddr).Port)
	default:
		t.Fatalf("scheme %q", scheme)
	}
	return u
}

// bridgeACL: anonymous local clients publish sensors/open/ only; the
// bridge's identity "cloud" publishes under cmd/cloud/ only (through %u,
// as every identity's patterns).
const bridgeACL = `
[anonymous]
publish   = ["sensors/open/#"]
subscribe = ["#"]

[[user]]
name    = "cloud"
publish = ["cmd/%u/#"]
`

// TestBridgeACLBothWays: the one authorization check on both directions
// of a bridge, over MQTT over QUIC and HTTP/3 to a second quiot.
//
// Down: a message the upstream sends passes the edge's ACL under the
// bridge's identity (its %u patterns): allowed ones are delivered and, when
// retained, kept; refused ones, retained included, are neither delivered
// nor kept, and counted; an ACL reload that takes the identity's right
// away refuses the next message.
//
// Up: only messages the edge accepted from their publisher go up: a local
// client's publish the ACL refuses (HTTP/3, 403) never reaches the
// upstream, although it matches the bridge's out filter.
func TestBridgeACLBothWays(t *testing.T) {
	for _, scheme := range []string{"mqtt-quic", "https"} {
		t.Run(scheme, func(t *testing.T) { bridgeACLBothWays(t, scheme) })
	}
}

func bridgeACLBothWays(t *testing.T, scheme string) {
	pki := testutil.NewPKI(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a, err := auth.Parse([]byte(bridgeACL))
	if err != nil {
		t.Fatal(err)
	}
	edge := brokertest.Start(t, pki, &broker.Options{Auth: a})
	up := startUpstream(t, pki, nil, scheme)

	// Retained on the upstream before the bridge subscribes: they come
	// down with its subscription.
	publish(ctx, t, up.b.Broker, "site-1/cmd/cloud/r", "kept", true)
	publish(ctx, t, up.b.Broker, "site-1/cmd/other/r", "denied-retained", true)

	down := edgeSub(ctx, t, edge, "#")
	upSub := edgeSub(ctx, t, up.b, "site-1/sensors/#")
	br := startBridge(t, edge.Broker, config(t, fmt.Sprintf(`
[[bridge]]
name          = "cloud"
url           = %q
out           = ["sensors/#"]
in            = ["cmd/#"]
remote_prefix = "site-1/"
identity      = "cloud"
reconnect_min = "50ms"
reconnect_max = "500ms"
%s`, up.url, up.extra)))
	if err := br.WaitFor(ctx, func(s bridge.Stats) bool { return s.Connected && s.Subscribed > 0 }); err != nil {
		t.Fatalf("bridge never connected and subscribed: %+v", br.Stats())
	}

	// Down.
	publish(ctx, t, up.b.Broker, "site-1/cmd/other/x", "denied-live", false)
	publish(ctx, t, up.b.Broker, "site-1/cmd/cloud/x", "allowed-live", false)
	var got []string
	for len(got) < 2 {
		m := nextEdge(ctx, t, down, "the allowed messages")
		if strings.HasPrefix(m.Topic, "sensors/") {
			continue
		}
		got = append(got, m.Topic+" "+string(m.Payload))
	}
	sort.Strings(got)
	if want := "cmd/cloud/r kept,cmd/cloud/x allowed-live"; strings.Join(got, ",") != want {
		t.Fatalf("edge subscriber got %v, want %s (the ACL must refuse cmd/other/ for cloud)", got, want)
	}
	if err := br.WaitFor(ctx, func(s bridge.Stats) bool { return s.In == 2 && s.InRefused == 2 }); err != nil {
		t.Fatalf("stats %+v: want 2 inbound messages accepted, 2 refused by the ACL", br.Stats())
	}
	var kept []string
	for _, m := range edge.Broker.Space().RetainedMessages() {
		kept = append(kept, m.Topic)
	}
	if strings.Join(kept, ",") != "cmd/cloud/r" {
		t.Fatalf("edge retains %v, want only cmd/cloud/r (a refused retained message must not be kept)", kept)
	}

	// Up: an anonymous HTTP/3 client of the edge.
	h3, err := client.New(client.Options{Broker: edge.URL, RootCAs: pki.Pool()})
	if err != nil {
		t.Fatal(err)
	}
	defer h3.Close()
	if _, err := h3.Publish(ctx, "sensors/secret/x", []byte("refused-up"), client.PublishOptions{QoS: 1}); err == nil || !strings.Contains(err.Error(), "403") {
		t.Fatalf("publish to sensors/secret/x = %v, want 403", err)
	}
	for _, tp := range []string{"sensors/open/x", "sensors/open/end"} {
		if _, err := h3.Publish(ctx, tp, []byte("up"), client.PublishOptions{QoS: 1}); err != nil {
			t.Fatalf("publish %s: %v", tp, err)
		}
	}
	got = got[:0]
	for len(got) == 0 || got[len(got)-1] != "site-1/sensors/open/end" {
		got = append(got, nextEdge(ctx, t, upSub, "the edge's messages").Topic)
	}
	if want := "site-1/sensors/open/x,site-1/sensors/open/end"; strings.Join(got, ",") != want {
		t.Fatalf("upstream got %v, want %s (a publish the edge refused went up?)", got, want)
	}

	// An ACL reload takes cloud's right away: the next message is refused.
	f, err := auth.Decode([]byte(strings.Replace(bridgeACL, `publish = ["cmd/%u/#"]`, `publish = []`, 1)))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Replace(f); err != nil {
		t.Fatal(err)
	}
	publish(ctx, t, up.b.Broker, "site-1/cmd/cloud/y", "after-reload", false)
	if err := br.WaitFor(ctx, func(s bridge.Stats) bool { return s.InRefused == 3 }); err != nil {
		t.Fatalf("stats %+v: the message after the reload was not refused", br.Stats())
	}
	if s := br.Stats(); s.In != 2 {
		t.Fatalf("stats %+v: a message was accepted after the reload", s)
	}
	for {
		select {
		case m := <-down:
			if strings.HasPrefix(m.Topic, "cmd/") {
				t.Fatalf("edge subscriber got %s %q after the reload", m.Topic, m.Payload)
			}
			continue
		default:
		}
		break
	}
}
