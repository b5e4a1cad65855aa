package mqttquic

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/quic-go/quic-go"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/brokertest"
	"github.com/quiot/quiot/device/client"
	"github.com/quiot/quiot/internal/quictune"
	"github.com/quiot/quiot/internal/wire"
)

// repeatWatch is a slog handler that signals each "repeated message id"
// record of the broker (broker.PublishOnce).
type repeatWatch struct{ seen chan string }

func (w repeatWatch) Enabled(context.Context, slog.Level) bool { return true }
func (w repeatWatch) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "repeated message id answered again" {
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "id" {
				w.seen <- a.Value.String()
			}
			return true
		})
	}
	return nil
}
func (w repeatWatch) WithAttrs([]slog.Attr) slog.Handler { return w }
func (w repeatWatch) WithGroup(string) slog.Handler      { return w }

// nextRepeat waits for the broker's next repeated message id.
func nextRepeat(t *testing.T, repeats <-chan string) string {
	t.Helper()
	select {
	case id := <-repeats:
		return id
	case <-time.After(30 * time.Second):
		t.Fatal("the broker answered no repeated message id within 30 s")
	}
	return ""
}

// startEarly starts an HTTP/3 broker and an MQTT server bridged to it
// whose profile allows 0-RTT; repeats receives the message id of every
// PUBLISH the broker answered as a repeat.
func startEarly(t *testing.T) (b *bridged, repeats <-chan string) {
	t.Helper()
	p := newPKI(t)
	w := repeatWatch{seen: make(chan string, 16)}
	h3 := brokertest.Start(t, p, &broker.Options{ClientCAs: p.Pool(), Logger: slog.New(w)})
	s := startServer(t, p, func(o *Options) {
		o.Broker = h3.Broker
		o.Tuning = early0RTTProfile()
		o.ClientCAs = nil // a CONNECT with a client certificate waits for the handshake
	})
	return &bridged{pki: p, h3: h3, mqtt: s}, w.seen
}

// early0RTTProfile is lean with 0-RTT, and a 1 s handshake timeout that
// ends a replayed connection (it never completes its handshake) soon.
func early0RTTProfile() *quictune.Profile {
	pr := quictune.Lean()
	pr.Allow0RTT = true
	pr.HandshakeIdleTimeout = quictune.Duration(time.Second)
	return pr
}

// earlyClientProfile is early0RTTProfile for the tests' clients, whose
// handshakes are real ones: with the broker's 1 s timeout on the client
// too, a host stalled for a second failed a wake-up ("no recent network
// activity", TestEarlyWakeUpReplayed in a loaded fresh-clone make test).
func earlyClientProfile() *quictune.Profile {
	pr := early0RTTProfile()
	pr.HandshakeIdleTimeout = quictune.Duration(10 * time.Second)
	return pr
}

// publishWithID sends a QoS 1 PUBLISH carrying message id id and the
// current send time, and returns the PUBACK's reason code.
func (c *rawClient) publishWithID(topic, payload, id string) byte {
	c.t.Helper()
	c.nextID++
	pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}, TopicName: topic, Payload: []byte(payload), PacketID: c.nextID}
	pk.Properties.User = []packets.UserProperty{
		{Key: wire.MQTTTimeProperty, Val: strconv.FormatInt(time.Now().UnixNano(), 10)},
		{Key: wire.MQTTMsgIDProperty, Val: id},
	}
	c.write(pk, (*packets.Packet).PublishEncode)
	for {
		ack, err := c.read(30 * time.Second)
		if err != nil {
			c.t.Fatalf("publish %q: %v", id, err)
		}
		if ack.FixedHeader.Type == packets.Puback && ack.PacketID == pk.PacketID {
			return ack.ReasonCode
		}
		c.keep(ack)
	}
}

// TestPublishOnceByMessageID: a PUBLISH repeating a message id is
// acknowledged and not delivered again, over MQTT or HTTP/3, as a replayed
// 0-RTT PUBLISH would be.
func TestPublishOnceByMessageID(t *testing.T) {
	b, repeats := startEarly(t)
	sub := mustConnect(t, b.mqtt, b.pki, "quic", connectOpts{id: "dup-sub"})
	if codes := sub.subscribe("dup/x"); codes[0] > 1 {
		t.Fatalf("subscribe: 0x%02x", codes[0])
	}
	h3Sub := newClient(t, b.pki, b.h3URL(), nil)
	h3Ch := subscribe(t, h3Sub, "dup/#")
	h3Pub := newClient(t, b.pki, b.h3URL(), nil)
	waitSubscribed(t, h3Pub, h3Ch, "dup/probe")
	drain(h3Ch)

	pub := mustConnect(t, b.mqtt, b.pki, "quic", connectOpts{id: "dup-pub"})
	for i, p := range []struct{ payload, id string }{{"one", "m1"}, {"one again", "m1"}, {"two", "m2"}} {
		if code := pub.publishWithID("dup/x", p.payload, p.id); code != 0 {
			t.Fatalf("publish %d (%s): PUBACK 0x%02x", i, p.id, code)
		}
	}
	if id := nextRepeat(t, repeats); id != "m1" {
		t.Fatalf("repeat of %q, want m1", id)
	}
	for _, want := range []string{"one", "two"} {
		if pk := sub.next(); string(pk.Payload) != want {
			t.Fatalf("mqtt subscriber got %q, want %q (the repeat of m1 delivered?)", pk.Payload, want)
		}
		if m := recv(t, h3Ch, "h3 delivery"); string(m.Payload) != want {
			t.Fatalf("h3 subscriber got %q, want %q", m.Payload, want)
		}
	}
	noMore(t, h3Ch, "h3 subscriber")
}

// recordingConn records the datagrams a client sends that start with an
// Initial or a 0-RTT packet (QUIC v1 long headers): its first flight, with
// all its 0-RTT data. It hands the client nothing from the broker until
// the client has sent early bytes (0-RTT packets) of at least hold, or
// for 10 s: on loopback the broker's answer could otherwise come before
// the client packed its PUBLISH, which then goes in 1-RTT data.
type recordingConn struct {
	net.PacketConn
	hold int

	mu     sync.Mutex
	flight [][]byte
	early  int
	sent   chan struct{} // closed once early >= hold
}

func newRecordingConn(pc net.PacketConn, hold int) *recordingConn {
	return &recordingConn{PacketConn: pc, hold: hold, sent: make(chan struct{})}
}

func (c *recordingConn) WriteTo(p []byte, a net.Addr) (int, error) {
	if len(p) > 0 && p[0]&0x80 != 0 && (p[0]&0x30 == 0x00 || p[0]&0x30 == 0x10) {
		c.mu.Lock()
		c.flight = append(c.flight, append([]byte(nil), p...))
		for _, pk := range splitLongHeader(nil, p) {
			if pk[0]&0x30 == 0x10 {
				c.early += len(pk)
			}
		}
		if c.early >= c.hold && c.hold > 0 {
			c.hold = 0
			close(c.sent)
		}
		c.mu.Unlock()
	}
	return c.PacketConn.WriteTo(p, a)
}

func (c *recordingConn) ReadFrom(p []byte) (int, net.Addr, error) {
	select {
	case <-c.sent:
	case <-time.After(10 * time.Second):
	}
	return c.PacketConn.ReadFrom(p)
}

// splitLongHeader splits a datagram into its coalesced long-header
// packets (RFC 9000 17.2), leaving out a trailing short-header packet.
// t may be nil: a malformed packet then ends the list.
func splitLongHeader(t *testing.T, d []byte) [][]byte {
	bad := false
	fail := func(f string, a ...any) {
		if t != nil {
			t.Helper()
			t.Fatalf(f, a...)
		}
		bad = true
	}
	varint := func(b []byte) (uint64, int) {
		if len(b) == 0 {
			fail("truncated varint")
			return 0, 1
		}
		n := 1 << (b[0] >> 6)
		if len(b) < n {
			fail("truncated varint")
			return 0, 1
		}
		v := uint64(b[0] & 0x3f)
		for i := 1; i < n; i++ {
			v = v<<8 | uint64(b[i])
		}
		return v, n
	}
	var out [][]byte
	for len(d) > 7 && d[0]&0x80 != 0 && !bad {
		i := 5             // first byte, version
		i += 1 + int(d[i]) // destination connection id
		if i >= len(d) {
			break
		}
		i += 1 + int(d[i]) // source connection id
		if i >= len(d) {
			break
		}
		if d[0]&0x30 == 0x00 { // Initial: token
			n, l := varint(d[i:])
			i += l + int(n)
			if i >= len(d) {
				break
			}
		}
		n, l := varint(d[i:])
		end := i + l + int(n)
		if end > len(d) || bad {
			fail("packet of %d bytes in a datagram of %d", end, len(d))
			break
		}
		out = append(out, d[:end])
		d = d[end:]
	}
	return out
}

// TestEarlyWakeUpReplayed: a resumed MQTT over QUIC client sends CONNECT
// and its first PUBLISH in 0-RTT data; the same first flight sent again
// from elsewhere is served from its 0-RTT data (the replay cannot complete
// the handshake), and its PUBLISH is taken as a repeat and not delivered
// again.
func TestEarlyWakeUpReplayed(t *testing.T) {
	b, repeats := startEarly(t)
	sub := mustConnect(t, b.mqtt, b.pki, "quic", connectOpts{id: "wake-sub"})
	if codes := sub.subscribe("wake/#"); codes[0] > 1 {
		t.Fatalf("subscribe: 0x%02x", codes[0])
	}
	// A payload of 600 bytes: once the client has sent that much in 0-RTT
	// packets, its PUBLISH went in them (recordingConn).
	payloadOf := func(i int) string { return fmt.Sprintf("w%d-%s", i, strings.Repeat("x", 600)) }
	cache := tls.NewLRUClientSessionCache(4)
	tokens := quic.NewLRUTokenStore(4, 2)
	wake := func(i int, pc net.PacketConn) bool {
		t.Helper()
		c, err := client.New(client.Options{Broker: quicURL(b.mqtt), RootCAs: b.pki.Pool(), Logger: discard(),
			Tuning: earlyClientProfile(), SessionCache: cache, TokenStore: tokens, PacketConn: pc, ClientID: "wake-dev"})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Publish(context.Background(), "wake/up", []byte(payloadOf(i)), client.PublishOptions{QoS: 1}); err != nil {
			t.Fatalf("wake-up %d: %v", i, err)
		}
		if pk := sub.next(); string(pk.Payload) != payloadOf(i) {
			t.Fatalf("wake-up %d: delivered %q", i, pk.Payload)
		}
		return client.Used0RTT(c)
	}
	if wake(0, nil) {
		t.Fatal("first wake-up used 0-RTT without a session ticket")
	}
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	rec := newRecordingConn(udp, len(payloadOf(1)))
	if !wake(1, rec) {
		t.Fatal("second wake-up did not use 0-RTT")
	}
	select {
	case <-rec.sent:
	default:
		t.Fatal("the second wake-up's PUBLISH did not go in 0-RTT data")
	}
	rec.mu.Lock()
	recorded := rec.flight
	rec.mu.Unlock()
	if len(recorded) == 0 {
		t.Fatal("no first flight recorded")
	}
	// What a recorder replays: the first datagram (the ClientHello and
	// perhaps 0-RTT packets coalesced with it) and every later 0-RTT
	// packet on its own (one coalesced with the client's acknowledgement
	// of the broker's Initial is cut out of it).
	flight := [][]byte{recorded[0]}
	for _, d := range recorded[1:] {
		for _, p := range splitLongHeader(t, d) {
			if p[0]&0x30 == 0x10 {
				flight = append(flight, p)
			}
		}
	}
	// The broker answers a closed connection's ids for a few PTOs, and a
	// flight that met them (or the closed connection's last packets) is
	// lost for the connection it then opens until that one's handshake
	// times out (1 s here), so the flight is sent again, from a new
	// socket each time, until the broker has served it once.
	replays := 0
	for deadline := time.Now().Add(30 * time.Second); ; replays++ {
		if time.Now().After(deadline) {
			var kinds []string
			for _, d := range flight {
				kinds = append(kinds, fmt.Sprintf("%d:%#x", len(d), d[0]&0x30))
			}
			t.Fatalf("no replay served within 30 s (%d sent; flight %v)", replays, kinds)
		}
		rp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		defer rp.Close()
		for _, d := range flight {
			if _, err := rp.WriteTo(d, b.mqtt.QUICAddr()); err != nil {
				t.Fatal(err)
			}
		}
		select {
		case id := <-repeats:
			if id == "" {
				t.Fatal("replay: no message id")
			}
		case <-afterShort():
			continue
		}
		break
	}
	t.Logf("replay served after %d sends", replays+1)
	sub.expectNoPublish("wake-sub", "after the replays")
}
