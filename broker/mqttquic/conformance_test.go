package mqttquic

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/quic-go/quic-go"

	"github.com/quiot/quiot/broker/auth"
	"github.com/quiot/quiot/internal/streamconn"
)

// What an MQTT client observes of the broker, packet by packet, over TCP
// and over QUIC (docs/mqtt.md's conformance table names these tests).

// transports are the two ways to reach the MQTT server.
var transports = []string{"tcp", "quic"}

// dialTransport connects a raw client of version ver to b over tr.
func dialTransport(t testing.TB, b *bridged, tr string, ver byte) *rawConn {
	t.Helper()
	if tr == "quic" {
		return newRawConn(t, dialQUICStream(t, b.mqtt, b.pki), ver)
	}
	c, err := net.Dial("tcp", b.mqtt.TCPAddr())
	if err != nil {
		t.Fatal(err)
	}
	return newRawConn(t, c, ver)
}

// dialQUICStream opens a QUIC connection (ALPN mqtt) to s and its one
// bidirectional stream, as a net.Conn.
func dialQUICStream(t testing.TB, s *Server, p *testPKI) net.Conn {
	t.Helper()
	c, err := dialQUICStreamErr(s, p)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// dialQUICStreamErr is dialQUICStream returning the error of a
// connection the broker refused while it was being opened.
func dialQUICStreamErr(s *Server, p *testPKI) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), rawTimeout)
	defer cancel()
	tc := &tls.Config{RootCAs: p.Pool(), ServerName: "localhost", NextProtos: []string{"mqtt"}}
	qc, err := quic.DialAddr(ctx, s.QUICAddr().String(), tc, &quic.Config{})
	if err != nil {
		return nil, err
	}
	st, err := qc.OpenStreamSync(ctx)
	if err != nil {
		_ = qc.CloseWithError(0, "")
		return nil, err
	}
	return streamconn.New(qc, st, true), nil
}

// Reason codes MQTT 5 allows in each acknowledgement (3.4.2.1, 3.5.2.1).
var (
	pubackCodes = map[byte]bool{0x00: true, 0x10: true, 0x80: true, 0x83: true, 0x87: true, 0x90: true, 0x91: true, 0x97: true, 0x99: true}
	pubrecCodes = pubackCodes
)

// deepTopic has 17 levels, one more than the broker allows.
var deepTopic = strings.Repeat("l/", 16) + "l"

// checkAck fails unless ack is a PUBACK (qos 1) or PUBREC (qos 2) for id
// with reason want, a reason code its table allows, and no property but a
// reason string on a refusal.
func checkAck(t testing.TB, ack packets.Packet, qos byte, id uint16, want byte) {
	t.Helper()
	typ, table := packets.Puback, pubackCodes
	if qos == 2 {
		typ, table = packets.Pubrec, pubrecCodes
	}
	if ack.FixedHeader.Type != typ {
		t.Fatalf("got packet type %d (reason 0x%02x), want %d", ack.FixedHeader.Type, ack.ReasonCode, typ)
	}
	if ack.PacketID != id {
		t.Fatalf("ack for packet id %d, want %d", ack.PacketID, id)
	}
	if ack.ReasonCode != want {
		t.Fatalf("reason 0x%02x (%q), want 0x%02x", ack.ReasonCode, ack.Properties.ReasonString, want)
	}
	if !table[ack.ReasonCode] {
		t.Fatalf("reason 0x%02x is not a valid code for packet type %d", ack.ReasonCode, typ)
	}
	props := ack.Properties
	if want < 0x80 && props.ReasonString != "" {
		t.Fatalf("successful ack carries a reason string %q", props.ReasonString)
	}
	props.ReasonString = ""
	var none packets.Properties
	var got, empty bytes.Buffer
	props.Encode(typ, packets.Mods{}, &got, 0)
	none.Encode(typ, packets.Mods{}, &empty, 0)
	if !bytes.Equal(got.Bytes(), empty.Bytes()) {
		t.Fatalf("ack carries properties besides a reason string: %+v", ack.Properties)
	}
}

// TestPublishAcksMQTT5: an MQTT 5 publish is answered with the
// acknowledgement of its QoS (PUBACK for 1, PUBREC for 2), a reason code
// that acknowledgement may carry, and none of the publish's properties
// (issue 10 findings 1-3); topic names with empty levels are accepted and
// delivered (finding 5); a refusal does not end the session.
func TestPublishAcksMQTT5(t *testing.T) {
	b := startBridged(t, nil)
	userProp := func(p *packets.Properties) { p.User = []packets.UserProperty{{Key: "k", Val: "v"}} }
	big := bytes.Repeat([]byte("x"), 300000) // over the 256 KiB payload limit, under the 320 KiB packet limit
	cases := []struct {
		name    string
		qos     byte
		topic   string
		payload []byte
		props   func(*packets.Properties)
		want    byte
	}{
		{"qos1 with user property", 1, "conf/t", nil, userProp, 0x00},
		{"qos2 with user property", 2, "conf/t", nil, userProp, 0x00},
		{"qos1 leading slash", 1, "/TopicA", nil, nil, 0x00},
		{"qos2 empty level", 2, "a//b", nil, nil, 0x00},
		{"qos1 trailing slash", 1, "a/", nil, nil, 0x00},
		{"qos1 too many levels", 1, deepTopic, nil, userProp, 0x90},
		{"qos2 too many levels", 2, deepTopic, nil, userProp, 0x90},
		{"qos1 payload over limit", 1, "conf/big", big, nil, 0x97},
		{"qos2 payload over limit", 2, "conf/big", big, nil, 0x97},
		{"qos1 $SYS topic", 1, "$SYS/x", nil, nil, 0x87},
		{"qos2 $SYS topic", 2, "$SYS/x", nil, nil, 0x87},
		{"qos1 other $ topic", 1, "$foo/x", nil, nil, 0x87},
		{"qos1 after refusals", 1, "conf/after", nil, userProp, 0x00},
	}
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			sub := dialTransport(t, b, tr, 5)
			sub.connect("sub-"+tr, true, nil)
			sub.subscribe(1, 0, "#")
			pub := dialTransport(t, b, tr, 5)
			pub.connect("pub-"+tr, true, nil)
			var accepted []string
			for i, c := range cases {
				id := uint16(i + 1)
				payload := c.payload
				if payload == nil {
					payload = []byte(fmt.Sprintf("%s %d", tr, i))
				}
				pub.publish(id, c.qos, c.topic, payload, c.props)
				checkAck(t, pub.read(), c.qos, id, c.want)
				if c.qos == 2 && c.want < 0x80 {
					pub.ack(packets.Pubrel, id)
					if pc := pub.expect(packets.Pubcomp); pc.ReasonCode != 0 {
						t.Fatalf("%s: PUBCOMP reason 0x%02x", c.name, pc.ReasonCode)
					}
				}
				if c.want < 0x80 {
					accepted = append(accepted, c.topic)
				}
			}
			// Everything accepted reaches the subscriber in order, nothing
			// refused does; a QoS 0 marker ends the list.
			pub.publish(0, 0, "conf/end", []byte("end"), nil)
			var got []string
			for {
				m := sub.expect(packets.Publish)
				if m.TopicName == "conf/end" {
					break
				}
				got = append(got, m.TopicName)
			}
			if strings.Join(got, " ") != strings.Join(accepted, " ") {
				t.Fatalf("subscriber got %q, want %q", got, accepted)
			}
		})
	}
}

// TestRefusedPublishMQTT311: an MQTT 3.1.1 client cannot be told no in a
// PUBACK, so a refused QoS 1 or 2 publish closes its connection
// (MQTT-3.3.5-2: acknowledge or close; never silence, issue 10 finding 4)
// without a DISCONNECT (3.1.1 has no server DISCONNECT); a refused QoS 0
// publish is dropped and the session goes on; topic names with empty
// levels are accepted (finding 5).
func TestRefusedPublishMQTT311(t *testing.T) {
	b := startBridged(t, nil)
	big := bytes.Repeat([]byte("x"), 300000)
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			for _, c := range []struct {
				name    string
				qos     byte
				topic   string
				payload []byte
			}{
				{"qos1 too many levels", 1, deepTopic, nil},
				{"qos2 too many levels", 2, deepTopic, nil},
				{"qos1 payload over limit", 1, "conf/big", big},
				{"qos1 $SYS topic", 1, "$SYS/x", nil},
			} {
				t.Run(c.name, func(t *testing.T) {
					r := dialTransport(t, b, tr, 4)
					r.connect("", true, nil)
					r.publish(1, c.qos, c.topic, append([]byte("x"), c.payload...), nil)
					if got := r.closed(); len(got) != 0 {
						t.Fatalf("before closing, the server sent %d packets, the first of type %d", len(got), got[0].FixedHeader.Type)
					}
				})
			}
			t.Run("qos0 refused, session goes on", func(t *testing.T) {
				r := dialTransport(t, b, tr, 4)
				r.connect("", true, nil)
				r.publish(0, 0, deepTopic, []byte("x"), nil)
				r.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pingreq}}, (*packets.Packet).PingreqEncode)
				r.expect(packets.Pingresp)
			})
			t.Run("empty levels accepted", func(t *testing.T) {
				r := dialTransport(t, b, tr, 4)
				r.connect("", true, nil)
				topics := []string{"/TopicA", "a//b", "a/"}
				r.subscribe(1, 1, topics...)
				for i, topic := range topics {
					id := uint16(10 + i)
					r.publish(id, 1, topic, []byte("x"), nil)
					// PUBACK and the delivery back to this subscriber, in
					// either order.
					var acked, delivered bool
					for !acked || !delivered {
						pk := r.read()
						switch pk.FixedHeader.Type {
						case packets.Puback:
							if pk.PacketID != id {
								t.Fatalf("PUBACK for %d, want %d", pk.PacketID, id)
							}
							acked = true
						case packets.Publish:
							if pk.TopicName != topic {
								t.Fatalf("delivered %q, want %q", pk.TopicName, topic)
							}
							r.ack(packets.Puback, pk.PacketID)
							delivered = true
						default:
							t.Fatalf("unexpected packet type %d", pk.FixedHeader.Type)
						}
					}
				}
			})
		})
	}
}

// TestCONNACKAnnouncesLimits: CONNACK tells an MQTT 5 client the limits
// the server enforces: Maximum Packet Size, Topic Alias Maximum, Receive
// Maximum, and the session expiry it grants when the client asked for
// more (MQTT 5 3.2.2.3).
func TestCONNACKAnnouncesLimits(t *testing.T) {
	b := startBridged(t, nil)
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			r := dialTransport(t, b, tr, 5)
			ack := r.connect("limits-"+tr, true, func(p *packets.Properties) {
				p.SessionExpiryInterval, p.SessionExpiryIntervalFlag = 0xFFFFFFFF, true
			})
			p := ack.Properties
			if p.MaximumPacketSize != 320<<10 || p.TopicAliasMaximum != 64 || p.ReceiveMaximum != 1024 {
				t.Fatalf("CONNACK maximum packet size %d, topic alias maximum %d, receive maximum %d; want %d, 64, 1024",
					p.MaximumPacketSize, p.TopicAliasMaximum, p.ReceiveMaximum, 320<<10)
			}
			if !p.SessionExpiryIntervalFlag || p.SessionExpiryInterval == 0 || p.SessionExpiryInterval > 24*3600 {
				t.Fatalf("CONNACK session expiry %d (set %v), want the granted expiry, at most the one-day cap", p.SessionExpiryInterval, p.SessionExpiryIntervalFlag)
			}
		})
	}
	// A 3.1.1 CONNACK has no properties, and no CONNACK is left marked.
	r := dialTransport(t, b, "tcp", 4)
	r.connect("", true, nil)
	if n := b.mqtt.compat.connacking.Load(); n != 0 {
		t.Fatalf("%d CONNACK marks left", n)
	}
}

// TestTopicAliases: an alias set by a publish names the topic of later
// publishes that carry only the alias (MQTT 5 3.3.2.3.4); an alias above
// the announced maximum is a protocol error: DISCONNECT 0x94.
func TestTopicAliases(t *testing.T) {
	b := startBridged(t, nil)
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			sub := dialTransport(t, b, tr, 5)
			sub.connect("alias-sub-"+tr, true, nil)
			sub.subscribe(1, 0, "alias/#")
			pub := dialTransport(t, b, tr, 5)
			pub.connect("alias-pub-"+tr, true, nil)
			alias := func(n uint16) func(*packets.Properties) {
				return func(p *packets.Properties) { p.TopicAlias, p.TopicAliasFlag = n, true }
			}
			pub.publish(1, 1, "alias/"+tr, []byte("set"), alias(64))
			checkAck(t, pub.read(), 1, 1, 0)
			pub.publish(2, 1, "", []byte("use"), alias(64))
			checkAck(t, pub.read(), 1, 2, 0)
			for _, want := range []string{"set", "use"} {
				m := sub.expect(packets.Publish)
				if m.TopicName != "alias/"+tr || string(m.Payload) != want {
					t.Fatalf("got %q on %q, want %q on alias/%s", m.Payload, m.TopicName, want, tr)
				}
			}
			pub.publish(3, 1, "alias/x", []byte("x"), alias(65))
			got := pub.closed()
			if len(got) != 1 || got[0].FixedHeader.Type != packets.Disconnect || got[0].ReasonCode != 0x94 {
				t.Fatalf("alias above the maximum: got %d packets %+v, want DISCONNECT 0x94", len(got), got)
			}
		})
	}
}

// TestTopicAliasUnderACL: a publish naming its topic by alias only is
// judged by the ACL on the topic the alias stands for (mochi checked the
// empty name and refused it with 0x87), and an alias never set is a
// protocol error: DISCONNECT 0x82 (MQTT 5 3.3.2.3.4).
func TestTopicAliasUnderACL(t *testing.T) {
	a, err := auth.Parse([]byte(aclFile)) // anonymous may publish to public/#
	if err != nil {
		t.Fatal(err)
	}
	b := startBridged(t, a)
	alias := func(n uint16) func(*packets.Properties) {
		return func(p *packets.Properties) { p.TopicAlias, p.TopicAliasFlag = n, true }
	}
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			pub := dialTransport(t, b, tr, 5)
			pub.connect("acl-alias-"+tr, true, nil)
			pub.publish(1, 1, "public/alias", []byte("set"), alias(3))
			checkAck(t, pub.read(), 1, 1, 0)
			pub.publish(2, 1, "", []byte("use"), alias(3))
			checkAck(t, pub.read(), 1, 2, 0)
			pub.publish(3, 1, "a/x", []byte("denied"), nil)
			checkAck(t, pub.read(), 1, 3, 0x87)
			pub.publish(4, 1, "", []byte("unset"), alias(9))
			got := pub.closed()
			if len(got) != 1 || got[0].FixedHeader.Type != packets.Disconnect || got[0].ReasonCode != 0x82 {
				t.Fatalf("alias never set: got %d packets %+v, want DISCONNECT 0x82", len(got), got)
			}
		})
	}
}

// TestQoS2ResentPublishDeliveredOnce: a QoS 2 PUBLISH sent again before
// PUBREL (its PUBREC was lost) is acknowledged with PUBREC 0x00 again and
// not delivered twice (MQTT-4.3.3-10).
func TestQoS2ResentPublishDeliveredOnce(t *testing.T) {
	b := startBridged(t, nil)
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			sub := dialTransport(t, b, tr, 5)
			sub.connect("dup-sub-"+tr, true, nil)
			sub.subscribe(1, 0, "dup/#")
			pub := dialTransport(t, b, tr, 5)
			pub.connect("dup-pub-"+tr, true, nil)
			pub.publish(7, 2, "dup/t", []byte("once"), nil)
			checkAck(t, pub.read(), 2, 7, 0)
			dup := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 2, Dup: true}, PacketID: 7, TopicName: "dup/t", Payload: []byte("once")}
			pub.send(dup, (*packets.Packet).PublishEncode)
			checkAck(t, pub.read(), 2, 7, 0)
			pub.ack(packets.Pubrel, 7)
			pub.expect(packets.Pubcomp)
			pub.publish(0, 0, "dup/end", []byte("end"), nil)
			if m := sub.expect(packets.Publish); m.TopicName != "dup/t" {
				t.Fatalf("got %q, want dup/t", m.TopicName)
			}
			if m := sub.expect(packets.Publish); m.TopicName != "dup/end" {
				t.Fatalf("got %q, want dup/end: the re-sent publish was delivered again", m.TopicName)
			}
		})
	}
}

// TestFlowControlToClient: the server sends a client no more
// unacknowledged QoS 1 messages than the client's Receive Maximum
// (MQTT-3.3.4-9), each PUBACK lets the next one go, in order, to the last
// (mochi alone stalls after Receive Maximum messages that had waited for
// credit), and a message sent after waiting is still resent after a
// reconnect (MQTT-4.4.0-1).
func TestFlowControlToClient(t *testing.T) {
	b := startBridged(t, nil)
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			id := "flow-sub-" + tr
			recvMax := func(p *packets.Properties) {
				p.ReceiveMaximum = 2
				p.SessionExpiryInterval, p.SessionExpiryIntervalFlag = 600, true
			}
			sub := dialTransport(t, b, tr, 5)
			sub.connect(id, true, recvMax)
			sub.subscribe(1, 1, "flow/#")
			pub := dialTransport(t, b, tr, 5)
			pub.connect("flow-pub-"+tr, true, nil)
			const n = 7
			for i := 0; i < n; i++ {
				pub.publish(uint16(1+i), 1, "flow/q1", []byte{byte('0' + i)}, nil)
				checkAck(t, pub.read(), 1, uint16(1+i), 0)
			}
			// A QoS 0 marker is not held back by the quota: what arrives
			// before it is what the server sent without acknowledgements.
			pub.publish(0, 0, "flow/marker", []byte("m"), nil)
			var held []packets.Packet
			for {
				m := sub.expect(packets.Publish)
				if m.TopicName == "flow/marker" {
					break
				}
				held = append(held, m)
			}
			if len(held) != 2 {
				t.Fatalf("%d unacknowledged QoS 1 messages sent, receive maximum is 2", len(held))
			}
			// Each PUBACK lets the next one go, in order; the last one sent
			// stays unacknowledged and comes again after a reconnect.
			var payloads []byte
			for len(payloads) < n-1 {
				m := held[0]
				held = held[1:]
				payloads = append(payloads, m.Payload...)
				sub.ack(packets.Puback, m.PacketID)
				if len(payloads)+len(held) < n {
					held = append(held, sub.expect(packets.Publish))
				}
			}
			if string(payloads) != "012345" || len(held) != 1 || string(held[0].Payload) != "6" {
				t.Fatalf("delivered %q then %d more, want 012345 in order and 6 unacknowledged", payloads, len(held))
			}
			disconnect(sub)
			sub = dialTransport(t, b, tr, 5)
			if ack := sub.connect(id, false, recvMax); !ack.SessionPresent {
				t.Fatal("session lost")
			}
			if m := sub.expect(packets.Publish); string(m.Payload) != "6" || !m.FixedHeader.Dup {
				t.Fatalf("after reconnect got %q (dup %v), want the unacknowledged 6 again", m.Payload, m.FixedHeader.Dup)
			}
		})
	}
}

// TestClientMaximumPacketSize: a message larger than the client's Maximum
// Packet Size is not sent to it and is treated as delivered
// (MQTT-3.1.2-24/25): with a Receive Maximum of 1 the next message still
// arrives (mochi kept the oversized one in flight, taking the only slot for
// good). The freed slot is used when the client next sends a packet (here
// PINGREQ; in life its keep-alive at the latest).
func TestClientMaximumPacketSize(t *testing.T) {
	b := startBridged(t, nil)
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			sub := dialTransport(t, b, tr, 5)
			sub.connect("size-sub-"+tr, true, func(p *packets.Properties) {
				p.ReceiveMaximum = 1
				p.MaximumPacketSize = 200
			})
			sub.subscribe(1, 1, "size/#")
			pub := dialTransport(t, b, tr, 5)
			pub.connect("size-pub-"+tr, true, nil)
			pub.publish(1, 1, "size/big", bytes.Repeat([]byte("x"), 300), nil)
			checkAck(t, pub.read(), 1, 1, 0)
			pub.publish(2, 1, "size/small", []byte("s"), nil)
			checkAck(t, pub.read(), 1, 2, 0)
			deadline := time.Now().Add(rawTimeout)
			for time.Now().Before(deadline) {
				sub.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pingreq}}, (*packets.Packet).PingreqEncode)
				for pong := false; !pong; {
					pk := sub.read()
					switch {
					case pk.FixedHeader.Type == packets.Pingresp:
						pong = true
					case pk.FixedHeader.Type == packets.Publish && pk.TopicName == "size/small":
						return
					default:
						t.Fatalf("got packet type %d on %q, want only the small message", pk.FixedHeader.Type, pk.TopicName)
					}
				}
			}
			t.Fatal("the message after an oversized one never arrived")
		})
	}
}

// TestServerReceiveMaximum: a client that leaves more QoS 2 publishes
// unreleased than the Receive Maximum in CONNACK (1024) is disconnected
// with 0x93 (MQTT-3.3.4-8, 4.9).
func TestServerReceiveMaximum(t *testing.T) {
	b := startBridged(t, nil)
	r := dialTransport(t, b, "tcp", 5)
	r.connect("recvmax", true, nil)
	for i := 1; i <= 1024; i++ {
		r.publish(uint16(i), 2, "rm/t", []byte("x"), nil)
		checkAck(t, r.read(), 2, uint16(i), 0)
	}
	r.publish(1025, 2, "rm/t", []byte("x"), nil)
	got := r.closed()
	if len(got) != 1 || got[0].FixedHeader.Type != packets.Disconnect || got[0].ReasonCode != 0x93 {
		t.Fatalf("got %d packets, want DISCONNECT 0x93: %+v", len(got), got)
	}
}

// TestSessionExpiry: a session with expiry 0 ends with its connection
// (CONNACK session present 0 on return, MQTT-3.1.2-23 and 3.2.2-2); one
// with an expiry outlives it and keeps QoS 1 messages published meanwhile
// (MQTT 5 4.1, 3.1.1 clean session 0 likewise).
func TestSessionExpiry(t *testing.T) {
	b := startBridged(t, nil)
	for _, tr := range transports {
		for _, ver := range []byte{4, 5} {
			t.Run(fmt.Sprintf("%s/v%d", tr, ver), func(t *testing.T) {
				id := fmt.Sprintf("sess-%s-%d", tr, ver)
				expiry := func(n uint32) func(*packets.Properties) {
					return func(p *packets.Properties) {
						if ver == 5 {
							p.SessionExpiryInterval, p.SessionExpiryIntervalFlag = n, true
						}
					}
				}
				// 3.1.1: clean session 1 is expiry 0, clean session 0 keeps it.
				r := dialTransport(t, b, tr, ver)
				r.connect(id, ver == 4, expiry(0))
				r.subscribe(1, 1, "sess/"+id)
				disconnect(r)
				r = dialTransport(t, b, tr, ver)
				if ack := r.connect(id, false, expiry(600)); ack.SessionPresent {
					t.Fatal("a session with expiry 0 was still present")
				}
				r.subscribe(1, 1, "sess/"+id)
				disconnect(r)
				pub := dialTransport(t, b, tr, 5)
				pub.connect(id+"-pub", true, nil)
				pub.publish(1, 1, "sess/"+id, []byte("kept"), nil)
				checkAck(t, pub.read(), 1, 1, 0)
				r = dialTransport(t, b, tr, ver)
				if ack := r.connect(id, false, expiry(600)); !ack.SessionPresent {
					t.Fatal("the session did not outlive its connection")
				}
				if m := r.expect(packets.Publish); string(m.Payload) != "kept" {
					t.Fatalf("got %q, want the message published while away", m.Payload)
				}
			})
		}
	}
}

// TestSessionExpires: a session whose expiry interval has passed since its
// connection ended is gone (MQTT 5 4.1, MQTT-4.1.0-2): waited for as the
// event of mochi dropping the client, then CONNACK says so.
func TestSessionExpires(t *testing.T) {
	b := startBridged(t, nil)
	r := dialTransport(t, b, "tcp", 5)
	expiry := func(p *packets.Properties) { p.SessionExpiryInterval, p.SessionExpiryIntervalFlag = 1, true }
	r.connect("expires", false, expiry)
	r.subscribe(1, 1, "exp/t")
	disconnect(r)
	waitUntil(t, func() bool { _, ok := b.mqtt.MQTT().Clients.Get("expires"); return !ok }, "session expiry")
	r = dialTransport(t, b, "tcp", 5)
	if ack := r.connect("expires", false, expiry); ack.SessionPresent {
		t.Fatal("an expired session was still present")
	}
}

// disconnect ends r's connection with DISCONNECT and waits for the server
// to close it.
func disconnect(r *rawConn) {
	r.t.Helper()
	r.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Disconnect}}, (*packets.Packet).DisconnectEncode)
	r.closed()
}

// TestPahoGolangOverQUIC: eclipse/paho.golang (not quiot's client, which
// refuses QoS 2) over MQTT over QUIC: a QoS 1 publish with user properties
// succeeds, a refused QoS 2 publish gets PUBREC 0x90 (not a PUBACK, which
// paho reports as a protocol error), and a later publish still succeeds.
func TestPahoGolangOverQUIC(t *testing.T) {
	b := startBridged(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), rawTimeout)
	defer cancel()
	c := paho.NewClient(paho.ClientConfig{Conn: dialQUICStream(t, b.mqtt, b.pki)})
	t.Cleanup(func() { _ = c.Disconnect(&paho.Disconnect{}) })
	if _, err := c.Connect(ctx, &paho.Connect{ClientID: "paho-golang", CleanStart: true, KeepAlive: 30}); err != nil {
		t.Fatal(err)
	}
	props := &paho.PublishProperties{User: paho.UserProperties{{Key: "k", Value: "v"}}}
	for _, p := range []struct {
		qos   byte
		topic string
		want  byte
	}{{1, "paho/t", 0}, {2, "paho/t", 0}, {2, deepTopic, 0x90}, {1, deepTopic, 0x90}, {1, "/paho", 0}} {
		resp, err := c.Publish(ctx, &paho.Publish{QoS: p.qos, Topic: p.topic, Payload: []byte("x"), Properties: props})
		if p.want >= 0x80 && resp != nil && resp.ReasonCode == p.want {
			continue // paho returns the refusal (and an error for a PUBACK)
		}
		if err != nil {
			t.Fatalf("qos %d publish on %q: %v", p.qos, p.topic, err)
		}
		if resp.ReasonCode != p.want {
			t.Fatalf("qos %d publish on %q: reason 0x%02x, want 0x%02x", p.qos, p.topic, resp.ReasonCode, p.want)
		}
	}
}

// waitUntil polls cond (an observable event, not a time) until it holds,
// failing after a generous bound that only catches a hang.
func waitUntil(t testing.TB, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(rawTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within %v", what, rawTimeout)
		}
		time.Sleep(10 * time.Millisecond) // polling an event, not synchronising on time
	}
}

// TestPacketIdentifierSpaces: the packet identifiers a client picks for
// its publishes and those the server picks for its deliveries are separate
// spaces (MQTT 2.2.1: each side assigns its own). mochi keeps both in one
// map per session: a client's QoS 1 publish that reused the identifier of
// an unacknowledged delivery to it removed that delivery from the session
// (never resent after a reconnect, MQTT-4.4.0-1, and its PUBACK gave no
// flow-control credit back), and the client's PUBACK of a delivery
// completed the client's own QoS 2 publish of the same identifier (PUBREL
// then got PUBCOMP 0x92).
func TestPacketIdentifierSpaces(t *testing.T) {
	b := startBridged(t, nil)
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			id := "ids-" + tr
			keep := func(p *packets.Properties) { p.SessionExpiryInterval, p.SessionExpiryIntervalFlag = 600, true }
			c := dialTransport(t, b, tr, 5)
			c.connect(id, true, keep)
			c.subscribe(1, 1, "ids/"+tr+"/#")
			p := dialTransport(t, b, tr, 5)
			p.connect(id+"-pub", true, nil)
			p.publish(1, 1, "ids/"+tr+"/a", []byte("a"), nil)
			checkAck(t, p.read(), 1, 1, 0)
			d := c.expect(packets.Publish) // unacknowledged for now
			// QoS 1 publish with the delivery's identifier.
			c.publish(d.PacketID, 1, "other/"+tr, []byte("x"), nil)
			checkAck(t, c.read(), 1, d.PacketID, 0)
			// The delivery is still in the session: after a reconnect it
			// comes again.
			_ = c.c.Close()
			waitUntil(t, func() bool { cl, ok := b.mqtt.MQTT().Clients.Get(id); return ok && cl.Closed() }, "the server to see the connection end")
			c = dialTransport(t, b, tr, 5)
			if ack := c.connect(id, false, keep); !ack.SessionPresent {
				t.Fatal("session lost")
			}
			r := c.expect(packets.Publish)
			if string(r.Payload) != "a" || !r.FixedHeader.Dup || r.PacketID != d.PacketID {
				t.Fatalf("after reconnect got %q (dup %v, id %d), want delivery %d again", r.Payload, r.FixedHeader.Dup, r.PacketID, d.PacketID)
			}
			// QoS 2 publish with the identifier of the delivery, which the
			// client acknowledges in the middle of its own exchange.
			c.publish(r.PacketID, 2, "other/"+tr, []byte("y"), nil)
			checkAck(t, c.read(), 2, r.PacketID, 0)
			c.ack(packets.Puback, r.PacketID)
			c.ack(packets.Pubrel, r.PacketID)
			if pc := c.expect(packets.Pubcomp); pc.ReasonCode != 0 {
				t.Fatalf("PUBCOMP reason 0x%02x, want 0x00", pc.ReasonCode)
			}
		})
	}
}

// TestKeepAliveAndSecondConnect: a connection silent for longer than one
// and a half times its keep-alive is closed (3.1.1: MQTT-3.1.2-24, 5:
// MQTT-3.1.2-22; the test waits for the close, however long it takes), and
// a second CONNECT on a connection is a protocol error that closes it
// (MQTT-3.1.0-2; MQTT 5: DISCONNECT 0x82).
func TestKeepAliveAndSecondConnect(t *testing.T) {
	b := startBridged(t, nil)
	r := dialTransport(t, b, "tcp", 4)
	r.keepalive = 1
	r.connect("", true, nil)
	if got := r.closed(); len(got) != 0 {
		t.Fatalf("keep-alive expiry: got %d packets before the close", len(got))
	}
	for _, tr := range transports {
		r := dialTransport(t, b, tr, 5)
		r.connect("second-"+tr, true, nil)
		conn := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connect}}
		conn.Connect.ProtocolName, conn.Connect.Clean, conn.Connect.ClientIdentifier = []byte("MQTT"), true, "second-"+tr
		r.send(conn, (*packets.Packet).ConnectEncode)
		got := r.closed()
		if tr == "quic" && len(got) == 0 {
			// The QUIC listener closes a connection that broke the
			// protocol at once, with CONNECTION_CLOSE code 1 and the
			// reason, which may overtake the DISCONNECT (MQTT 5 4.13: the
			// server MAY send one before closing).
			continue
		}
		if len(got) != 1 || got[0].FixedHeader.Type != packets.Disconnect || got[0].ReasonCode != 0x82 {
			t.Fatalf("%s: second CONNECT: got %d packets %+v, want DISCONNECT 0x82", tr, len(got), got)
		}
	}
}

// TestReceiveMaximumAfterReconnect: the messages resent when a session is
// resumed count against the client's Receive Maximum (MQTT 5 4.9): with
// one resent and a maximum of 2, one new message goes out, not two (mochi
// reset the credit to the maximum after resending).
func TestReceiveMaximumAfterReconnect(t *testing.T) {
	b := startBridged(t, nil)
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			id := "rm-again-" + tr
			props := func(p *packets.Properties) {
				p.ReceiveMaximum = 2
				p.SessionExpiryInterval, p.SessionExpiryIntervalFlag = 600, true
			}
			sub := dialTransport(t, b, tr, 5)
			sub.connect(id, true, props)
			sub.subscribe(1, 1, "rma/#")
			disconnect(sub)
			pub := dialTransport(t, b, tr, 5)
			pub.connect(id+"-pub", true, nil)
			pub.publish(1, 1, "rma/q", []byte("away"), nil)
			checkAck(t, pub.read(), 1, 1, 0)
			sub = dialTransport(t, b, tr, 5)
			if ack := sub.connect(id, false, props); !ack.SessionPresent {
				t.Fatal("session lost")
			}
			if m := sub.expect(packets.Publish); string(m.Payload) != "away" {
				t.Fatalf("got %q, want the message published while away", m.Payload)
			}
			for i := 0; i < 3; i++ {
				pub.publish(uint16(2+i), 1, "rma/q", []byte{byte('0' + i)}, nil)
				checkAck(t, pub.read(), 1, uint16(2+i), 0)
			}
			pub.publish(0, 0, "rma/marker", []byte("m"), nil)
			var more []string
			for {
				m := sub.expect(packets.Publish)
				if m.TopicName == "rma/marker" {
					break
				}
				more = append(more, string(m.Payload))
			}
			if len(more) != 1 {
				t.Fatalf("after the resent message, %d more were sent unacknowledged (%q); receive maximum is 2", len(more), more)
			}
		})
	}
}

// slowSessionEnd holds the end of client id's session (mochi runs
// OnDisconnect before it forgets a session that ends with its connection)
// until release is closed: a clean-up slowed down, as on a loaded host.
type slowSessionEnd struct {
	mqtt.HookBase
	id      string
	once    sync.Once
	blocked chan struct{} // closed once the clean-up is held
	release chan struct{}
}

func (h *slowSessionEnd) ID() string { return "test-slow-session-end" }

func (h *slowSessionEnd) Provides(b byte) bool { return b == mqtt.OnDisconnect }

func (h *slowSessionEnd) OnDisconnect(cl *mqtt.Client, _ error, expire bool) {
	if cl.ID != h.id || !expire {
		return
	}
	h.once.Do(func() {
		close(h.blocked)
		<-h.release
	})
}

// TestSessionEndAwaitedHowEverSlow: a client that reconnects while mochi
// is still forgetting its session that ended with the connection (MQTT 5
// Session Expiry 0) gets a new session (CONNACK session present 0,
// MQTT-3.1.2-23) that stays its session, however long that clean-up
// takes. mochi's clean-up forgets the session by client id (subscriptions
// and the client entry), so a new session established before it ends was
// lost with it: no longer held, its subscription gone. Before, the CONNECT
// waited for the old client to leave mochi's table (which mochi's once a
// second expiry sweep can do before the clean-up ends) or 2 s; it now
// waits for the end of the old connection's handling, an event. Over TCP,
// where the client sees the close before mochi's clean-up (over QUIC the
// stream ends only after it).
func TestSessionEndAwaitedHowEverSlow(t *testing.T) {
	b := startBridged(t, nil)
	const id = "slow-end"
	gate := &slowSessionEnd{id: id, blocked: make(chan struct{}), release: make(chan struct{})}
	var releaseOnce sync.Once
	release := func() { releaseOnce.Do(func() { close(gate.release) }) }
	t.Cleanup(release) // before the server closes, also on failure
	mq := b.mqtt.MQTT()
	if err := mq.AddHook(gate, nil); err != nil {
		t.Fatal(err)
	}
	expiry := func(n uint32) func(*packets.Properties) {
		return func(p *packets.Properties) { p.SessionExpiryInterval, p.SessionExpiryIntervalFlag = n, true }
	}
	r := dialTransport(t, b, "tcp", 5)
	r.connect(id, false, expiry(0))
	r.subscribe(1, 1, "slow/t")
	disconnect(r)
	<-gate.blocked
	// The clean-up stays held for 3 s, longer than the old wait's bound
	// and mochi's expiry sweep (the duration of the slowness, not a
	// synchronisation): the CONNECT below is answered once it is over.
	time.AfterFunc(3*time.Second, release)
	r = dialTransport(t, b, "tcp", 5)
	if ack := r.connect(id, false, expiry(600)); ack.SessionPresent {
		t.Fatal("a session with expiry 0 was handed to the reconnecting client")
	}
	r.subscribe(1, 1, "slow/t")
	// The old connection's handling has ended once only the new one is
	// counted.
	waitUntil(t, func() bool { return atomic.LoadInt64(&mq.Info.ClientsConnected) == 1 }, "end of the old connection")
	if cl, ok := mq.Clients.Get(id); !ok || cl.Closed() {
		t.Fatalf("the new session is no longer held (found %v)", ok)
	}
	pub := dialTransport(t, b, "tcp", 5)
	pub.connect(id+"-pub", true, nil)
	pub.publish(1, 1, "slow/t", []byte("still subscribed"), nil)
	checkAck(t, pub.read(), 1, 1, 0)
	if m := r.expect(packets.Publish); string(m.Payload) != "still subscribed" {
		t.Fatalf("got %q", m.Payload)
	}
}
