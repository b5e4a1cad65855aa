package mqttquic

import (
	"bufio"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/quiot/quiot/broker"
)

// Each limit of Limits, exceeded by real clients (issue 9 finding 8, MQTT
// side): the clear refusal, the counter, and what the broker then holds.

func TestLimitDefaults(t *testing.T) {
	var l Limits
	l.ensureDefaults()
	want := Limits{
		MaxClients: 1024, MaxSessions: 2048, MaxSessionsPerIdentity: 256,
		AnonymousSessionExpiry: 5 * time.Minute, MaxQueuedMessages: 1024,
		MaxQueuedBytes: 4 << 20, MaxQueuedBytesTotal: 64 << 20, MaxReceiveInflight: 1024,
		BridgeQueueBytes: 16 << 20, BridgeQueueMessages: 1 << 16,
		ConnectTimeout: 10 * time.Second, MaxPreConnectPerAddr: 64,
	}
	if l != want {
		t.Fatalf("defaults %+v, want %+v", l, want)
	}
}

func TestLimitClients(t *testing.T) {
	b, _ := startSecure(t, aclFile, func(o *Options) { o.Limits.MaxClients = 2 })
	mustConnect(t, b.mqtt, b.pki, "tcp", connectOpts{id: "c1", clean: true})
	mustConnect(t, b.mqtt, b.pki, "quic", connectOpts{id: "c2", user: "alice", pass: "tok-alice", clean: true})
	for _, tt := range []struct {
		tr string
		v  byte
	}{{"tcp", 5}, {"quic", 4}} {
		if _, code := connectRaw(t, b.mqtt, b.pki, tt.tr, connectOpts{version: tt.v, id: "c3", clean: true}); code != quotaExceeded(tt.v) {
			t.Errorf("%s v%d: third client: 0x%02x, want 0x%02x", tt.tr, tt.v, code, quotaExceeded(tt.v))
		}
	}
	if st := b.mqtt.Security(); st.RefusedClients != 2 || st.Clients != 2 {
		t.Errorf("RefusedClients = %d, Clients = %d, want 2, 2", st.RefusedClients, st.Clients)
	}
}

func TestLimitSessions(t *testing.T) {
	b, _ := startSecure(t, aclFile, func(o *Options) {
		o.Limits.MaxSessionsPerIdentity = 2
		o.Limits.MaxSessions = 3
	})
	s1 := mustConnect(t, b.mqtt, b.pki, "tcp", connectOpts{id: "anon-1", expiry: 600})
	s1.disconnect() // offline, still held
	waitForCond(t, func() bool { return sessionOffline(b.mqtt, "anon-1") }, "anon-1 offline")
	mustConnect(t, b.mqtt, b.pki, "tcp", connectOpts{version: 4, id: "anon-2"})
	for _, v := range []byte{4, 5} {
		if _, code := connectRaw(t, b.mqtt, b.pki, "quic", connectOpts{version: v, id: fmt.Sprint("anon-3-", v), expiry: 600}); code != quotaExceeded(v) {
			t.Errorf("v%d: third anonymous session: 0x%02x, want 0x%02x", v, code, quotaExceeded(v))
		}
	}
	// Its own session is no new one.
	mustConnect(t, b.mqtt, b.pki, "tcp", connectOpts{id: "anon-1", expiry: 600})
	// Another identity: within its quota, up to the total.
	mustConnect(t, b.mqtt, b.pki, "tcp", connectOpts{id: "alice-1", user: "alice", pass: "tok-alice", clean: true})
	if _, code := connectRaw(t, b.mqtt, b.pki, "tcp", connectOpts{id: "alice-2", user: "alice", pass: "tok-alice", clean: true}); code != packets.ErrQuotaExceeded.Code {
		t.Errorf("session over the total: 0x%02x, want 0x97", code)
	}
	if st := b.mqtt.Security(); st.RefusedSessions != 3 || st.Sessions != 3 {
		t.Errorf("RefusedSessions = %d, Sessions = %d, want 3, 3", st.RefusedSessions, st.Sessions)
	}
}

// TestAnonymousSessionsPerAddress: anonymous clients are bounded per
// source address, not as one identity: with 2 sessions per identity, a
// third anonymous client from 127.0.0.1 is refused and one from
// 127.0.0.2 is not (before, every anonymous client of the broker shared
// one quota, so a broker without an ACL took 256 MQTT clients in all).
func TestAnonymousSessionsPerAddress(t *testing.T) {
	b, _ := startSecure(t, aclFile, func(o *Options) { o.Limits.MaxSessionsPerIdentity = 2 })
	for _, id := range []string{"a1", "a2"} {
		mustConnect(t, b.mqtt, b.pki, "tcp", connectOpts{id: id, clean: true, local: "127.0.0.1"})
	}
	if _, code := connectRaw(t, b.mqtt, b.pki, "tcp", connectOpts{id: "a3", clean: true, local: "127.0.0.1"}); code != packets.ErrQuotaExceeded.Code {
		t.Errorf("third anonymous session from 127.0.0.1: 0x%02x, want 0x97", code)
	}
	for _, id := range []string{"b1", "b2"} {
		if _, code := connectRaw(t, b.mqtt, b.pki, "tcp", connectOpts{id: id, clean: true, local: "127.0.0.2"}); code != 0 {
			t.Errorf("anonymous session %s from 127.0.0.2: 0x%02x, want 0", id, code)
		}
	}
	// Named identities keep their own quota, wherever they connect from.
	mustConnect(t, b.mqtt, b.pki, "tcp", connectOpts{id: "alice-1", user: "alice", pass: "tok-alice", clean: true, local: "127.0.0.1"})
	mustConnect(t, b.mqtt, b.pki, "tcp", connectOpts{id: "alice-2", user: "alice", pass: "tok-alice", clean: true, local: "127.0.0.2"})
	if _, code := connectRaw(t, b.mqtt, b.pki, "tcp", connectOpts{id: "alice-3", user: "alice", pass: "tok-alice", clean: true, local: "127.0.0.3"}); code != packets.ErrQuotaExceeded.Code {
		t.Errorf("third session of alice: 0x%02x, want 0x97", code)
	}
	if st := b.mqtt.Security(); st.RefusedSessions != 2 || st.Sessions != 6 {
		t.Errorf("RefusedSessions = %d, Sessions = %d, want 2, 6", st.RefusedSessions, st.Sessions)
	}
}

func TestAnonymousSessionExpiry(t *testing.T) {
	b, _ := startSecure(t, aclFile, func(o *Options) { o.Limits.AnonymousSessionExpiry = time.Minute })
	for _, o := range []connectOpts{
		{id: "anon-5", expiry: 3600},
		{version: 4, id: "anon-4"},
		{id: "alice-5", user: "alice", pass: "tok-alice", expiry: 3600},
	} {
		c := mustConnect(t, b.mqtt, b.pki, "tcp", o)
		c.subscribe("public/#")
		c.disconnect()
		waitForCond(t, func() bool { return sessionOffline(b.mqtt, o.id) }, o.id+" offline")
	}
	subs := atomic.LoadInt64(&b.mqtt.MQTT().Info.Subscriptions)
	h := b.mqtt.hook()
	h.sweep(time.Now()) // not yet due
	if st := b.mqtt.Security(); st.ExpiredSessions != 0 || st.Sessions != 3 {
		t.Fatalf("before expiry: ExpiredSessions = %d, Sessions = %d", st.ExpiredSessions, st.Sessions)
	}
	h.sweep(time.Now().Add(2 * time.Minute))
	for id, want := range map[string]bool{"anon-5": false, "anon-4": false, "alice-5": true} {
		if _, ok := b.mqtt.MQTT().Clients.Get(id); ok != want {
			t.Errorf("session %s held: %v, want %v", id, ok, want)
		}
	}
	if st := b.mqtt.Security(); st.ExpiredSessions != 2 || st.Sessions != 1 {
		t.Errorf("ExpiredSessions = %d, Sessions = %d, want 2, 1", st.ExpiredSessions, st.Sessions)
	}
	if n := atomic.LoadInt64(&b.mqtt.MQTT().Info.Subscriptions); n != subs-2 {
		t.Errorf("subscriptions %d, want %d (the expired sessions' released)", n, subs-2)
	}
}

// offlineSubscriber leaves a persistent session of alice subscribed to
// a/# and returns its client id.
func offlineSubscriber(t *testing.T, b *bridged, id string) {
	t.Helper()
	c := mustConnect(t, b.mqtt, b.pki, "tcp", connectOpts{id: id, user: "alice", pass: "tok-alice", expiry: 600})
	c.subscribe("a/#")
	c.disconnect()
	waitForCond(t, func() bool { return sessionOffline(b.mqtt, id) }, id+" offline")
}

func publishN(t *testing.T, b *bridged, n, size int) {
	t.Helper()
	pub := mustConnect(t, b.mqtt, b.pki, "tcp", connectOpts{id: "pub-" + t.Name(), user: "alice", pass: "tok-alice", clean: true})
	for i := 0; i < n; i++ {
		if code, err := pub.publish("a/x", strings.Repeat("x", size), 1, false); err != nil || code != 0 {
			t.Fatalf("publish %d: 0x%02x %v", i, code, err)
		}
	}
}

func TestLimitQueuedMessages(t *testing.T) {
	b, _ := startSecure(t, aclFile, func(o *Options) { o.Limits.MaxQueuedMessages = 3 })
	offlineSubscriber(t, b, "q-msgs")
	publishN(t, b, 5, 10)
	// mochi acknowledges a publish before it delivers it: wait for the
	// last delivery attempt.
	waitForCond(t, func() bool { return b.mqtt.Security().DroppedInflight >= 2 }, "two messages dropped")
	if n := queued(b.mqtt, "q-msgs"); n != 3 {
		t.Fatalf("queued %d messages, want 3", n)
	}
	if n := b.mqtt.Security().DroppedInflight; n != 2 {
		t.Errorf("DroppedInflight = %d, want 2", n)
	}
	c := mustConnect(t, b.mqtt, b.pki, "tcp", connectOpts{id: "q-msgs", user: "alice", pass: "tok-alice", expiry: 600})
	for i := 0; i < 3; i++ {
		c.next()
	}
}

func TestLimitQueuedBytes(t *testing.T) {
	const size = 400 // + 3 bytes of topic
	t.Run("session", func(t *testing.T) {
		b, _ := startSecure(t, aclFile, func(o *Options) { o.Limits.MaxQueuedBytes = 1000 })
		offlineSubscriber(t, b, "q-bytes")
		publishN(t, b, 5, size)
		waitForCond(t, func() bool { return b.mqtt.Security().DroppedQueueFull >= 2 }, "two messages dropped")
		// 0, 403 and 806 bytes held are below the limit: three queued.
		if n := queued(b.mqtt, "q-bytes"); n != 3 {
			t.Fatalf("queued %d messages, want 3", n)
		}
		if st := b.mqtt.Security(); st.DroppedQueueFull != 2 || st.QueuedBytes != 3*(size+3) {
			t.Errorf("DroppedQueueFull = %d, QueuedBytes = %d, want 2, %d", st.DroppedQueueFull, st.QueuedBytes, 3*(size+3))
		}
		c := mustConnect(t, b.mqtt, b.pki, "tcp", connectOpts{id: "q-bytes", user: "alice", pass: "tok-alice", expiry: 600})
		for i := 0; i < 3; i++ {
			c.next()
		}
		waitForCond(t, func() bool { return b.mqtt.Security().QueuedBytes == 0 }, "acknowledged messages uncounted")
	})
	t.Run("total", func(t *testing.T) {
		b, _ := startSecure(t, aclFile, func(o *Options) { o.Limits.MaxQueuedBytesTotal = 1000 })
		offlineSubscriber(t, b, "q-total-1")
		offlineSubscriber(t, b, "q-total-2")
		publishN(t, b, 5, size)
		waitForCond(t, func() bool { return b.mqtt.Security().DroppedQueueFull >= 7 }, "seven deliveries dropped")
		if n := queued(b.mqtt, "q-total-1") + queued(b.mqtt, "q-total-2"); n != 3 {
			t.Fatalf("queued %d messages in all, want 3", n)
		}
		if st := b.mqtt.Security(); st.DroppedQueueFull != 7 || st.QueuedBytes != 3*(size+3) {
			t.Errorf("DroppedQueueFull = %d, QueuedBytes = %d, want 7, %d", st.DroppedQueueFull, st.QueuedBytes, 3*(size+3))
		}
	})
}

func TestLimitReceiveInflight(t *testing.T) {
	b, _ := startSecure(t, aclFile, func(o *Options) { o.Limits.MaxReceiveInflight = 10 })
	c := &rawClient{t: t, nc: secDial(t, b.mqtt, b.pki, "tcp"), v: 5}
	c.r = bufio.NewReader(c.nc)
	c.write(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connect}, Connect: packets.ConnectParams{
		ProtocolName: []byte("MQTT"), ClientIdentifier: "rm", Clean: true, Keepalive: 60}}, (*packets.Packet).ConnectEncode)
	ack, err := c.read(30 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if ack.Properties.ReceiveMaximum != 10 {
		t.Fatalf("CONNACK Receive Maximum %d, want 10", ack.Properties.ReceiveMaximum)
	}
}

// TestLimitBridgeQueue: the bridge queue holds at most BridgeQueueBytes
// (and BridgeQueueMessages); beyond, messages are dropped and counted.
// The injecting goroutine is not started, so the queue only fills.
func TestLimitBridgeQueue(t *testing.T) {
	for _, tt := range []struct {
		name           string
		bytes          int64
		msgs, size     int
		wantQueued     int
		wantQueueBytes int64
	}{
		{"bytes", 1 << 20, 1 << 16, 256 << 10, 3, 3 * (256<<10 + 3)},
		{"messages", 16 << 20, 5, 10, 5, 5 * 13},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l := Limits{BridgeQueueBytes: tt.bytes, BridgeQueueMessages: tt.msgs}
			l.ensureDefaults()
			br := &bridge{auth: &authHook{limits: l}, log: discard()}
			br.cond = sync.NewCond(&br.mu)
			for i := 0; i < 10; i++ {
				br.tap(&broker.Message{Topic: "a/x", Payload: make([]byte, tt.size), Origin: "h3"})
			}
			if len(br.queue) != tt.wantQueued || br.queueBytes != tt.wantQueueBytes {
				t.Errorf("queue %d messages, %d bytes, want %d, %d", len(br.queue), br.queueBytes, tt.wantQueued, tt.wantQueueBytes)
			}
			if n := br.Dropped.Load(); n != uint64(10-tt.wantQueued) {
				t.Errorf("Dropped = %d, want %d", n, 10-tt.wantQueued)
			}
		})
	}
}
