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

// subscribeQ connects an MQTT over QUIC client with client id id to addr
// and subscribes it to q/#; its messages arrive on the channel. Close the
// client and cancel the context to end it (t's cleanup does both).
func subscribeQ(t *testing.T, pki *testutil.PKI, addr, id string, reconnect bool) (client.Client, chan client.Message, context.CancelFunc) {
	t.Helper()
	o := client.Options{Broker: "mqtt-quic://" + addr, RootCAs: pki.Pool(), ClientID: id, Logger: testutil.DiscardLogger()}
	if reconnect {
		o.Reconnect, o.MaxBackoff = true, 200*time.Millisecond
	}
	c, err := client.New(o)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan client.Message, 100)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); _ = c.Close() })
	go func() { _ = c.Subscribe(ctx, "q/#", 0, func(m client.Message) { got <- m }) }()
	return c, got, cancel
}

// goOffline closes a subscriber of subscribeQ and waits until its session
// on m is offline.
func goOffline(t *testing.T, m *mqttquic.Server, id string, c client.Client, cancel context.CancelFunc) {
	t.Helper()
	_ = c.Close()
	cancel()
	waitFor(t, "the session to be offline", func() bool {
		cl, ok := m.MQTT().Clients.Get(id)
		return ok && cl.Closed()
	})
}

// queued counts the q/x messages queued (in flight) for id's session on
// m; ok is false while m has no such session.
func queued(m *mqttquic.Server, id string) (n int, ok bool) {
	cl, ok := m.MQTT().Clients.Get(id)
	if !ok {
		return 0, false
	}
	for _, pk := range cl.State.Inflight.GetAll(false) {
		if pk.TopicName == "q/x" {
			n++
		}
	}
	return n, true
}

// publishQ publishes QoS 1 messages m<from>..m<to-1> on q/x.
func publishQ(t *testing.T, b *broker.Broker, from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		mustPublish(t, b, broker.Message{Topic: "q/x", Payload: fmt.Appendf(nil, "m%d", i), QoS: 1})
	}
}

// expectQ reads q/x messages from got until n have come and checks they
// are m0..m<n-1> in order; it fails after 30 s without a message.
func expectQ(t *testing.T, got <-chan client.Message, n int) {
	t.Helper()
	var payloads []string
	for len(payloads) < n {
		select {
		case m := <-got:
			if m.Topic == "q/x" {
				payloads = append(payloads, string(m.Payload))
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("got %q within 30 s, want m0..m%d", payloads, n-1)
		}
	}
	for i, p := range payloads {
		if p != fmt.Sprintf("m%d", i) {
			t.Fatalf("payloads %q, want m0..m%d in order", payloads, n-1)
		}
	}
}

// stop closes m, then shuts b down.
func stop(t *testing.T, m *mqttquic.Server, b *broker.Broker) {
	t.Helper()
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
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
	sub, got, cancel := subscribeQ(t, pki, m.QUICAddr().String(), id, true)
	awaitProbe(t, b.Broker, got)
	goOffline(t, m, id, sub, cancel)
	publishQ(t, b.Broker, 0, 5)
	waitFor(t, "5 messages queued for the offline session", func() bool {
		n, _ := queued(m, id)
		return n == 5
	})
	stop(t, m, b.Broker)

	b2 := startOn(t, pki, dir, "127.0.0.1:0")
	m2 := startMQTT(t, pki, b2.Broker, dir)
	// Published after the restart, before the client is back: queued for
	// the restored session too.
	publishQ(t, b2.Broker, 5, 7)
	// Queued before the client is back (mochi writes a message published
	// while a session reconnects at once, ahead of the queue it resends).
	waitFor(t, "7 messages queued for the restored session", func() bool {
		n, _ := queued(m2, id)
		return n >= 7
	})
	_, got2, _ := subscribeQ(t, pki, m2.QUICAddr().String(), id, true)
	expectQ(t, got2, 7)
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
	_, got, _ := subscribeQ(t, pki, m.QUICAddr().String(), id, false)
	awaitProbe(t, b.Broker, got)
	waitFor(t, "the session on disk", func() bool {
		_, err := os.Stat(filepath.Join(dir, store.SessionsFileName))
		return err == nil && countSessionKeys(t, dir, "s/") == 1
	})
	crashed := copyDir(t, dir)
	b2 := startOn(t, pki, crashed, "127.0.0.1:0")
	m2 := startMQTT(t, pki, b2.Broker, crashed)
	publishQ(t, b2.Broker, 0, 3)
	_, got2, _ := subscribeQ(t, pki, m2.QUICAddr().String(), id, false)
	expectQ(t, got2, 3)
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
	c, got, cancel := subscribeQ(t, pki, m.QUICAddr().String(), id, false)
	awaitProbe(t, b.Broker, got)
	goOffline(t, m, id, c, cancel)
	publishQ(t, b.Broker, 0, 3)
	waitFor(t, "3 messages queued for the offline session", func() bool {
		n, _ := queued(m, id)
		return n == 3
	})

	h := &breakConnack{id: id, fired: make(chan struct{})}
	if err := m.MQTT().AddHook(h, nil); err != nil {
		t.Fatal(err)
	}
	c, _, cancel = subscribeQ(t, pki, m.QUICAddr().String(), id, false)
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
	stop(t, m, b.Broker)

	b2 := startOn(t, pki, dir, "127.0.0.1:0")
	m2 := startMQTT(t, pki, b2.Broker, dir)
	_, got2, _ := subscribeQ(t, pki, m2.QUICAddr().String(), id, false)
	expectQ(t, got2, 3)
}
