package store_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
	bolt "go.etcd.io/bbolt"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/mqttquic"
	"github.com/quiot/quiot/broker/store"
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

// awaitProbe publishes q/probe on b until one arrives on got: the
// subscription behind got is live then. Probes still in flight may follow.
func awaitProbe(t *testing.T, b *broker.Broker, got <-chan client.Message) {
	t.Helper()
	waitFor(t, "the subscription", func() bool {
		mustPublish(t, b, broker.Message{Topic: "q/probe", Payload: []byte("p"), QoS: 1})
		select {
		case m := <-got:
			if m.Topic != "q/probe" {
				t.Fatalf("got %q before the subscription was live", m.Topic)
			}
			return true
		case <-time.After(20 * time.Millisecond): // publish again until the subscription is live
			return false
		}
	})
}

// TestMQTTSessionSurvivesRestart: a persistent MQTT session's subscription
// and the QoS 1 messages queued for it while it was away survive a broker
// restart and are delivered when the client comes back, with those
// published after the restart.
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
	awaitProbe(t, b.Broker, got)
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
	// Published after the restart, before the client is back: queued for
	// the restored session too.
	for i := 5; i < 7; i++ {
		mustPublish(t, b2.Broker, broker.Message{Topic: "q/x", Payload: fmt.Appendf(nil, "m%d", i), QoS: 1})
	}
	// Queued before the client is back (mochi writes a message published
	// while a session reconnects at once, ahead of the queue it resends).
	waitFor(t, "7 messages queued for the restored session", func() bool {
		cl, ok := m2.MQTT().Clients.Get(id)
		if !ok {
			return false
		}
		n := 0
		for _, pk := range cl.State.Inflight.GetAll(false) {
			if pk.TopicName == "q/x" {
				n++
			}
		}
		return n >= 7
	})
	sub2, got2, cancel2 := newSub(m2.QUICAddr().String())
	defer cancel2()
	defer sub2.Close()
	var payloads []string
	for len(payloads) < 7 {
		m := next(got2)
		if m.Topic == "q/x" {
			payloads = append(payloads, string(m.Payload))
		}
	}
	for i, p := range payloads {
		if p != fmt.Sprintf("m%d", i) {
			t.Fatalf("payloads %q, want m0..m6 in order", payloads)
		}
	}
}

// copyDir copies the regular files of src into a new directory (a crash
// image: what the files held at that moment).
func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// TestMQTTSessionAfterCrash: a connected persistent session is restored
// from the state files as a crash left them, and gets what is published
// after the restart once it is back.
func TestMQTTSessionAfterCrash(t *testing.T) {
	pki := testutil.NewPKI(t)
	dir := t.TempDir()
	b := startOn(t, pki, dir, "127.0.0.1:0")
	m := startMQTT(t, pki, b.Broker, dir)
	const id = "crash-sub"
	c, err := client.New(client.Options{Broker: "mqtt-quic://" + m.QUICAddr().String(), RootCAs: pki.Pool(), ClientID: id, Logger: testutil.DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	got := make(chan client.Message, 100)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() { _ = c.Subscribe(ctx, "q/#", 0, func(m client.Message) { got <- m }) }()
	awaitProbe(t, b.Broker, got)
	waitFor(t, "the session on disk", func() bool {
		_, err := os.Stat(filepath.Join(dir, store.SessionsFileName))
		return err == nil && countSessionKeys(t, dir, "s/") == 1
	})
	crashed := copyDir(t, dir)
	b2 := startOn(t, pki, crashed, "127.0.0.1:0")
	m2 := startMQTT(t, pki, b2.Broker, crashed)
	for i := range 3 {
		mustPublish(t, b2.Broker, broker.Message{Topic: "q/x", Payload: fmt.Appendf(nil, "m%d", i), QoS: 1})
	}
	c2, err := client.New(client.Options{Broker: "mqtt-quic://" + m2.QUICAddr().String(), RootCAs: pki.Pool(), ClientID: id, Logger: testutil.DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c2.Close() })
	got2 := make(chan client.Message, 100)
	go func() { _ = c2.Subscribe(ctx, "q/#", 0, func(m client.Message) { got2 <- m }) }()
	var payloads []string
	for len(payloads) < 3 {
		select {
		case m := <-got2:
			if m.Topic == "q/x" {
				payloads = append(payloads, string(m.Payload))
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("got %q within 30 s, want m0..m2", payloads)
		}
	}
}

// countSessionKeys counts the keys with prefix in the session file (opened
// read-only while the broker holds it: bbolt allows one writer, and a
// read-only open waits for its lock, so copy the file first).
func countSessionKeys(t *testing.T, dir, prefix string) int {
	t.Helper()
	tmp := copyDir(t, dir)
	db, err := bolt.Open(filepath.Join(tmp, store.SessionsFileName), 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		return 0
	}
	defer db.Close()
	n := 0
	_ = db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("sessions"))
		if b == nil {
			return nil
		}
		c := b.Cursor()
		for k, _ := c.Seek([]byte(prefix)); k != nil && strings.HasPrefix(string(k), prefix); k, _ = c.Next() {
			n++
		}
		return nil
	})
	return n
}

// breakConnack makes the CONNACK of one connection of client id
// unwritable (mochi's write fails on the packet type), as a connection
// that breaks right after mochi handed it its session.
type breakConnack struct {
	mqtt.HookBase
	id    string
	done  atomic.Bool
	fired chan struct{}
}

func (h *breakConnack) ID() string           { return "test-break-connack" }
func (h *breakConnack) Provides(b byte) bool { return b == mqtt.OnPacketEncode }
func (h *breakConnack) OnPacketEncode(cl *mqtt.Client, pk packets.Packet) packets.Packet {
	if pk.FixedHeader.Type == packets.Connack && cl.ID == h.id && h.done.CompareAndSwap(false, true) {
		pk.FixedHeader.Type = packets.Reserved
		close(h.fired)
	}
	return pk
}

// TestQueueKeptWhenTakeoverBreaks: the queue of a persistent session stays
// on disk when a reconnecting client takes the session over and its
// connection breaks before mochi resends the queue. mochi clears the old
// client's queue after copying it to the new client; the store used to
// delete the records then (same client id and packet identifiers as the
// new client's copy), so after a restart the queued messages were gone.
func TestQueueKeptWhenTakeoverBreaks(t *testing.T) {
	pki := testutil.NewPKI(t)
	dir := t.TempDir()
	b := startOn(t, pki, dir, "127.0.0.1:0")
	m := startMQTT(t, pki, b.Broker, dir)
	const id = "takeover-breaks"
	subscribe := func(addr string) (client.Client, chan client.Message, context.CancelFunc) {
		c, err := client.New(client.Options{Broker: "mqtt-quic://" + addr, RootCAs: pki.Pool(), ClientID: id, Logger: testutil.DiscardLogger()})
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan client.Message, 100)
		ctx, cancel := context.WithCancel(context.Background())
		go func() { _ = c.Subscribe(ctx, "q/#", 0, func(m client.Message) { got <- m }) }()
		return c, got, cancel
	}
	c, got, cancel := subscribe(m.QUICAddr().String())
	awaitProbe(t, b.Broker, got)
	_ = c.Close()
	cancel()
	waitFor(t, "the session to be offline", func() bool {
		cl, ok := m.MQTT().Clients.Get(id)
		return ok && cl.Closed()
	})
	for i := range 3 {
		mustPublish(t, b.Broker, broker.Message{Topic: "q/x", Payload: fmt.Appendf(nil, "m%d", i), QoS: 1})
	}
	waitFor(t, "3 messages queued for the offline session", func() bool {
		cl, _ := m.MQTT().Clients.Get(id)
		n := 0
		for _, pk := range cl.State.Inflight.GetAll(false) {
			if pk.TopicName == "q/x" {
				n++
			}
		}
		return n == 3
	})

	h := &breakConnack{id: id, fired: make(chan struct{})}
	if err := m.MQTT().AddHook(h, nil); err != nil {
		t.Fatal(err)
	}
	c, _, cancel = subscribe(m.QUICAddr().String())
	select {
	case <-h.fired:
	case <-time.After(30 * time.Second):
		t.Fatal("no reconnect within 30 s")
	}
	waitFor(t, "the new client's connection to end", func() bool {
		cl, ok := m.MQTT().Clients.Get(id)
		return ok && cl.Closed() && !cl.IsTakenOver()
	})
	_ = c.Close()
	cancel()
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
	c2, got2, cancel2 := subscribe(m2.QUICAddr().String())
	defer cancel2()
	defer c2.Close()
	var payloads []string
	for len(payloads) < 3 {
		select {
		case m := <-got2:
			if m.Topic == "q/x" {
				payloads = append(payloads, string(m.Payload))
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("got %q within 30 s after the restart, want m0..m2", payloads)
		}
	}
	for i, p := range payloads {
		if p != fmt.Sprintf("m%d", i) {
			t.Fatalf("payloads %q, want m0..m2 in order", payloads)
		}
	}
}
