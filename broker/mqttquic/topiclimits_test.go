package mqttquic

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
)

// Topic limits over MQTT: the HTTP side's 256 bytes / 16 levels
// (broker.Limits MaxTopicLength, MaxTopicLevels) bound SUBSCRIBE and
// UNSUBSCRIBE filters, PUBLISH topic names and will topics too.

// levels returns a topic of n levels under public/ ("public/a/a/...").
func levels(n int) string {
	return "public" + strings.Repeat("/a", n-1)
}

// invalidFilter is the SUBACK code of a filter refused as invalid.
func invalidFilter(version byte) byte {
	if version == 4 {
		return packets.ErrUnspecifiedError.Code // 0x80, 3.1.1's one failure code
	}
	return packets.ErrTopicFilterInvalid.Code
}

// TestTopicFilterLimits: a filter beyond 16 levels or 256 bytes is
// refused with SUBACK Topic Filter invalid (3.1.1: 0x80) and held nowhere,
// a 20,000-level one included; 16 levels are accepted.
func TestTopicFilterLimits(t *testing.T) {
	b, _ := startSecure(t, aclFile, nil)
	long := "public/" + strings.Repeat("x", 300)
	for _, v := range []byte{4, 5} {
		t.Run("v"+string('0'+v), func(t *testing.T) {
			id := "filters-" + string('0'+v)
			c := mustConnect(t, b.mqtt, b.pki, "tcp", connectOpts{version: v, id: id, clean: true})
			tests := []struct {
				filter string
				want   byte
			}{
				{levels(16), 1},
				{levels(15) + "/#", 1},
				{"$share/g/" + levels(16), 1},
				{levels(17), invalidFilter(v)},
				{levels(16) + "/#", invalidFilter(v)},
				{"$share/g/" + levels(17), invalidFilter(v)},
				{"$share/" + strings.Repeat("g", 300) + "/public/x", invalidFilter(v)},
				{long, invalidFilter(v)},
				{levels(20000), invalidFilter(v)},
			}
			for _, tt := range tests {
				if v == 4 && strings.HasPrefix(tt.filter, "$share/") {
					continue // MQTT 5 only
				}
				if got := c.subscribe(tt.filter); len(got) != 1 || got[0] != tt.want {
					t.Errorf("subscribe %.40q (%d bytes): %x, want 0x%02x", tt.filter, len(tt.filter), got, tt.want)
				}
			}
			// Several filters in one SUBSCRIBE: each answered on its own.
			if got := c.subscribe(levels(17), "public/ok"); len(got) != 2 || got[0] != invalidFilter(v) || got[1] != 1 {
				t.Errorf("mixed subscribe: %x", got)
			}
			cl, ok := b.mqtt.MQTT().Clients.Get(id)
			if !ok {
				t.Fatal("client not held")
			}
			for f := range cl.State.Subscriptions.GetAll() {
				if len(f) > 256+len("$share/g/") {
					t.Errorf("subscription held: %.40q (%d bytes)", f, len(f))
				}
			}
			if v == 5 {
				for _, f := range []string{levels(17), levels(20000)} {
					if got := c.unsubscribe(f); len(got) != 1 || got[0] != packets.CodeNoSubscriptionExisted.Code {
						t.Errorf("unsubscribe %d levels: %x, want 0x11", strings.Count(f, "/")+1, got)
					}
				}
				if got := c.unsubscribe(levels(16)); len(got) != 1 || got[0] != 0 {
					t.Errorf("unsubscribe 16 levels: %x, want 0x00", got)
				}
			}
			c.disconnect()
		})
	}
	if n := b.h3.Stats().Protocols[Origin].Refused["bad_topic"]; n == 0 {
		t.Error("refused filters not counted as bad_topic")
	}
}

// TestTopicNameLimits: a PUBLISH to a name beyond the limits is refused
// with PUBACK Topic Name invalid (0x90; 3.1.1: the connection is closed)
// and reaches nobody: the bridge hands it to the broker, which refuses it
// (ErrBadTopic), before mochi looks its subscribers up.
func TestTopicNameLimits(t *testing.T) {
	b, _ := startSecure(t, aclFile, nil)
	sub := mustConnect(t, b.mqtt, b.pki, "tcp", connectOpts{id: "names-sub", clean: true})
	if got := sub.subscribe("public/#"); got[0] != 1 {
		t.Fatalf("subscribe public/#: %x", got)
	}
	c := mustConnect(t, b.mqtt, b.pki, "tcp", connectOpts{id: "names-5", clean: true})
	for _, name := range []string{levels(17), "public/" + strings.Repeat("x", 300), levels(20000)} {
		if code, err := c.publish(name, "x", 1, true); err != nil || code != packets.ErrTopicNameInvalid.Code {
			t.Errorf("publish %d levels, %d bytes: 0x%02x %v, want 0x90", strings.Count(name, "/")+1, len(name), code, err)
		}
		if _, err := c.publish(name, "x", 0, false); err != nil {
			t.Fatal(err)
		}
	}
	if code, err := c.publish(levels(16), "ok", 1, false); err != nil || code != 0 {
		t.Errorf("publish 16 levels: 0x%02x %v", code, err)
	}
	if pk := sub.next(); pk.TopicName != levels(16) {
		t.Errorf("subscriber got %.40q first, want the 16-level message", pk.TopicName)
	}
	sub.expectNoPublish("names-sub", "after the refused names")

	c4 := mustConnect(t, b.mqtt, b.pki, "tcp", connectOpts{version: 4, id: "names-4", clean: true})
	if _, err := c4.publish(levels(17), "x", 1, false); err == nil {
		t.Error("3.1.1 publish to 17 levels: acknowledged, want the connection closed")
	}
}

// TestWillTopicLimits: a will topic beyond the limits refuses the CONNECT
// (MQTT 5 0x90 Topic Name invalid, 3.1.1 return code 5 as every refused
// will); one within them is accepted.
func TestWillTopicLimits(t *testing.T) {
	b, _ := startSecure(t, aclFile, nil)
	for _, v := range []byte{4, 5} {
		want := packets.ErrTopicNameInvalid.Code
		if v == 4 {
			want = packets.Err3NotAuthorized.Code
		}
		for _, tt := range []struct {
			topic string
			want  byte
		}{
			{"public/" + strings.Repeat("w", 300), want},
			{levels(17), want},
			{levels(10000), want},
			{levels(16), 0},
		} {
			c, code := connectRaw(t, b.mqtt, b.pki, "tcp", connectOpts{version: v, id: "will-limits", clean: true, willTopic: tt.topic, willPayload: "gone", willRetain: true})
			if code != tt.want {
				t.Errorf("v%d will on %d levels, %d bytes: 0x%02x, want 0x%02x", v, strings.Count(tt.topic, "/")+1, len(tt.topic), code, tt.want)
			}
			if code == 0 {
				c.disconnect()
				waitForCond(t, func() bool { return sessionOffline(b.mqtt, "will-limits") }, "the session to end")
			}
		}
	}
	for _, m := range b.mqtt.MQTT().Topics.Messages("public/#") {
		if len(m.TopicName) > 256 || strings.Count(m.TopicName, "/") >= 16 {
			t.Errorf("retained will %.40q (%d bytes)", m.TopicName, len(m.TopicName))
		}
	}
}

// unsubscribe unsubscribes from filters (MQTT 5) and returns the UNSUBACK
// codes.
func (c *rawClient) unsubscribe(filters ...string) []byte {
	c.t.Helper()
	c.nextID++
	pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Unsubscribe, Qos: 1}, PacketID: c.nextID}
	for _, f := range filters {
		pk.Filters = append(pk.Filters, packets.Subscription{Filter: f})
	}
	c.write(pk, (*packets.Packet).UnsubscribeEncode)
	for {
		_ = c.nc.SetReadDeadline(time.Now().Add(30 * time.Second))
		b, err := c.r.ReadByte()
		if err != nil {
			c.t.Fatalf("unsubscribe: %v", err)
		}
		var fh packets.FixedHeader
		if err := fh.Decode(b); err != nil {
			c.t.Fatal(err)
		}
		n, _, err := packets.DecodeLength(c.r)
		if err != nil {
			c.t.Fatal(err)
		}
		body := make([]byte, n)
		if _, err := io.ReadFull(c.r, body); err != nil {
			c.t.Fatal(err)
		}
		if fh.Type != packets.Unsuback {
			continue // a delivery: the tests using this subscribe to nothing that is published
		}
		ack := packets.Packet{FixedHeader: fh, ProtocolVersion: c.v}
		if err := ack.UnsubackDecode(body); err != nil {
			c.t.Fatal(err)
		}
		return ack.ReasonCodes
	}
}

// BenchmarkSubscribeFilterCost measures what one SUBSCRIBE costs the
// process (broker and the raw client; the client's share is the encoding
// of one packet): the largest allowed filter (16 levels, 256 bytes) and a
// refused 20,000-level one. cpu-ns/op is user+system CPU time from
// getrusage (docs/security.md quotes the figures).
func BenchmarkSubscribeFilterCost(b *testing.B) {
	s, _ := startSecure(b, aclFile, nil)
	largest := "public/" + strings.Repeat("a/", 14) + strings.Repeat("a", 256-len("public/")-28)
	if len(largest) != 256 || strings.Count(largest, "/") != 15 {
		b.Fatalf("largest allowed filter: %d bytes, %d levels", len(largest), strings.Count(largest, "/")+1)
	}
	for _, bc := range []struct {
		name   string
		filter string
		want   byte
	}{
		{"allowed-16-levels-256B", largest, 1},
		{"refused-20000-levels", levels(20000), packets.ErrTopicFilterInvalid.Code},
	} {
		b.Run(bc.name, func(b *testing.B) {
			c := mustConnect(b, s.mqtt, s.pki, "tcp", connectOpts{id: "bench-" + bc.name, clean: true})
			before := cpuTime()
			b.ResetTimer()
			for range b.N {
				if got := c.subscribe(bc.filter); got[0] != bc.want {
					b.Fatalf("SUBACK %x, want 0x%02x", got, bc.want)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(cpuTime()-before)/float64(b.N), "cpu-ns/op")
			c.disconnect()
		})
	}
}
