package bridge_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/auth"
	"github.com/quiot/quiot/broker/bridge"
	"github.com/quiot/quiot/broker/brokertest"
	"github.com/quiot/quiot/internal/testutil"
)

// levels returns a topic under prefix with n levels in all, the last one
// padded so that the topic is size bytes (size 0: no padding).
func levels(prefix string, n, size int) string {
	parts := strings.Split(strings.TrimSuffix(prefix, "/"), "/")
	for len(parts) < n {
		parts = append(parts, "l")
	}
	s := strings.Join(parts, "/")
	if size > len(s) {
		s += strings.Repeat("x", size-len(s))
	}
	return s
}

// TestBridgeTopicLimits: a message coming down a bridge passes the edge's
// topic limits (256 bytes, 16 levels by default; the broker's own limits),
// checked on its local topic (remote_prefix stripped), as a local
// publisher's: an upstream that allows longer topics (another quiot with
// larger limits, over MQTT over QUIC and HTTP/3) sends them, the edge
// refuses and counts them and delivers the ones within the limits,
// the largest allowed included (whose remote topic, with the prefix, is
// beyond 256 bytes).
func TestBridgeTopicLimits(t *testing.T) {
	for _, scheme := range []string{"mqtt-quic", "https"} {
		t.Run(scheme, func(t *testing.T) { bridgeTopicLimits(t, scheme) })
	}
}

func bridgeTopicLimits(t *testing.T, scheme string) {
	pki := testutil.NewPKI(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	edge := startEdge(t, pki)
	up := startUpstream(t, pki, &broker.Options{Limits: broker.Limits{MaxTopicLength: 4096, MaxTopicLevels: 256}}, scheme)
	down := edgeSub(ctx, t, edge, "cmd/#")
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
	if err := br.WaitFor(ctx, func(s bridge.Stats) bool { return s.Connected && s.Subscribed > 0 }); err != nil {
		t.Fatalf("bridge never connected and subscribed: %+v", br.Stats())
	}
	for _, tc := range []struct {
		name  string
		local string
		ok    bool
	}{
		{"16 levels", levels("cmd/ok/", 16, 0), true},
		{"256 bytes", levels("cmd/ok/", 3, 256), true},
		{"17 levels", levels("cmd/ok/", 17, 0), false},
		{"257 bytes", levels("cmd/ok/", 3, 257), false},
		{"200 levels", levels("cmd/ok/", 200, 0), false},
		{"4000 bytes", levels("cmd/ok/", 3, 4000), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s0 := br.Stats()
			publish(ctx, t, up.b.Broker, "site-1/"+tc.local, tc.name, false)
			publish(ctx, t, up.b.Broker, "site-1/cmd/ok/end", "end", false)
			m := nextEdge(ctx, t, down, tc.name)
			if tc.ok {
				if m.Topic != tc.local {
					t.Fatalf("edge got %.40s... %q, want the message on %.40s...", m.Topic, m.Payload, tc.local)
				}
				m = nextEdge(ctx, t, down, "the end marker")
			}
			if m.Topic != "cmd/ok/end" {
				t.Fatalf("edge got %.60q (%d bytes, %d levels), want the end marker: the topic is beyond the limits", m.Topic, len(m.Topic), strings.Count(m.Topic, "/")+1)
			}
			_ = br.WaitFor(ctx, func(s bridge.Stats) bool { return s.In+s.InRefused >= s0.In+s0.InRefused+2 })
			refused := uint64(1)
			if tc.ok {
				refused = 0
			}
			if s := br.Stats(); s.InRefused-s0.InRefused != refused {
				t.Fatalf("stats %+v (before %+v): want %d refused", s, s0, refused)
			}
		})
	}
}

// TestBridgeFilterLimits: a bridge's in and out filters are bounded by the
// topic limits of the broker that runs it (--max-topic-bytes,
// --max-topic-levels): beyond them the bridge does not start, naming the
// bridge and the key (the default limits, 256 bytes and 16 levels, are
// checked when the table is read: TestParseErrors).
func TestBridgeFilterLimits(t *testing.T) {
	a, err := auth.Parse([]byte(edgeACL))
	if err != nil {
		t.Fatal(err)
	}
	edge := brokertest.Start(t, testutil.NewPKI(t), &broker.Options{Auth: a, Limits: broker.Limits{MaxTopicLength: 64, MaxTopicLevels: 4}})
	for _, tc := range []struct {
		name, key string
		in, out   []string
		says      string
	}{
		{"in levels", "in", []string{"cmd/a/b/c/#"}, nil, "5 levels, more than 4"},
		{"out levels", "out", nil, []string{"sensors/a/b/+/c"}, "5 levels, more than 4"},
		{"in bytes", "in", []string{"cmd/" + strings.Repeat("x", 61)}, nil, "65 bytes, longer than 64"},
		{"out bytes", "out", nil, []string{"sensors/" + strings.Repeat("x", 57)}, "65 bytes, longer than 64"},
		{"within", "", []string{"cmd/a/b/#"}, []string{"sensors/" + strings.Repeat("x", 56)}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config(t, "[[bridge]]\nname = \"cloud\"\nurl = \"mqtt://127.0.0.1:1\"\nidentity = \"cloud\"\nout = [\"sensors/#\"]\n")
			cfg.In, cfg.Out = tc.in, tc.out
			br, err := bridge.New(edge.Broker, cfg, testutil.DiscardLogger())
			if tc.key == "" {
				if err != nil {
					t.Fatalf("New = %v, want filters within the limits accepted", err)
				}
				_ = br.Close(context.Background())
				return
			}
			var be *bridge.Error
			if !errors.As(err, &be) || be.Key != tc.key || be.Bridge != `"cloud"` || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("New = %v, want a bridge error for %q on key %q saying %q", err, "cloud", tc.key, tc.says)
			}
		})
	}
}
