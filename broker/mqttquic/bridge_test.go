package mqttquic

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/quiot/quiot/broker/brokertest"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/auth"
	"github.com/quiot/quiot/device/client"
)

// bridged is an HTTP/3 broker with the MQTT server joined to it.
type bridged struct {
	pki  *testPKI
	h3   *brokertest.Broker
	mqtt *Server
}

func startBridged(t testing.TB, a *auth.Authenticator) *bridged {
	t.Helper()
	p := newPKI(t)
	h3 := brokertest.Start(t, p, &broker.Options{Auth: a, ClientCAs: p.Pool()})
	s := startServer(t, p, func(o *Options) {
		o.Broker = h3.Broker
		o.TCPAddr = "127.0.0.1:0"
	})
	return &bridged{pki: p, h3: h3, mqtt: s}
}

func (b *bridged) h3URL() string { return "https://localhost:" + portOf(b.h3.Addr().String()) }

// noMore fails if ch delivers anything within a short settle time (used to
// show nothing is delivered twice; the positive deliveries before it were
// awaited, so this is not a timing assertion on delivery).
func noMore(t testing.TB, ch <-chan client.Message, what string) {
	t.Helper()
	select {
	case m := <-ch:
		t.Fatalf("%s: unexpected extra delivery %q on %q", what, m.Payload, m.Topic)
	case <-time.After(300 * time.Millisecond):
	}
}

func TestCrossProtocol(t *testing.T) {
	b := startBridged(t, nil)
	for _, mq := range []struct{ name, url string }{
		{"quic", quicURL(b.mqtt)},
		{"tcp", tcpURL(b.mqtt)},
	} {
		t.Run(mq.name, func(t *testing.T) {
			mqPub := newClient(t, b.pki, mq.url, nil)
			mqSub := newClient(t, b.pki, mq.url, nil)
			h3Pub := newClient(t, b.pki, b.h3URL(), nil)
			h3Sub := newClient(t, b.pki, b.h3URL(), nil)
			f := "x/" + mq.name + "/#"
			mqCh := subscribe(t, mqSub, f)
			h3Ch := subscribe(t, h3Sub, f)
			waitSubscribed(t, mqPub, mqCh, "x/"+mq.name+"/probe-m")
			waitSubscribed(t, mqPub, h3Ch, "x/"+mq.name+"/probe-h")
			// the probes of the first wait also went to h3Ch and vice versa
			drain(mqCh)
			drain(h3Ch)

			before := b.h3.Stats()
			const n = 5
			for i := 0; i < n; i++ {
				sent := time.Now()
				topic := fmt.Sprintf("x/%s/m2h", mq.name)
				if _, err := mqPub.Publish(context.Background(), topic, []byte(fmt.Sprint("m", i)), client.PublishOptions{QoS: 1, Sent: sent}); err != nil {
					t.Fatal(err)
				}
				for _, ch := range []<-chan client.Message{mqCh, h3Ch} {
					m := recv(t, ch, "mqtt->both")
					if string(m.Payload) != fmt.Sprint("m", i) || m.Topic != topic {
						t.Fatalf("got %q on %q", m.Payload, m.Topic)
					}
					if m.Sent.UnixNano() != sent.UnixNano() {
						t.Fatalf("send time %v lost (got %v)", sent, m.Sent)
					}
				}
			}
			for i := 0; i < n; i++ {
				sent := time.Now()
				topic := fmt.Sprintf("x/%s/h2m", mq.name)
				if _, err := h3Pub.Publish(context.Background(), topic, []byte(fmt.Sprint("h", i)), client.PublishOptions{QoS: 1, Sent: sent}); err != nil {
					t.Fatal(err)
				}
				for _, ch := range []<-chan client.Message{h3Ch, mqCh} {
					m := recv(t, ch, "h3->both")
					if string(m.Payload) != fmt.Sprint("h", i) || m.Topic != topic {
						t.Fatalf("got %q on %q", m.Payload, m.Topic)
					}
					if m.Sent.UnixNano() != sent.UnixNano() {
						t.Fatalf("send time %v lost (got %v)", sent, m.Sent)
					}
				}
			}
			noMore(t, mqCh, "mqtt subscriber")
			noMore(t, h3Ch, "h3 subscriber")
			after := b.h3.Stats()
			if d := after.Protocols["mqtt"].MessagesIn - before.Protocols["mqtt"].MessagesIn; d != n {
				t.Errorf("broker accepted %d mqtt messages, want %d (a loop?)", d, n)
			}
			if d := after.Protocols["h3"].MessagesIn - before.Protocols["h3"].MessagesIn; d != n {
				t.Errorf("broker accepted %d h3 messages, want %d (a loop?)", d, n)
			}
		})
	}
}

func drain(ch <-chan client.Message) {
	for {
		select {
		case <-ch:
		case <-time.After(100 * time.Millisecond):
			return
		}
	}
}

func TestRetainedAcrossProtocols(t *testing.T) {
	b := startBridged(t, nil)
	mqPub := newClient(t, b.pki, quicURL(b.mqtt), nil)
	h3Pub := newClient(t, b.pki, b.h3URL(), nil)
	if _, err := mqPub.Publish(context.Background(), "r/from-mqtt", []byte("m-retained"), client.PublishOptions{QoS: 1, Retain: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := h3Pub.Publish(context.Background(), "r/from-h3", []byte("h-retained"), client.PublishOptions{QoS: 1, Retain: true}); err != nil {
		t.Fatal(err)
	}
	for _, sub := range []struct{ name, url string }{{"h3", b.h3URL()}, {"mqtt", quicURL(b.mqtt)}} {
		t.Run(sub.name, func(t *testing.T) {
			c := newClient(t, b.pki, sub.url, nil)
			ch := subscribe(t, c, "r/#")
			got := map[string]string{}
			for len(got) < 2 {
				m := recv(t, ch, "retained")
				if !m.Retained {
					t.Fatalf("%q on %q not marked retained", m.Payload, m.Topic)
				}
				got[m.Topic] = string(m.Payload)
			}
			if got["r/from-mqtt"] != "m-retained" || got["r/from-h3"] != "h-retained" {
				t.Fatalf("retained: %v", got)
			}
			noMore(t, ch, "retained replay")
		})
	}
	// Clearing over HTTP/3 clears for MQTT too.
	if _, err := h3Pub.Publish(context.Background(), "r/from-mqtt", nil, client.PublishOptions{QoS: 1, Retain: true}); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, b.pki, quicURL(b.mqtt), nil)
	ch := subscribe(t, c, "r/#")
	m := recv(t, ch, "retained after clear")
	if m.Topic != "r/from-h3" {
		t.Fatalf("cleared retained message still delivered: %q on %q", m.Payload, m.Topic)
	}
	noMore(t, ch, "retained after clear")
}

const aclFile = `
[anonymous]
publish   = ["public/#"]
subscribe = ["public/#"]

[[user]]
name      = "alice"
token     = "tok-alice"
password  = "pw-alice"
publish   = ["a/#", "public/#"]
subscribe = ["a/#", "public/#"]
`

func TestAuthAndACL(t *testing.T) {
	a, err := auth.Parse([]byte(aclFile))
	if err != nil {
		t.Fatal(err)
	}
	b := startBridged(t, a)
	alice := b.pki.Client(t, "alice")
	tests := []struct {
		name      string
		mod       func(*client.Options)
		connectOK bool
		canA      bool
	}{
		{"token as password", func(o *client.Options) { o.Token = "tok-alice" }, true, true},
		{"user name and password", func(o *client.Options) { o.Username = "alice"; o.Token = "pw-alice" }, true, true},
		{"client certificate", func(o *client.Options) { o.Certificate = &alice }, true, true},
		{"anonymous", nil, true, false},
		{"bad password", func(o *client.Options) { o.Username = "alice"; o.Token = "wrong" }, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newClient(t, b.pki, quicURL(b.mqtt), tt.mod)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err := c.Publish(ctx, "public/x", []byte("hi"), client.PublishOptions{QoS: 1})
			if !tt.connectOK {
				if !errors.Is(err, client.ErrMQTTRefused) {
					t.Fatalf("publish with bad credentials: %v, want ErrMQTTRefused", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			_, err = c.Publish(ctx, "a/x", []byte("hi"), client.PublishOptions{QoS: 1})
			if tt.canA && err != nil {
				t.Fatalf("allowed publish: %v", err)
			}
			if !tt.canA && !errors.Is(err, client.ErrMQTTRefused) {
				t.Fatalf("denied publish: %v, want ErrMQTTRefused", err)
			}
			sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer scancel()
			if !tt.canA {
				err = c.Subscribe(sctx, "a/#", 0, func(client.Message) {})
				if !errors.Is(err, client.ErrMQTTRefused) {
					t.Fatalf("denied subscribe: %v, want ErrMQTTRefused", err)
				}
			}
		})
	}
	// Denied messages reach nobody: an HTTP/3 subscriber of alice sees only
	// what alice may publish.
	h3Sub := newClient(t, b.pki, b.h3URL(), func(o *client.Options) { o.Token = "tok-alice" })
	ch := subscribe(t, h3Sub, "a/#")
	pub := newClient(t, b.pki, quicURL(b.mqtt), func(o *client.Options) { o.Token = "tok-alice" })
	waitSubscribed(t, pub, ch, "a/probe")
	anon := newClient(t, b.pki, quicURL(b.mqtt), nil)
	_, _ = anon.Publish(context.Background(), "a/sneaky", []byte("no"), client.PublishOptions{QoS: 0})
	if _, err := pub.Publish(context.Background(), "a/ok", []byte("yes"), client.PublishOptions{QoS: 1}); err != nil {
		t.Fatal(err)
	}
	if m := recv(t, ch, "allowed message"); string(m.Payload) != "yes" {
		t.Fatalf("got %q on %q", m.Payload, m.Topic)
	}
}
