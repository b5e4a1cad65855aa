package mqttquic

import (
	"bytes"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"testing"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/auth"
	"github.com/quiot/quiot/broker/promexport"
	"github.com/quiot/quiot/internal/testutil"
)

// TestRefusalsCountedAndLogged: an MQTT CONNECT with bad credentials, a
// PUBLISH and a SUBSCRIBE the ACL denies (MQTT 5), and a PUBLISH the ACL
// denies from an MQTT 3.1.1 client (disconnected for it) are counted in
// quiot_broker_refused_total{proto="mqtt"} under their reasons and logged
// at Info as refusals with identity, client id and topic; the 3.1.1
// disconnection is not logged as a broken protocol.
func TestRefusalsCountedAndLogged(t *testing.T) {
	var logs testutil.SyncBuffer
	b, _ := startSecure(t, aclFile, func(o *Options) {
		o.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	col := promexport.NewBrokerCollector(b.h3.Stats)
	refused := func(reason string) string {
		t.Helper()
		var buf bytes.Buffer
		col.WritePrometheus(&buf)
		series := `quiot_broker_refused_total{proto="mqtt",reason="` + reason + `"}`
		m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindStringSubmatch(buf.String())
		if m == nil {
			t.Fatalf("no series %s in scrape:\n%s", series, buf.String())
		}
		return m[1]
	}
	// line reports whether an Info line with msg and every attribute of
	// attrs was logged.
	line := func(msg string, attrs ...string) bool {
		for l := range strings.Lines(logs.String()) {
			if !strings.Contains(l, fmt.Sprintf("level=INFO msg=%q", msg)) {
				continue
			}
			all := true
			for _, a := range attrs {
				all = all && strings.Contains(l, a)
			}
			if all {
				return true
			}
		}
		return false
	}

	steps := []struct {
		name   string
		do     func(t *testing.T)
		reason string
		want   string // the counter after the step
		msg    string
		attrs  []string
	}{
		{"connect with a bad password", func(t *testing.T) {
			_, code := connectRaw(t, b.mqtt, b.pki, "quic", connectOpts{id: "c-bad", user: "alice", pass: "wrong-secret"})
			if code != packets.ErrBadUsernameOrPassword.Code {
				t.Fatalf("CONNACK 0x%02x, want bad user name or password", code)
			}
		}, "unauthenticated", "1", "mqtt connect refused", []string{"client=c-bad", "reason=unauthenticated"}},
		{"publish the acl denies", func(t *testing.T) {
			c := mustConnect(t, b.mqtt, b.pki, "quic", connectOpts{id: "c-anon5"})
			t.Cleanup(c.disconnect)
			if code, err := c.publish("a/x", "1", 1, false); err != nil || code != packets.ErrNotAuthorized.Code {
				t.Fatalf("PUBACK 0x%02x, %v; want not authorized", code, err)
			}
		}, "forbidden", "1", "mqtt publish refused", []string{"client=c-anon5", `identity=""`, "topic=a/x", "reason=forbidden"}},
		{"subscribe the acl denies", func(t *testing.T) {
			c := mustConnect(t, b.mqtt, b.pki, "quic", connectOpts{id: "c-alice", user: "alice", pass: "pw-alice"})
			t.Cleanup(c.disconnect)
			if codes := c.subscribe("b/#"); len(codes) != 1 || codes[0] != packets.ErrNotAuthorized.Code {
				t.Fatalf("SUBACK %x, want not authorized", codes)
			}
		}, "forbidden", "2", "mqtt subscribe refused", []string{"client=c-alice", "identity=alice", "topic=b/#", "reason=forbidden"}},
		{"publish the acl denies, mqtt 3.1.1", func(t *testing.T) {
			c := mustConnect(t, b.mqtt, b.pki, "tcp", connectOpts{id: "c-anon4", version: 4})
			t.Cleanup(func() { _ = c.nc.Close() })
			if _, err := c.publish("a/x", "1", 1, false); err == nil {
				t.Fatal("a 3.1.1 publish the ACL denies was acknowledged")
			}
		}, "forbidden", "3", "mqtt publish refused", []string{"client=c-anon4", "topic=a/x"}},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			s.do(t)
			if v := refused(s.reason); v != s.want {
				t.Errorf("refused_total{reason=%q} = %s, want %s", s.reason, v, s.want)
			}
			if !line(s.msg, s.attrs...) {
				t.Errorf("no Info line %q with %v:\n%s", s.msg, s.attrs, logs.String())
			}
		})
	}
	waitForCond(t, func() bool { return strings.Contains(logs.String(), "mqtt client disconnected after a refusal") },
		"mochi's record of the 3.1.1 client's disconnection")
	if strings.Contains(logs.String(), "breaks the protocol") {
		t.Errorf("an ACL refusal logged as a protocol violation:\n%s", logs.String())
	}
	if strings.Contains(logs.String(), "wrong-secret") {
		t.Errorf("a password in the log:\n%s", logs.String())
	}
}

// countingCore is an aclCore that counts refusals.
type countingCore struct {
	aclCore
	n map[broker.Reason]int
}

func (c *countingCore) CountRefused(proto string, r broker.Reason) {
	if proto == Origin {
		c.n[r]++
	}
}

// TestACLRefusalsNotDeliveries: OnACLCheck counts a denied publish and a
// denied filter of the SUBSCRIBE being processed, never a delivery the ACL
// denies (a subscriber's filter wider than its rights), also while a
// SUBSCRIBE of the session with other filters is processed.
func TestACLRefusalsNotDeliveries(t *testing.T) {
	a, err := auth.Parse([]byte(aclFile))
	if err != nil {
		t.Fatal(err)
	}
	h := testAuthHook(a)
	core := &countingCore{aclCore: aclCore{a}, n: map[broker.Reason]int{}}
	h.core = core
	alice := &mqtt.Client{ID: "c-alice"}
	h.putLocked(alice.ID, &identity{cl: alice, id: "alice"})
	subscribe := packets.Packet{Filters: packets.Subscriptions{{Filter: "b/#"}, {Filter: "a/#"}}}
	steps := []struct {
		name        string
		topic       string
		write       bool
		subscribing bool
		counted     int // forbidden refusals counted so far
	}{
		{"delivery denied", "b/x", false, false, 0},
		{"publish denied", "b/x", true, false, 1},
		{"publish denied again (cached decision)", "b/x", true, false, 2},
		{"publish allowed", "a/x", true, false, 2},
		{"filter of the subscribe denied", "b/#", false, true, 3},
		{"filter of the subscribe allowed", "a/#", false, true, 3},
		{"delivery denied during the subscribe", "b/y", false, true, 3},
		{"delivery denied after the subscribe", "b/#", false, false, 3},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			if s.subscribing {
				h.OnSubscribe(alice, subscribe)
				defer h.OnSubscribed(alice, subscribe, nil)
			}
			h.OnACLCheck(alice, s.topic, s.write)
			if got := core.n[broker.ReasonForbidden]; got != s.counted {
				t.Errorf("forbidden refusals = %d, want %d", got, s.counted)
			}
		})
	}
}
