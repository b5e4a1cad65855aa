package store_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"testing"
	"time"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/mqttquic"
	"github.com/quiot/quiot/device/client"
	"github.com/quiot/quiot/internal/testutil"
)

// startMQTT starts MQTT over QUIC on 127.0.0.1:0, joined to b, keeping
// sessions in dir.
func startMQTT(t *testing.T, pki *testutil.PKI, b *broker.Broker, dir string) *mqttquic.Server {
	t.Helper()
	s, err := mqttquic.New(mqttquic.Options{
		QUICAddr: "127.0.0.1:0",
		TLS:      &tls.Config{Certificates: []tls.Certificate{pki.Server.TLS}},
		Broker:   b,
		DataDir:  dir,
		Logger:   testutil.DiscardLogger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// waitFor polls cond (an event: a state the server reaches) for up to 30 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond) // polling interval, not synchronisation
	}
}

// TestMQTTSessionSurvivesRestart: a persistent MQTT session's subscription
// and the QoS 1 messages queued for it while it was away survive a broker
// restart and are delivered when the client comes back.
func TestMQTTSessionSurvivesRestart(t *testing.T) {
	pki := testutil.NewPKI(t)
	dir := t.TempDir()
	b := startOn(t, pki, dir, "127.0.0.1:0")
	m := startMQTT(t, pki, b.Broker, dir)

	const id = "persistent-sub"
	newSub := func(addr string) (client.Client, chan client.Message, context.CancelFunc) {
		c, err := client.New(client.Options{Broker: "mqtt-quic://" + addr, RootCAs: pki.Pool(), ClientID: id, Reconnect: true, MaxBackoff: 200 * time.Millisecond, Logger: testutil.DiscardLogger()})
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan client.Message, 100)
		ctx, cancel := context.WithCancel(context.Background())
		go func() { _ = c.Subscribe(ctx, "q/#", 0, func(m client.Message) { got <- m }) }()
		return c, got, cancel
	}
	next := func(got chan client.Message) client.Message {
		t.Helper()
		select {
		case m := <-got:
			return m
		case <-time.After(30 * time.Second):
			t.Fatal("no message within 30 s")
		}
		return client.Message{}
	}

	sub, got, cancel := newSub(m.QUICAddr().String())
	// Subscribed once a probe arrives.
	probe := make(chan struct{})
	go func() {
		for {
			mustPublish(t, b.Broker, broker.Message{Topic: "q/probe", Payload: []byte("p"), QoS: 1})
			select {
			case <-probe:
				return
			case <-time.After(20 * time.Millisecond): // re-publish until the subscription is live
			}
		}
	}()
	if m := next(got); m.Topic != "q/probe" {
		t.Fatalf("first message %+v", m)
	}
	close(probe)
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	cancel()
	waitFor(t, "the session to be offline", func() bool {
		cl, ok := m.MQTT().Clients.Get(id)
		return ok && cl.Closed()
	})
	for i := range 5 {
		mustPublish(t, b.Broker, broker.Message{Topic: "q/x", Payload: fmt.Appendf(nil, "m%d", i), QoS: 1})
	}
	waitFor(t, "5 messages queued for the offline session", func() bool {
		cl, _ := m.MQTT().Clients.Get(id)
		n := 0
		for _, pk := range cl.State.Inflight.GetAll(false) {
			if pk.TopicName == "q/x" {
				n++
			}
		}
		return n == 5
	})
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	ctx, cancelS := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancelS()
	if err := b.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}

	b2 := startOn(t, pki, dir, "127.0.0.1:0")
	m2 := startMQTT(t, pki, b2.Broker, dir)
	sub2, got2, cancel2 := newSub(m2.QUICAddr().String())
	defer cancel2()
	defer sub2.Close()
	var payloads []string
	for len(payloads) < 5 {
		m := next(got2)
		if m.Topic == "q/x" {
			payloads = append(payloads, string(m.Payload))
		}
	}
	for i, p := range payloads {
		if p != fmt.Sprintf("m%d", i) {
			t.Fatalf("payloads %q, want m0..m4 in order", payloads)
		}
	}
}
