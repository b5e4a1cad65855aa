package mqttquic

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"

	"github.com/quiot/quiot/device/client"
	"github.com/quiot/quiot/internal/quictune"
)

// TestQoS1ThroughLoss sends QoS 1 messages over MQTT over QUIC while a
// seeded proxy drops 10 % of the datagrams in both directions, on both the
// publisher's and the subscriber's path: every message arrives.
func TestQoS1ThroughLoss(t *testing.T) {
	p := newPKI(t)
	s := startServer(t, p, nil)
	proxy := newUDPProxy(t, s.QUICAddr(), 0.10, 42)
	url := fmt.Sprintf("mqtt-quic://localhost:%d", proxy.addr().Port)
	opts := func(o *client.Options) { o.Reconnect = true; o.MaxBackoff = 500 * time.Millisecond }
	sub := newClient(t, p, url, opts)
	pub := newClient(t, p, url, opts)
	ch := subscribe(t, sub, "lossy/#")
	waitSubscribed(t, pub, ch, "lossy/probe")

	const n = 50
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i := 0; i < n; i++ {
		if _, err := pub.Publish(ctx, "lossy/data", []byte(fmt.Sprint(i)), client.PublishOptions{QoS: 1}); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	seen := map[string]bool{}
	for len(seen) < n {
		select {
		case m := <-ch:
			if m.Topic == "lossy/data" {
				seen[string(m.Payload)] = true
			}
		case <-ctx.Done():
			t.Fatalf("delivered %d of %d through 10%% loss", len(seen), n)
		}
	}
	if proxy.dropped.Load() == 0 {
		t.Fatal("the proxy dropped nothing")
	}
	t.Logf("proxy passed %d and dropped %d datagrams", proxy.passed.Load(), proxy.dropped.Load())
}

// TestSessionResumption cuts a subscriber off (its broker-side connection
// is closed while its path is black-holed), publishes QoS 1 messages while
// it is away, and checks that they arrive after it reconnects with its
// session (clean start off, session expiry).
func TestSessionResumption(t *testing.T) {
	p := newPKI(t)
	s := startServer(t, p, nil)
	proxy := newUDPProxy(t, s.QUICAddr(), 0, 1)
	fast := &quictune.Profile{Name: "test", MaxIdleTimeout: quictune.Duration(2 * time.Second), KeepAlivePeriod: quictune.Duration(time.Second)}
	sub := newClient(t, p, fmt.Sprintf("mqtt-quic://localhost:%d", proxy.addr().Port), func(o *client.Options) {
		o.ClientID = "resume-sub"
		o.Reconnect = true
		o.MaxBackoff = 300 * time.Millisecond
		o.Tuning = fast
	})
	pub := newClient(t, p, quicURL(s), nil)
	ch := subscribe(t, sub, "resume/#")
	waitSubscribed(t, pub, ch, "resume/probe")

	proxy.setBlocked(true)
	cl, ok := s.MQTT().Clients.Get("resume-sub")
	if !ok {
		t.Fatal("subscriber session not found")
	}
	cl.Stop(fmt.Errorf("test: cut off"))
	// Wait until mochi has let go of the connection (the session stays).
	waitFor(t, func() bool { return cl.Closed() && atomic.LoadInt64(&s.MQTT().Info.ClientsConnected) == 1 }, "session offline")
	const n = 5
	for i := 0; i < n; i++ {
		if _, err := pub.Publish(context.Background(), "resume/x", []byte(fmt.Sprint(i)), client.PublishOptions{QoS: 1}); err != nil {
			t.Fatal(err)
		}
	}
	proxy.setBlocked(false)
	got := map[string]bool{}
	for len(got) < n {
		m := recv(t, ch, fmt.Sprintf("messages queued while offline (have %v)", got))
		got[string(m.Payload)] = true
	}
	// The messages can come before the client counts the connection
	// (paho reads the session's queued PUBLISHes before it calls
	// OnConnectionUp): wait for the count.
	waitFor(t, func() bool { return sub.Stats().Reconnects >= 1 }, "the subscriber's reconnect counted")
	var _ *mqtt.Client = cl
}

func waitFor(t testing.TB, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timeout waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond) // polling a condition, not synchronising on time
	}
}

// TestPublisherResendsAfterReconnect: a QoS 1 publish whose connection is
// cut before the PUBACK completes after the publisher reconnects (the
// client's session re-sends it), and the subscriber gets it.
func TestPublisherResendsAfterReconnect(t *testing.T) {
	p := newPKI(t)
	s := startServer(t, p, nil)
	proxy := newUDPProxy(t, s.QUICAddr(), 0, 1)
	fast := &quictune.Profile{Name: "test", MaxIdleTimeout: quictune.Duration(2 * time.Second), KeepAlivePeriod: quictune.Duration(time.Second)}
	pub := newClient(t, p, fmt.Sprintf("mqtt-quic://localhost:%d", proxy.addr().Port), func(o *client.Options) {
		o.ClientID = "resend-pub"
		o.Reconnect = true
		o.MaxBackoff = 300 * time.Millisecond
		o.Tuning = fast
	})
	sub := newClient(t, p, quicURL(s), nil)
	ch := subscribe(t, sub, "resend/#")
	waitSubscribed(t, pub, ch, "resend/probe")

	proxy.setBlocked(true)
	done := make(chan error, 1)
	go func() {
		_, err := pub.Publish(context.Background(), "resend/x", []byte("survivor"), client.PublishOptions{QoS: 1})
		done <- err
	}()
	cl, ok := s.MQTT().Clients.Get("resend-pub")
	if !ok {
		t.Fatal("publisher session not found")
	}
	cl.Stop(fmt.Errorf("test: cut off"))
	waitFor(t, func() bool { return cl.Closed() }, "publisher offline")
	proxy.setBlocked(false)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("publish across the reconnect: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("publish did not complete after the reconnect")
	}
	if m := recv(t, ch, "re-sent message"); string(m.Payload) != "survivor" {
		t.Fatalf("got %q", m.Payload)
	}
	waitFor(t, func() bool { return pub.Stats().Reconnects >= 1 }, "the publisher's reconnect counted")
}
