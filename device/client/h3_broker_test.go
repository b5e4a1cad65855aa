package client_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quiot/quiot/broker/brokertest"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/auth"
	"github.com/quiot/quiot/device/client"
	"github.com/quiot/quiot/internal/quictune"
	"github.com/quiot/quiot/internal/testutil"
)

// Integration tests of the HTTP/3 client against the real broker, in process
// on 127.0.0.1:0.

const testTimeout = 20 * time.Second

func newClient(t *testing.T, b *brokertest.Broker, mod func(*client.Options)) client.Client {
	t.Helper()
	o := client.Options{
		Broker:     b.URL,
		RootCAs:    b.PKI.Pool(),
		Logger:     testutil.DiscardLogger(),
		Reconnect:  true,
		MaxBackoff: 200 * time.Millisecond,
	}
	if mod != nil {
		mod(&o)
	}
	c, err := client.New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// collector is a subscriber's handler that records messages and lets a test
// wait for a number of them.
type collector struct {
	mu     sync.Mutex
	msgs   []client.Message
	notify chan struct{}
}

func newCollector() *collector { return &collector{notify: make(chan struct{}, 1)} }

func (c *collector) handle(m client.Message) {
	c.mu.Lock()
	c.msgs = append(c.msgs, m)
	c.mu.Unlock()
	select {
	case c.notify <- struct{}{}:
	default:
	}
}

func (c *collector) messages() []client.Message {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]client.Message(nil), c.msgs...)
}

// wait returns once pred holds for the messages received so far.
func (c *collector) wait(t *testing.T, ctx context.Context, what string, pred func([]client.Message) bool) []client.Message {
	t.Helper()
	for {
		if ms := c.messages(); pred(ms) {
			return ms
		}
		select {
		case <-c.notify:
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v; got %d messages: %+v", what, ctx.Err(), len(c.messages()), c.messages())
		}
	}
}

func dataOnly(ms []client.Message) []client.Message {
	var out []client.Message
	for _, m := range ms {
		if !m.Gap {
			out = append(out, m)
		}
	}
	return out
}

func countAtLeast(n int) func([]client.Message) bool {
	return func(ms []client.Message) bool { return len(dataOnly(ms)) >= n }
}

// subscribe runs Subscribe in the background and returns once the broker has
// accepted the subscription. The returned channel yields Subscribe's result.
func subscribe(t *testing.T, ctx context.Context, c client.Client, filter string, since uint64, col *collector) <-chan error {
	t.Helper()
	ready := make(chan struct{}, 1)
	sctx := client.WithSubscribed(ctx, func() {
		select {
		case ready <- struct{}{}:
		default:
		}
	})
	done := make(chan error, 1)
	go func() { done <- c.Subscribe(sctx, filter, since, col.handle) }()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("subscribe %s ended early: %v", filter, err)
	case <-ctx.Done():
		t.Fatalf("subscribe %s: %v", filter, ctx.Err())
	}
	return done
}

// checkInOrder verifies payloads "prefix-0".."prefix-(n-1)" arrived once each, in order.
func checkInOrder(t *testing.T, ms []client.Message, prefix string, n int) {
	t.Helper()
	ms = dataOnly(ms)
	if len(ms) != n {
		t.Fatalf("got %d messages, want %d", len(ms), n)
	}
	var last uint64
	for i, m := range ms {
		if want := fmt.Sprintf("%s-%d", prefix, i); string(m.Payload) != want {
			t.Fatalf("message %d payload %q, want %q", i, m.Payload, want)
		}
		if m.Seq <= last {
			t.Fatalf("message %d seq %d not above %d", i, m.Seq, last)
		}
		last = m.Seq
	}
}

func TestH3PublishSubscribeRoundTrip(t *testing.T) {
	for _, mode := range []string{"request", "stream"} {
		t.Run(mode, func(t *testing.T) {
			b := brokertest.Start(t, nil, nil)
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			sub := newClient(t, b, nil)
			col := newCollector()
			done := subscribe(t, ctx, sub, "rt/#", 0, col)
			pub := newClient(t, b, func(o *client.Options) { o.PublishMode = mode })
			const n = 20
			var lastSeq uint64
			for i := range n {
				qos := byte(1)
				if i%4 == 3 {
					qos = 0 // QoS 0 in between: no ack awaited in stream mode
				}
				ack, err := pub.Publish(ctx, "rt/x", fmt.Appendf(nil, "m-%d", i), client.PublishOptions{QoS: qos})
				if err != nil {
					t.Fatalf("publish %d: %v", i, err)
				}
				if qos == 1 {
					if ack.Seq <= lastSeq {
						t.Fatalf("ack seq %d not above %d", ack.Seq, lastSeq)
					}
					lastSeq = ack.Seq
				}
			}
			ms := col.wait(t, ctx, "all messages", countAtLeast(n))
			checkInOrder(t, ms, "m", n)
			for _, m := range ms {
				if m.Topic != "rt/x" || m.Sent.IsZero() || m.Latency() <= 0 || m.Latency() > testTimeout {
					t.Fatalf("message %+v: want topic rt/x and a stamped send time", m)
				}
			}
			if s := pub.Stats(); s.Handshake <= 0 {
				t.Fatalf("publisher Stats = %+v, want a handshake time", s)
			}
			cancel()
			if err := <-done; err != nil {
				t.Fatalf("Subscribe returned %v after cancel, want nil", err)
			}
		})
	}
}

func TestH3RetainedFirst(t *testing.T) {
	b := brokertest.Start(t, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	pub := newClient(t, b, nil)
	if _, err := pub.Publish(ctx, "ret/a", []byte("kept"), client.PublishOptions{QoS: 1, Retain: true}); err != nil {
		t.Fatal(err)
	}
	col := newCollector()
	subscribe(t, ctx, newClient(t, b, nil), "ret/+", 0, col)
	if _, err := pub.Publish(ctx, "ret/a", []byte("live"), client.PublishOptions{QoS: 1}); err != nil {
		t.Fatal(err)
	}
	ms := col.wait(t, ctx, "retained and live", countAtLeast(2))
	if !ms[0].Retained || string(ms[0].Payload) != "kept" || ms[1].Retained || string(ms[1].Payload) != "live" {
		t.Fatalf("got %+v, want the retained message first, then the live one", ms)
	}
}

func TestH3StreamedPublishRejection(t *testing.T) {
	b := brokertest.Start(t, nil, &broker.Options{Limits: broker.Limits{MaxPayload: 64}})
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	pub := newClient(t, b, func(o *client.Options) { o.PublishMode = "stream" })
	tests := []struct {
		name    string
		topic   string
		payload []byte
		code    int
	}{
		{"ok", "s/a", []byte("x"), 0},
		{"wildcard topic", "s/+", []byte("x"), http.StatusBadRequest},
		{"too large", "s/a", make([]byte, 65), http.StatusRequestEntityTooLarge},
		{"ok after rejections", "s/b", []byte("y"), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ack, err := pub.Publish(ctx, tt.topic, tt.payload, client.PublishOptions{QoS: 1})
			if tt.code == 0 {
				if err != nil || ack.Seq == 0 {
					t.Fatalf("publish = %+v, %v; want accepted", ack, err)
				}
				return
			}
			var se *client.StatusError
			if !errors.As(err, &se) || se.Code != tt.code {
				t.Fatalf("publish error = %v, want status %d", err, tt.code)
			}
		})
	}
}

func TestH3ErrorsNotRetried(t *testing.T) {
	acl, err := auth.Parse([]byte(`
[[user]]
name = "dev1"
token = "tok1"
publish = ["dev1/#"]
subscribe = ["dev1/#"]
`))
	if err != nil {
		t.Fatal(err)
	}
	b := brokertest.Start(t, nil, &broker.Options{Auth: acl, Limits: broker.Limits{MaxPayload: 16}})
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	good := newClient(t, b, func(o *client.Options) { o.Token = "tok1" })
	bad := newClient(t, b, func(o *client.Options) { o.Token = "wrong" })
	anon := newClient(t, b, nil)

	if _, err := good.Publish(ctx, "dev1/x", []byte("ok"), client.PublishOptions{QoS: 1}); err != nil {
		t.Fatalf("authorised publish: %v", err)
	}
	tests := []struct {
		name string
		op   func() error
		code int
	}{
		{"bad token", func() error { _, err := bad.Publish(ctx, "dev1/x", nil, client.PublishOptions{QoS: 1}); return err }, 401},
		{"anonymous refused", func() error { _, err := anon.Publish(ctx, "dev1/x", nil, client.PublishOptions{QoS: 1}); return err }, 401},
		{"acl publish", func() error { _, err := good.Publish(ctx, "other/x", nil, client.PublishOptions{QoS: 1}); return err }, 403},
		{"acl subscribe", func() error { return good.Subscribe(ctx, "other/#", 0, func(client.Message) {}) }, 403},
		{"bad topic", func() error { _, err := good.Publish(ctx, "dev1/+", nil, client.PublishOptions{QoS: 1}); return err }, 400},
		{"bad filter", func() error { return good.Subscribe(ctx, "dev1/#/x", 0, func(client.Message) {}) }, 400},
		{"too large", func() error {
			_, err := good.Publish(ctx, "dev1/x", make([]byte, 17), client.PublishOptions{QoS: 1})
			return err
		}, 413},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			err := tt.op()
			var se *client.StatusError
			if !errors.As(err, &se) || se.Code != tt.code {
				t.Fatalf("error = %v, want status %d", err, tt.code)
			}
			if se.Reason == "" {
				t.Fatalf("error %v has no reason from the broker", err)
			}
			// Not retried: it returns at once instead of backing off until ctx ends.
			if d := time.Since(start); d > testTimeout/2 {
				t.Fatalf("took %v: retried?", d)
			}
		})
	}
}

func TestH3MutualTLS(t *testing.T) {
	pki := testutil.NewPKI(t)
	acl, err := auth.Parse([]byte(`
[[user]]
name = "sensor-1"
publish = ["sensors/sensor-1/#"]
subscribe = ["sensors/#"]
`))
	if err != nil {
		t.Fatal(err)
	}
	b := brokertest.Start(t, pki, &broker.Options{Auth: acl, ClientCAs: pki.Pool()})
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	cert := pki.Client(t, "sensor-1")
	c := newClient(t, b, func(o *client.Options) { o.Certificate = &cert })
	col := newCollector()
	subscribe(t, ctx, c, "sensors/#", 0, col)
	if _, err := c.Publish(ctx, "sensors/sensor-1/t", []byte("21.5"), client.PublishOptions{QoS: 1}); err != nil {
		t.Fatalf("publish with a client certificate: %v", err)
	}
	col.wait(t, ctx, "own message", countAtLeast(1))
	if _, err := c.Publish(ctx, "sensors/sensor-2/t", nil, client.PublishOptions{QoS: 1}); err == nil {
		t.Fatal("publish outside the certificate identity's ACL succeeded")
	}
}

// blackhole is a PacketConn that, once armed, drops every datagram in both
// directions until the client starts a new handshake (a QUIC Initial
// packet): the old connection has died by then, and the new one goes
// through.
type blackhole struct {
	net.PacketConn
	armed atomic.Bool
}

func isInitial(b []byte) bool {
	// Long header (0x80) with packet type Initial (0b00 in bits 4-5, QUIC v1).
	return len(b) > 0 && b[0]&0x80 != 0 && (b[0]&0x30)>>4 == 0
}

func (c *blackhole) WriteTo(p []byte, addr net.Addr) (int, error) {
	if c.armed.Load() {
		if !isInitial(p) {
			return len(p), nil // "sent", lost on the way
		}
		c.armed.Store(false)
	}
	return c.PacketConn.WriteTo(p, addr)
}

func (c *blackhole) ReadFrom(p []byte) (int, net.Addr, error) {
	for {
		n, addr, err := c.PacketConn.ReadFrom(p)
		if err != nil || !c.armed.Load() {
			return n, addr, err
		}
	}
}

func TestH3ResumeAfterReconnect(t *testing.T) {
	b := brokertest.Start(t, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	udp, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = udp.Close() })
	bh := &blackhole{PacketConn: udp}
	// A short idle timeout, so the blackholed connection dies quickly.
	prof := quictune.Default()
	prof.MaxIdleTimeout = quictune.Duration(time.Second)
	prof.HandshakeIdleTimeout = quictune.Duration(time.Second)
	sub := newClient(t, b, func(o *client.Options) { o.PacketConn = bh; o.Tuning = prof })
	col := newCollector()
	subscribe(t, ctx, sub, "res/#", 0, col)
	pub := newClient(t, b, nil)
	publish := func(from, to int) {
		for i := from; i < to; i++ {
			if _, err := pub.Publish(ctx, "res/x", fmt.Appendf(nil, "r-%d", i), client.PublishOptions{QoS: 1}); err != nil {
				t.Fatalf("publish %d: %v", i, err)
			}
		}
	}
	publish(0, 5)
	col.wait(t, ctx, "first five", countAtLeast(5))
	bh.armed.Store(true) // the subscriber's link goes dark
	publish(5, 30)       // published while the subscriber is cut off
	ms := col.wait(t, ctx, "all thirty after the reconnect", countAtLeast(30))
	checkInOrder(t, ms, "r", 30)
	if s := sub.Stats(); s.Reconnects < 1 {
		t.Fatalf("subscriber Stats = %+v, want a reconnect", s)
	}
	publish(30, 31) // live again after the replay
	ms = col.wait(t, ctx, "the live message", countAtLeast(31))
	checkInOrder(t, ms, "r", 31)
}

func TestH3ReconnectAcrossBrokerRestart(t *testing.T) {
	for _, mode := range []string{"request", "stream"} {
		t.Run(mode, func(t *testing.T) { testReconnectAcrossBrokerRestart(t, mode) })
	}
}

func testReconnectAcrossBrokerRestart(t *testing.T, mode string) {
	pki := testutil.NewPKI(t)
	b1 := brokertest.Start(t, pki, nil)
	addr := b1.Addr().String()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	prof := quictune.Default()
	prof.MaxIdleTimeout = quictune.Duration(2 * time.Second)
	prof.HandshakeIdleTimeout = quictune.Duration(time.Second)
	sub := newClient(t, b1, func(o *client.Options) { o.Tuning = prof })
	pub := newClient(t, b1, func(o *client.Options) { o.Tuning = prof; o.PublishMode = mode })
	col := newCollector()
	subscribed := make(chan struct{}, 4)
	sctx := client.WithSubscribed(ctx, func() { subscribed <- struct{}{} })
	go func() { _ = sub.Subscribe(sctx, "rs/#", 0, col.handle) }()
	<-subscribed
	for i := range 2 {
		if _, err := pub.Publish(ctx, "rs/x", fmt.Appendf(nil, "before-%d", i), client.PublishOptions{QoS: 1}); err != nil {
			t.Fatal(err)
		}
	}
	col.wait(t, ctx, "messages before the restart", countAtLeast(2))

	if err := b1.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	brokertest.Start(t, pki, &broker.Options{Listen: addr})
	select {
	case <-subscribed: // resubscribed to the new broker
	case <-ctx.Done():
		t.Fatal("subscriber did not resubscribe after the restart")
	}

	// The publisher's connection died with the broker: Publish redials.
	for i := range 3 {
		if _, err := pub.Publish(ctx, "rs/x", fmt.Appendf(nil, "after-%d", i), client.PublishOptions{QoS: 1}); err != nil {
			t.Fatalf("publish after the restart: %v", err)
		}
	}
	// The new broker numbers from 1 again, below the subscriber's resume
	// point: the subscriber must notice and not drop these as duplicates.
	ms := dataOnly(col.wait(t, ctx, "messages after the restart", countAtLeast(5)))
	for i, want := range []string{"before-0", "before-1", "after-0", "after-1", "after-2"} {
		if string(ms[i].Payload) != want {
			t.Fatalf("message %d = %q, want %q (all: %+v)", i, ms[i].Payload, want, ms)
		}
	}
	if s := pub.Stats(); s.Reconnects < 1 {
		t.Fatalf("publisher Stats = %+v, want a reconnect", s)
	}
	if s := sub.Stats(); s.Reconnects < 1 {
		t.Fatalf("subscriber Stats = %+v, want a reconnect", s)
	}
}

func TestH3SinceReplaysHistory(t *testing.T) {
	b := brokertest.Start(t, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	pub := newClient(t, b, nil)
	var seqs []uint64
	for i := range 5 {
		ack, err := pub.Publish(ctx, "h/x", fmt.Appendf(nil, "h-%d", i), client.PublishOptions{QoS: 1})
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, ack.Seq)
	}
	col := newCollector()
	subscribe(t, ctx, newClient(t, b, nil), "h/#", seqs[1], col)
	ms := dataOnly(col.wait(t, ctx, "replay", countAtLeast(3)))
	for i, m := range ms {
		if want := fmt.Sprintf("h-%d", i+2); string(m.Payload) != want {
			t.Fatalf("replayed %d = %q, want %q", i, m.Payload, want)
		}
	}
}

func TestH3CountingPacketConn(t *testing.T) {
	b := brokertest.Start(t, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	cc := testutil.ListenCounting(t)
	pub := newClient(t, b, func(o *client.Options) { o.PacketConn = cc })
	if _, err := pub.Publish(ctx, "c/x", []byte("x"), client.PublishOptions{QoS: 1}); err != nil {
		t.Fatal(err)
	}
	bytes, dgrams := cc.Total()
	if bytes == 0 || dgrams < 2 {
		t.Fatalf("counting conn saw %d bytes in %d datagrams, want the handshake and the publish", bytes, dgrams)
	}
}

func TestH3StreamPublishCancelWhileBlocked(t *testing.T) {
	b := brokertest.Start(t, nil, nil)
	udp, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = udp.Close() })
	bh := &blackhole{PacketConn: udp}
	pub := newClient(t, b, func(o *client.Options) { o.PacketConn = bh; o.PublishMode = "stream"; o.Reconnect = false })
	if _, err := pub.Publish(context.Background(), "blk/x", []byte("first"), client.PublishOptions{QoS: 1}); err != nil {
		t.Fatal(err)
	}
	bh.armed.Store(true) // nothing gets through: flow control soon stalls the stream
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	big := make([]byte, 200<<10)
	done := make(chan error, 1)
	go func() {
		for {
			if _, err := pub.Publish(ctx, "blk/x", big, client.PublishOptions{QoS: 0}); err != nil {
				done <- err
				return
			}
		}
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("blocked publish returned %v, want the context's deadline", err)
		}
	case <-time.After(testTimeout):
		t.Fatal("a publish blocked by flow control ignored its context")
	}
}

// gate is a PacketConn that, while shut, drops every datagram in both
// directions: the client can reach nobody.
type gate struct {
	net.PacketConn
	shut atomic.Bool
}

func (g *gate) WriteTo(p []byte, addr net.Addr) (int, error) {
	if g.shut.Load() {
		return len(p), nil // "sent", lost on the way
	}
	return g.PacketConn.WriteTo(p, addr)
}

func (g *gate) ReadFrom(p []byte) (int, net.Addr, error) {
	for {
		n, addr, err := g.PacketConn.ReadFrom(p)
		if err != nil || !g.shut.Load() {
			return n, addr, err
		}
	}
}

// TestH3ResumeAcrossRestartNewRunAhead: the broker restarts on the same
// port and numbers more messages than the subscriber's resume point before
// the subscriber gets back to it. The epoch tells the broker the resume
// point is from its previous run: the restart is announced and all the new
// run's history is delivered (without the epoch the first messages of the
// new run were silently skipped: their numbers were at or below the resume
// point).
func TestH3ResumeAcrossRestartNewRunAhead(t *testing.T) {
	pki := testutil.NewPKI(t)
	b1 := brokertest.Start(t, pki, nil)
	addr := b1.Addr().String()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	udp, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = udp.Close() })
	g := &gate{PacketConn: udp}
	prof := quictune.Default()
	prof.MaxIdleTimeout = quictune.Duration(2 * time.Second)
	prof.HandshakeIdleTimeout = quictune.Duration(time.Second)
	sub := newClient(t, b1, func(o *client.Options) { o.PacketConn = g; o.Tuning = prof })
	col := newCollector()
	done := subscribe(t, ctx, sub, "ra/#", 0, col)
	publish := func(c client.Client, payloads ...string) (last uint64) {
		t.Helper()
		for _, p := range payloads {
			ack, err := c.Publish(ctx, "ra/x", []byte(p), client.PublishOptions{QoS: 1})
			if err != nil {
				t.Fatalf("publish %s: %v", p, err)
			}
			last = ack.Seq
		}
		return last
	}
	resume := publish(newClient(t, b1, nil), "old-0", "old-1")
	col.wait(t, ctx, "messages of the first run", countAtLeast(2))

	if err := b1.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	// Nothing listens on addr now; from here until the new run has numbered
	// its messages the subscriber cannot reach it.
	g.shut.Store(true)
	b2 := brokertest.Start(t, pki, &broker.Options{Listen: addr})
	pub := newClient(t, b2, nil)
	if last := publish(pub, "new-0", "new-1", "new-2", "new-3", "new-4"); last <= resume {
		t.Fatalf("new run numbered up to %d, not beyond the resume point %d: the test proves nothing", last, resume)
	}
	g.shut.Store(false)

	want := []string{"old-0", "old-1", "new-0", "new-1", "new-2", "new-3", "new-4"}
	ms := col.wait(t, ctx, "all of the new run's history", countAtLeast(len(want)))
	data := dataOnly(ms)
	for i, w := range want {
		if string(data[i].Payload) != w {
			t.Fatalf("message %d = %q, want %q (all: %+v)", i, data[i].Payload, w, ms)
		}
	}
	restartAt := -1
	for i, m := range ms {
		if m.Gap && m.Topic == "" && m.Seq == 0 {
			restartAt = i
			break
		}
	}
	if restartAt < 0 || string(ms[restartAt-1].Payload) != "old-1" || string(ms[restartAt+1].Payload) != "new-0" {
		t.Fatalf("no restart gap between the runs' messages: %+v", ms)
	}
	publish(pub, "live")
	ms = col.wait(t, ctx, "a live message after the replay", countAtLeast(len(want)+1))
	if m := dataOnly(ms)[len(want)]; string(m.Payload) != "live" {
		t.Fatalf("after the replay: %+v", m)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Subscribe = %v", err)
	}
}

// TestH3HeartbeatKeepsQuietSubscription: with no QUIC keep-alive and a
// 1 s idle timeout, a subscription with nothing to deliver lives on the
// broker's heartbeat frames, which are not delivered as messages.
func TestH3HeartbeatKeepsQuietSubscription(t *testing.T) {
	b := brokertest.Start(t, nil, &broker.Options{Heartbeat: 100 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	prof := quictune.Default()
	prof.MaxIdleTimeout = quictune.Duration(time.Second)
	prof.KeepAlivePeriod = 0
	sub := newClient(t, b, func(o *client.Options) { o.Tuning = prof })
	col := newCollector()
	subscribe(t, ctx, sub, "quiet/#", 0, col)
	// Several idle timeouts of silence (this is the quiet period under
	// test, not a synchronisation).
	select {
	case <-col.notify:
		t.Fatalf("delivered during the quiet period: %+v", col.messages())
	case <-time.After(3 * time.Second):
	}
	if s := sub.Stats(); s.Reconnects != 0 {
		t.Fatalf("subscriber Stats = %+v: the quiet connection timed out", s)
	}
	if _, err := newClient(t, b, nil).Publish(ctx, "quiet/x", []byte("at last"), client.PublishOptions{QoS: 1}); err != nil {
		t.Fatal(err)
	}
	ms := col.wait(t, ctx, "the message after the quiet period", countAtLeast(1))
	if len(ms) != 1 || string(ms[0].Payload) != "at last" || ms[0].Gap {
		t.Fatalf("delivered %+v, want only the message", ms)
	}
	if s := sub.Stats(); s.Reconnects != 0 {
		t.Fatalf("subscriber Stats = %+v: the quiet connection timed out", s)
	}
}

// TestH3AuthEveryRequest runs a client that sends its token on every
// request against a broker with an ACL, in both publish modes: the broker
// checks the repeated token against the connection's identity and accepts it.
func TestH3AuthEveryRequest(t *testing.T) {
	acl, err := auth.Parse([]byte(`
[[user]]
name = "dev1"
token = "tok1"
publish = ["dev1/#"]
subscribe = ["dev1/#"]
`))
	if err != nil {
		t.Fatal(err)
	}
	b := brokertest.Start(t, nil, &broker.Options{Auth: acl})
	for _, mode := range []string{"request", "stream"} {
		t.Run(mode, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			c := newClient(t, b, func(o *client.Options) { o.Token = "tok1"; o.AuthEveryRequest = true; o.PublishMode = mode })
			got := make(chan client.Message, 8)
			subCtx, stop := context.WithCancel(ctx)
			defer stop()
			subscribed := make(chan struct{})
			var once sync.Once
			subCtx = client.WithSubscribed(subCtx, func() { once.Do(func() { close(subscribed) }) })
			errc := make(chan error, 1)
			go func() { errc <- c.Subscribe(subCtx, "dev1/"+mode, 0, func(m client.Message) { got <- m }) }()
			select {
			case <-subscribed:
			case err := <-errc:
				t.Fatalf("subscribe: %v", err)
			}
			for i := range 3 {
				if _, err := c.Publish(ctx, "dev1/"+mode, []byte{byte(i)}, client.PublishOptions{QoS: 1}); err != nil {
					t.Fatalf("publish %d: %v", i, err)
				}
			}
			if _, err := c.Publish(ctx, "other/x", nil, client.PublishOptions{QoS: 1}); err == nil {
				t.Fatal("publish outside the ACL accepted")
			}
			for i := range 3 {
				select {
				case m := <-got:
					if len(m.Payload) != 1 || m.Payload[0] != byte(i) {
						t.Fatalf("message %d: %q", i, m.Payload)
					}
				case <-ctx.Done():
					t.Fatalf("message %d not delivered", i)
				}
			}
		})
	}
}

// TestH3PublishAnswerWithoutDate: the broker's publish acknowledgement
// carries the sequence number and no Date header (25 bytes a message on a
// slow downlink), also for a request without content-length.
func TestH3PublishAnswerWithoutDate(t *testing.T) {
	b := brokertest.Start(t, nil, nil)
	hc := testutil.H3Client(b.PKI.Pool(), nil)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, b.URL+"/v1/topics/d/x", strings.NewReader("payload"))
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = -1
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent || resp.Header.Get("Quiot-Seq") == "" {
		t.Fatalf("answer %d, Quiot-Seq %q: want 204 with a sequence number", resp.StatusCode, resp.Header.Get("Quiot-Seq"))
	}
	if d, ok := resp.Header["Date"]; ok {
		t.Fatalf("answer has Date %q, want none", d)
	}
}
