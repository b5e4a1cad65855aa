package mqttquic

import (
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/brokertest"
	"github.com/quiot/quiot/internal/wire"
)

// TestStampRepeatPublishedOnce: a QoS 1 PUBLISH that repeats the compact
// send stamp, topic and payload of one the broker published for the same
// identity (what quiot's clients and bridges send again after a lost
// connection or a restart, as a new PUBLISH) is acknowledged and not
// delivered again, on the same connection or a new one. A QoS 0 repeat, a
// repeat with another payload and a repeat of a decimal quiot-time stamp
// (a third-party client) are delivered.
func TestStampRepeatPublishedOnce(t *testing.T) {
	p := newPKI(t)
	h3 := brokertest.Start(t, p, &broker.Options{ClientCAs: p.Pool()})
	s := startServer(t, p, func(o *Options) { o.Broker = h3.Broker })
	sub := mustConnect(t, s, p, "quic", connectOpts{id: "stamp-sub"})
	if codes := sub.subscribe("st/#"); codes[0] > 1 {
		t.Fatalf("subscribe: 0x%02x", codes[0])
	}
	stamp := time.Now().UnixNano()
	qt := []packets.UserProperty{{Key: wire.MQTTStampProperty, Val: wire.FormatStamp(stamp)}}
	dec := []packets.UserProperty{{Key: wire.MQTTTimeProperty, Val: strconv.FormatInt(stamp, 10)}}
	pub := mustConnect(t, s, p, "quic", connectOpts{id: "stamp-pub"})
	steps := []struct {
		c       *rawClient
		payload string
		qos     byte
		user    []packets.UserProperty
	}{
		{pub, "one", 1, qt},
		{pub, "one", 1, qt},   // sent again on the same connection: not delivered
		{pub, "other", 1, qt}, // same stamp, other payload: delivered
		{pub, "zero", 0, qt},
		{pub, "zero", 0, qt}, // QoS 0: no id, delivered twice
		{pub, "dec", 1, dec},
		{pub, "dec", 1, dec}, // decimal stamp: no id, delivered twice
	}
	for i, st := range steps {
		if code, err := st.c.publishProps("st/x", st.payload, st.qos, false, st.user); err != nil || code != 0 {
			t.Fatalf("publish %d (%s): PUBACK 0x%02x, %v", i, st.payload, code, err)
		}
	}
	// The publisher comes back on a new connection (as after a lost
	// connection or a restart) and sends "one" again.
	pub.disconnect()
	again := mustConnect(t, s, p, "quic", connectOpts{id: "stamp-pub"})
	if code, err := again.publishProps("st/x", "one", 1, false, qt); err != nil || code != 0 {
		t.Fatalf("publish again: PUBACK 0x%02x, %v", code, err)
	}
	if code, err := again.publish("st/end", "end", 1, false); err != nil || code != 0 {
		t.Fatalf("publish end: PUBACK 0x%02x, %v", code, err)
	}
	var got []string
	for {
		pk := sub.next()
		if pk.TopicName == "st/end" {
			break
		}
		got = append(got, string(pk.Payload))
	}
	want := []string{"one", "other", "zero", "zero", "dec", "dec"}
	if len(got) != len(want) {
		t.Fatalf("subscriber got %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("subscriber got %q, want %q", got, want)
		}
	}
}

// validID is a well-formed message id (broker.MaxMsgIDLen: 64).
var validID = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

func TestStampID(t *testing.T) {
	qt := func(v string) []packets.UserProperty {
		return []packets.UserProperty{{Key: wire.MQTTStampProperty, Val: v}}
	}
	pk := func(topic, payload string, qos byte, user []packets.UserProperty) packets.Packet {
		p := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: qos}, TopicName: topic, Payload: []byte(payload)}
		p.Properties.User = user
		return p
	}
	stamp := wire.FormatStamp(time.Date(2119, 12, 31, 0, 0, 0, 0, time.UTC).UnixNano())
	base := stampID(pk("a/b", "x", 1, qt(stamp)))
	if base == "" {
		t.Fatal("no id for a stamped QoS 1 publish")
	}
	if !validID.MatchString(base) {
		t.Fatalf("id %q is not a valid message id (1 to %d of [A-Za-z0-9_.-])", base, broker.MaxMsgIDLen)
	}
	for _, c := range []struct {
		name string
		pk   packets.Packet
		want string // "=" same as base, "" none, "!" another id
	}{
		{"same", pk("a/b", "x", 1, qt(stamp)), "="},
		{"qos 2", pk("a/b", "x", 2, qt(stamp)), "="},
		{"qos 0", pk("a/b", "x", 0, qt(stamp)), ""},
		{"other payload", pk("a/b", "y", 1, qt(stamp)), "!"},
		{"other topic", pk("a/c", "x", 1, qt(stamp)), "!"},
		{"topic and payload moved", pk("a/bx", "", 1, qt(stamp)), "!"},
		{"no stamp", pk("a/b", "x", 1, nil), ""},
		{"malformed stamp", pk("a/b", "x", 1, qt("*")), ""},
		{"negative stamp", pk("a/b", "x", 1, qt("-1")), ""},
	} {
		got := stampID(c.pk)
		switch {
		case c.want == "=" && got != base, c.want == "" && got != "", c.want == "!" && (got == "" || got == base):
			t.Errorf("%s: id %q (base %q), want %q", c.name, got, base, c.want)
		}
	}
}
