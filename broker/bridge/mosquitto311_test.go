package bridge_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/quiot/quiot/broker/bridge"
	"github.com/quiot/quiot/internal/testutil"
)

// TestMosquittoUpstream311 bridges an edge broker to mosquitto with
// mqtt_version = "3.1.1" (mosquitto logs its protocol as p2), over
// mqtts:// and mqtt://, both ways, with out and in overlapping: a local
// message that goes up comes back on the bridge's subscription (3.1.1 has
// no No Local) and is dropped as the bridge's own (Echoes), and a message
// that came down is not sent back up (origin).
func TestMosquittoUpstream311(t *testing.T) {
	pki := testutil.NewPKI(t)
	mq := startMosquitto(t, pki, false)
	for _, tc := range []struct {
		name, url, extra string
	}{
		{"mqtts", "mqtts://127.0.0.1:" + mq.tlsPort, fmt.Sprintf("ca_file = %q\n", mq.caFile)},
		{"mqtt", "mqtt://127.0.0.1:" + mq.port, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			prefix := "v311-" + tc.name + "/"
			clientID := "quiot-bridge-v311-" + tc.name
			edge := startEdge(t, pki)
			up := mq.sub(ctx, t, prefix+"#")
			down := edgeSub(ctx, t, edge, "cmd/#")
			br := startBridge(t, edge.Broker, config(t, fmt.Sprintf(`
[[bridge]]
name          = "cloud"
url           = %q
mqtt_version  = "3.1.1"
client_id     = %q
out           = ["sensors/#", "cmd/ok/#"]
in            = ["cmd/#"]
remote_prefix = %q
username      = %q
password      = %q
identity      = "cloud"
reconnect_min = "50ms"
%s`, tc.url, clientID, prefix, upUser, upPass, tc.extra)))
			if err := br.WaitFor(ctx, func(s bridge.Stats) bool { return s.Connected && s.Subscribed > 0 }); err != nil {
				t.Fatalf("bridge never connected and subscribed: %+v", br.Stats())
			}

			publish(ctx, t, edge.Broker, "sensors/t1", "up-1", false)
			if l := up.next(ctx, t, "up-1"); l != prefix+"sensors/t1 up-1" {
				t.Fatalf("upstream got %q", l)
			}
			mq.pub(t, "-q", "1", "-t", prefix+"cmd/ok/c1", "-m", "down-1")
			if m := nextEdge(ctx, t, down, "down-1"); m.Topic != "cmd/ok/c1" || string(m.Payload) != "down-1" {
				t.Fatalf("edge got %s %q", m.Topic, m.Payload)
			}
			// A local message under both out and in: up once, not back down.
			publish(ctx, t, edge.Broker, "cmd/ok/local", "from-edge", false)
			if m := nextEdge(ctx, t, down, "the local message"); string(m.Payload) != "from-edge" {
				t.Fatalf("edge got %q", m.Payload)
			}
			if err := br.WaitFor(ctx, func(s bridge.Stats) bool { return s.Echoes == 1 }); err != nil {
				t.Fatalf("the upstream's copy of the local message was not dropped: %+v", br.Stats())
			}
			mq.pub(t, "-q", "1", "-t", prefix+"cmd/ok/c2", "-m", "down-2")
			if m := nextEdge(ctx, t, down, "down-2"); string(m.Payload) != "down-2" {
				t.Fatalf("edge got %s %q, want down-2 (an echo?)", m.Topic, m.Payload)
			}
			// Upstream, each message once: down-1 and down-2 (from
			// mosquitto_pub, not sent back up), the local one, the sentinel.
			publish(ctx, t, edge.Broker, "sensors/end", "end", false)
			var got []string
			for len(got) == 0 || got[len(got)-1] != prefix+"sensors/end end" {
				got = append(got, up.next(ctx, t, "the sentinel"))
			}
			want := []string{prefix + "cmd/ok/c1 down-1", prefix + "cmd/ok/local from-edge", prefix + "cmd/ok/c2 down-2", prefix + "sensors/end end"}
			if strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Fatalf("upstream got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			// Retained up.
			publish(ctx, t, edge.Broker, "sensors/r", "kept-up", true)
			if l := up.next(ctx, t, "the retained message live"); l != prefix+"sensors/r kept-up" {
				t.Fatalf("upstream got %q", l)
			}
			late := mq.sub(ctx, t, prefix+"sensors/r")
			if l := late.next(ctx, t, "the retained message"); l != prefix+"sensors/r kept-up" {
				t.Fatalf("late upstream subscriber got %q", l)
			}
			if s := br.Stats(); s.In != 2 || s.Echoes != 1 {
				t.Fatalf("stats %+v: want 2 in, 1 echo", s)
			}
			if log := mq.stderr.String(); !strings.Contains(log, " as "+clientID+" (p2, c1,") {
				t.Fatalf("mosquitto did not see an MQTT 3.1.1 (p2: mosquitto numbers 3.1 p1, 3.1.1 p2, 5 p5) clean session from %s:\n%s", clientID, log)
			}
		})
	}
}
