package mqttquic

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"net/http"
	"net/url"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/quiot/quiot/broker/auth"
	"github.com/quiot/quiot/device/client"
	"github.com/quiot/quiot/internal/testenv"
)

// pathsACL denies: anonymous clients and mallory may use only their own
// topics, alice owns a/#.
const pathsACL = aclFile + `
[[user]]
name      = "mallory"
token     = "tok-mallory"
publish   = ["m/#", "public/#"]
subscribe = ["m/#", "public/#"]
`

// noAliceA is pathsACL after a reload that took a/# from alice.
const noAliceA = `
[anonymous]
publish   = ["public/#"]
subscribe = ["public/#"]

[[user]]
name      = "alice"
token     = "tok-alice"
publish   = ["public/#"]
subscribe = ["public/#"]
`

// TestEveryMessagePathAuthorized enumerates every path a message can take
// into or out of the broker pair and checks each against a denying ACL:
// the attempt is refused, and nothing reaches a subscriber that is not
// allowed it. alice's subscribers to a/# on both protocols (observers)
// must see only the probe alice publishes after each attempt; an attacker
// must see nothing of a/# before its own sync message.
//
// A new message path (a cluster link, a new publish form) belongs in this
// table.
func TestEveryMessagePathAuthorized(t *testing.T) {
	b, core := startSecure(t, pathsACL, nil)
	obs := newObservers(t, b)
	ctx := context.Background()
	anonH3 := func(t *testing.T, mode string) client.Client {
		return newClient(t, b.pki, b.h3URL(), func(o *client.Options) { o.PublishMode = mode })
	}
	reload := func(t *testing.T, acl string) {
		a, err := auth.Parse([]byte(acl))
		if err != nil {
			t.Fatal(err)
		}
		old := core.a.Load()
		core.a.Store(a)
		t.Cleanup(func() { core.a.Store(old) })
	}
	// a retained message of alice for the replay paths
	if _, err := obs.h3c.Publish(ctx, "a/r", []byte("retained-secret"), client.PublishOptions{QoS: 1, Retain: true}); err != nil {
		t.Fatal(err)
	}
	obs.drain(t, "a/r")

	paths := []struct {
		name    string
		attempt func(t *testing.T)
	}{
		{"h3 request publish", func(t *testing.T) {
			if _, err := anonH3(t, "request").Publish(ctx, "a/x", []byte("h3-req"), client.PublishOptions{QoS: 1}); err == nil {
				t.Error("anonymous HTTP/3 request publish to a/x accepted")
			}
		}},
		{"h3 stream publish", func(t *testing.T) {
			if _, err := anonH3(t, "stream").Publish(ctx, "a/x", []byte("h3-stream"), client.PublishOptions{QoS: 1}); err == nil {
				t.Error("anonymous HTTP/3 stream publish to a/x accepted")
			}
		}},
		{"https tcp fallback publish", func(t *testing.T) {
			// HTTP/1.1 and HTTP/2 over TLS on the broker's TCP port.
			tcp := b.h3.Broker.TCPAddr()
			if tcp == nil {
				t.Skip("the broker has no TCP listener")
			}
			hc := &http.Client{Transport: &http.Transport{
				TLSClientConfig:   &tls.Config{RootCAs: b.pki.Pool(), ServerName: "localhost"},
				ForceAttemptHTTP2: true,
			}, Timeout: 30 * time.Second}
			t.Cleanup(hc.CloseIdleConnections)
			u := "https://localhost:" + portOf(tcp.String()) + "/v1/topics/" + url.PathEscape("a/x")
			resp, err := hc.Post(u, "application/octet-stream", strings.NewReader("https-tcp"))
			if err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusForbidden && resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("anonymous publish over %s to a/x: %s", resp.Proto, resp.Status)
			}
		}},
		{"mqtt publish quic v5", func(t *testing.T) {
			c := mustConnect(t, b.mqtt, b.pki, "quic", connectOpts{id: "p-quic5", clean: true})
			if code, err := c.publish("a/x", "mqtt-quic", 1, false); err == nil && code < 0x80 {
				t.Errorf("anonymous MQTT 5 publish to a/x: 0x%02x", code)
			}
		}},
		{"mqtt publish tcp v3.1.1", func(t *testing.T) {
			c := mustConnect(t, b.mqtt, b.pki, "tcp", connectOpts{version: 4, id: "p-tcp4", user: "mallory", pass: "tok-mallory", clean: true})
			if _, err := c.publish("a/x", "mqtt-tcp", 1, false); err == nil {
				t.Error("mallory's MQTT 3.1.1 publish to a/x acknowledged")
			}
		}},
		{"mqtt publish tls v5 certificate", func(t *testing.T) {
			cert := b.pki.Client(t, "mallory")
			c := mustConnect(t, b.mqtt, b.pki, "tls", connectOpts{id: "p-tls5", clean: true, cert: &cert})
			if code, err := c.publish("a/x", "mqtt-tls", 1, false); err == nil && code < 0x80 {
				t.Errorf("MQTT 5 publish over TLS to a/x by certificate mallory: 0x%02x", code)
			}
			if code, err := c.publish("m/x", "mqtt-tls", 1, false); err != nil || code != 0 {
				t.Errorf("certificate identity mallory may publish to m/x: 0x%02x %v", code, err)
			}
		}},
		{"mqtt publish to $ topic", func(t *testing.T) {
			c := mustConnect(t, b.mqtt, b.pki, "tcp", connectOpts{id: "p-dollar", user: "alice", pass: "tok-alice", clean: true})
			if code, err := c.publish("$quiot/a", "dollar", 1, false); err == nil && code < 0x80 {
				t.Errorf("MQTT publish to $quiot/a: 0x%02x", code)
			}
		}},
		{"mosquitto_pub", func(t *testing.T) {
			testenv.RequireTool(t, "mosquitto_pub")
			cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			// The publish is refused (PUBACK 0x87); mosquitto_pub says so
			// and exits.
			out, _ := exec.CommandContext(cctx, "mosquitto_pub", "-h", "127.0.0.1", "-p", portOf(b.mqtt.TCPAddr()),
				"-V", "mqttv5", "-q", "1", "-t", "a/x", "-m", "mosquitto").CombinedOutput()
			t.Logf("mosquitto_pub: %s", strings.TrimSpace(string(out)))
		}},
		{"will", func(t *testing.T) {
			c, code := connectRaw(t, b.mqtt, b.pki, "quic", connectOpts{id: "p-will", clean: true, willTopic: "a/door", willPayload: "will", willRetain: true})
			if code < 0x80 && code != packets.Err3NotAuthorized.Code {
				_ = c.nc.Close()
				waitForCond(t, func() bool { return sessionOffline(b.mqtt, "p-will") }, "the session to end")
				t.Errorf("anonymous CONNECT with a will on a/door: 0x%02x", code)
			}
		}},
		{"will mosquitto_sub kill -9", func(t *testing.T) { willMosquitto(t, b) }},
		{"will after reload", func(t *testing.T) {
			c := mustConnect(t, b.mqtt, b.pki, "tcp", connectOpts{id: "p-will-reload", user: "alice", pass: "tok-alice", clean: true, willTopic: "a/door", willPayload: "will"})
			reload(t, noAliceA)
			_ = c.nc.Close()
			waitForCond(t, func() bool { return sessionOffline(b.mqtt, "p-will-reload") }, "the session to end")
		}},
		{"retained replay h3 subscribe", func(t *testing.T) {
			c := anonH3(t, "request")
			for _, f := range []string{"a/#", "#", "+/r"} {
				sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				got := make(chan client.Message, 1)
				err := c.Subscribe(sctx, f, 0, func(m client.Message) { got <- m })
				cancel()
				if err == nil || errorsIsCanceled(err) {
					t.Errorf("anonymous HTTP/3 subscribe %s: %v", f, err)
				}
				select {
				case m := <-got:
					t.Errorf("anonymous HTTP/3 subscriber of %s got %q on %q", f, m.Payload, m.Topic)
				default:
				}
			}
		}},
		{"retained replay mqtt subscribe", func(t *testing.T) {
			c := mustConnect(t, b.mqtt, b.pki, "tcp", connectOpts{id: "p-retained", user: "mallory", pass: "tok-mallory", clean: true})
			for _, f := range []string{"a/#", "#", "+/r", "a/r", "$share/g/a/#"} {
				if codes := c.subscribe(f); codes[0] < 0x80 {
					t.Errorf("mallory's subscribe %s granted: 0x%02x", f, codes[0])
				}
			}
			c.expectNoPublish("p-retained", "retained replay")
		}},
		{"retained replay mqtt after reload", func(t *testing.T) {
			reload(t, noAliceA)
			c := mustConnect(t, b.mqtt, b.pki, "tcp", connectOpts{id: "p-retained-reload", user: "alice", pass: "tok-alice", clean: true})
			if codes := c.subscribe("a/#"); codes[0] < 0x80 {
				t.Errorf("subscribe a/# after reload granted: 0x%02x", codes[0])
			}
			c.expectNoPublish("p-retained-reload", "retained replay after reload")
		}},
		{"live delivery after reload", func(t *testing.T) {
			c := mustConnect(t, b.mqtt, b.pki, "tcp", connectOpts{id: "p-live", user: "alice", pass: "tok-alice", clean: true})
			c.subscribe("a/live", "public/#")
			reload(t, noAliceA)
			if _, err := b.h3.Broker.Publish(ctx, brokerMsg("a/live", "live")); err != nil {
				t.Fatal(err)
			}
			if _, err := b.h3.Broker.Publish(ctx, brokerMsg("public/sync/p-live", "sync")); err != nil {
				t.Fatal(err)
			}
			if pk := c.next(); pk.TopicName != "public/sync/p-live" {
				t.Errorf("alice got %q on %q after losing a/#", pk.Payload, pk.TopicName)
			}
			// The observers keep their rights on the HTTP/3 side; take
			// a/live off their channels.
			if m := recvLong(t, obs.h3, "a/live"); m.Topic != "a/live" {
				t.Fatalf("HTTP/3 observer got %q", m.Topic)
			}
		}},
		{"offline session resend after reload", func(t *testing.T) {
			const id = "p-offline"
			c := mustConnect(t, b.mqtt, b.pki, "tcp", connectOpts{id: id, user: "alice", pass: "tok-alice", expiry: 600})
			c.subscribe("a/queued")
			c.disconnect()
			waitForCond(t, func() bool { return sessionOffline(b.mqtt, id) }, "offline")
			if _, err := b.h3.Broker.Publish(ctx, brokerMsg("a/queued", "queued")); err != nil {
				t.Fatal(err)
			}
			waitForCond(t, func() bool { return queued(b.mqtt, id) == 1 }, "a/queued held for the session")
			obs.drain(t, "a/queued") // the observers' copies
			reload(t, noAliceA)
			c = mustConnect(t, b.mqtt, b.pki, "tcp", connectOpts{id: id, user: "alice", pass: "tok-alice", expiry: 600})
			c.expectNoPublish(id, "resend after reload")
		}},
		{"session takeover", func(t *testing.T) {
			const id = "p-takeover"
			c := mustConnect(t, b.mqtt, b.pki, "quic", connectOpts{id: id, user: "alice", pass: "tok-alice", expiry: 600})
			c.subscribe("a/secret")
			c.disconnect()
			waitForCond(t, func() bool { return sessionOffline(b.mqtt, id) }, "offline")
			if _, err := b.h3.Broker.Publish(ctx, brokerMsg("a/secret", "secret")); err != nil {
				t.Fatal(err)
			}
			waitForCond(t, func() bool { return queued(b.mqtt, id) == 1 }, "a/secret held for the session")
			obs.drain(t, "a/secret")
			for _, who := range []connectOpts{{id: id}, {version: 4, id: id}, {id: id, user: "mallory", pass: "tok-mallory"}} {
				m, code := connectRaw(t, b.mqtt, b.pki, "quic", who)
				if code == 0 {
					m.expectNoPublish(id, "takeover by "+who.user)
					t.Errorf("CONNECT as %s by %q accepted", id, who.user)
				}
			}
		}},
		{"bridge h3 to mqtt", func(t *testing.T) {
			// A message in the core from a publisher not allowed a/x (a
			// path that forgot its check) and one on a $ topic: the
			// bridge injects neither into MQTT.
			m := brokerMsg("a/bridged", "bridged")
			m.Identity = "mallory"
			if _, err := b.h3.Broker.Publish(ctx, m); err != nil {
				t.Fatal(err)
			}
			recvLong(t, obs.h3, "a/bridged") // the HTTP/3 side is not the bridge's
			if _, err := b.h3.Broker.Publish(ctx, brokerMsg("$SYS/broker/spoof", "spoof")); err != nil {
				t.Logf("core refused the $ topic: %v", err)
			}
		}},
		{"bridge mqtt to h3", func(t *testing.T) {
			// mallory over MQTT 5 (QUIC): refused before the bridge hands
			// anything to the core, so HTTP/3 subscribers see nothing.
			c := mustConnect(t, b.mqtt, b.pki, "quic", connectOpts{id: "p-m2h", user: "mallory", pass: "tok-mallory", clean: true})
			if code, err := c.publish("a/m2h", "m2h", 1, true); err == nil && code < 0x80 {
				t.Errorf("mallory's publish to a/m2h: 0x%02x", code)
			}
		}},
	}
	for _, p := range paths {
		t.Run(p.name, func(t *testing.T) {
			p.attempt(t)
			if t.Failed() {
				return
			}
		})
		obs.expectOnlyProbe(t)
	}
}

func errorsIsCanceled(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// drain takes a message on topic, allowed to the observers, off both of
// their channels.
func (o *observers) drain(t *testing.T, topic string) {
	t.Helper()
	o.mq.t = t
	if m := recvLong(t, o.h3, topic); m.Topic != topic {
		t.Fatalf("HTTP/3 observer got %q, want %q", m.Topic, topic)
	}
	if pk := o.mq.next(); pk.TopicName != topic {
		t.Fatalf("MQTT observer got %q, want %q", pk.TopicName, topic)
	}
}

// willMosquitto reproduces finding 1 with a real client: mosquitto_sub
// with a will on a/door, killed with SIGKILL once connected. Refused at
// CONNECT, it exits by itself.
func willMosquitto(t *testing.T, b *bridged) {
	testenv.RequireTool(t, "mosquitto_sub")
	for _, v := range []string{"mqttv311", "mqttv5"} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		id := "mosq-will-" + v
		cmd := exec.CommandContext(ctx, "mosquitto_sub", "-h", "127.0.0.1", "-p", portOf(b.mqtt.TCPAddr()), "-V", v, "-i", id,
			"-t", "public/#", "-d", "--will-topic", "a/door", "--will-payload", "mosquitto-will", "--will-retain")
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = cmd.Stdout
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		var lines []string
		sc := bufio.NewScanner(stdout)
		connected := false
		for sc.Scan() {
			lines = append(lines, sc.Text())
			if strings.Contains(sc.Text(), "received CONNACK (0)") {
				connected = true
				break
			}
		}
		if connected {
			_ = cmd.Process.Signal(syscall.SIGKILL)
			_ = cmd.Wait()
			waitForCond(t, func() bool { return sessionOffline(b.mqtt, id) }, "the session to end")
			t.Errorf("%s: mosquitto_sub with a will on a/door connected: %q", v, lines)
		} else {
			_ = cmd.Wait()
			t.Logf("%s: mosquitto_sub refused: %q", v, lines)
		}
	}
}
