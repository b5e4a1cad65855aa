package mqttquic

import (
	"fmt"
	"sync"
	"testing"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// TestLateDeliveryAfterTakeover: a QoS 1 message that mochi fans out to a
// persistent session while its client reconnects reaches the reconnected
// client. mochi acknowledges the publish first and fans it out after; the
// delivery here takes the session's old client from mochi's table, then
// (held by a test hook) queues the message on it only after the client has
// reconnected and mochi has handed the session to the new client. Before
// takeover.go the message stayed on the old client, never sent.
func TestLateDeliveryAfterTakeover(t *testing.T) {
	for _, tr := range transports {
		for _, ver := range []byte{4, 5} {
			t.Run(fmt.Sprintf("%s/v%d", tr, ver), func(t *testing.T) {
				b := startBridged(t, nil)
				id := fmt.Sprintf("late-%s-%d", tr, ver)
				topic := "late/" + id
				expiry := func(p *packets.Properties) {
					if ver == 5 {
						p.SessionExpiryInterval, p.SessionExpiryIntervalFlag = 600, true
					}
				}
				r := dialTransport(t, b, tr, ver)
				r.connect(id, false, expiry)
				r.subscribe(1, 1, topic)
				disconnect(r)
				waitUntil(t, func() bool { return sessionOffline(b.mqtt, id) }, "the session offline")

				reached, release := make(chan struct{}), make(chan struct{})
				var releaseOnce sync.Once
				t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) })
				var hold sync.Once
				f := func(cl *mqtt.Client, tp string) {
					if cl.ID == id && tp == topic {
						hold.Do(func() { close(reached); <-release })
					}
				}
				b.mqtt.hook().beforeDelivery.Store(&f)

				pub := dialTransport(t, b, tr, 5)
				pub.connect(id+"-pub", true, nil)
				pub.publish(1, 1, topic, []byte("late"), nil)
				checkAck(t, pub.read(), 1, 1, 0) // acknowledged before the fan-out
				select {
				case <-reached:
				case <-time.After(rawTimeout):
					t.Fatal("the delivery never took the session's client")
				}

				r = dialTransport(t, b, tr, ver)
				if ack := r.connect(id, false, expiry); !ack.SessionPresent {
					t.Fatal("the session did not outlive its connection")
				}
				releaseOnce.Do(func() { close(release) }) // the delivery queues on the old client now
				if m := r.expect(packets.Publish); string(m.Payload) != "late" {
					t.Fatalf("got %q, want the message delivered during the reconnect", m.Payload)
				}
				if n := b.mqtt.compat.adopted.Load(); n != 1 {
					t.Errorf("adopted %d late messages, want 1", n)
				}
			})
		}
	}
}

// TestSubscribeIDHeldByDelivery: a client's SUBSCRIBE and UNSUBSCRIBE may
// reuse a packet identifier that a delivery to it holds (the client's and
// the server's identifiers are separate spaces, MQTT 5 2.2.1): they are
// granted, and the delivery stays in flight until its PUBACK. mochi
// answered 0x91 (identifier in use), so a client resuming a session with
// queued messages had its first SUBSCRIBE refused.
func TestSubscribeIDHeldByDelivery(t *testing.T) {
	b := startBridged(t, nil)
	for _, tr := range transports {
		for _, ver := range []byte{4, 5} {
			t.Run(fmt.Sprintf("%s/v%d", tr, ver), func(t *testing.T) {
				id := fmt.Sprintf("ids-%s-%d", tr, ver)
				expiry := func(p *packets.Properties) {
					if ver == 5 {
						p.SessionExpiryInterval, p.SessionExpiryIntervalFlag = 600, true
					}
				}
				r := dialTransport(t, b, tr, ver)
				r.connect(id, false, expiry)
				r.subscribe(1, 1, "ids/"+id)
				disconnect(r)
				pub := dialTransport(t, b, tr, 5)
				pub.connect(id+"-pub", true, nil)
				pub.publish(1, 1, "ids/"+id, []byte("queued"), nil)
				checkAck(t, pub.read(), 1, 1, 0)
				waitUntil(t, func() bool { return queued(b.mqtt, id) == 1 }, "the message queued")

				r = dialTransport(t, b, tr, ver)
				r.connect(id, false, expiry)
				d := r.expect(packets.Publish) // resent, not acknowledged yet
				sub := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Subscribe, Qos: 1}, PacketID: d.PacketID,
					Filters: packets.Subscriptions{{Filter: "ids/other", Qos: 1}}}
				r.send(sub, (*packets.Packet).SubscribeEncode)
				ack := r.expect(packets.Suback)
				if ack.PacketID != d.PacketID || len(ack.ReasonCodes) != 1 || ack.ReasonCodes[0] >= 0x80 {
					t.Fatalf("SUBACK id %d codes %x, want id %d granted", ack.PacketID, ack.ReasonCodes, d.PacketID)
				}
				unsub := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Unsubscribe, Qos: 1}, PacketID: d.PacketID,
					Filters: packets.Subscriptions{{Filter: "ids/other"}}}
				r.send(unsub, (*packets.Packet).UnsubscribeEncode)
				uack := r.expect(packets.Unsuback)
				if uack.PacketID != d.PacketID || ver == 5 && (len(uack.ReasonCodes) != 1 || uack.ReasonCodes[0] >= 0x80) {
					t.Fatalf("UNSUBACK id %d codes %x, want id %d, success", uack.PacketID, uack.ReasonCodes, d.PacketID)
				}
				// mochi answers before the hook puts the delivery back
				// (OnPacketProcessed): wait for it to be in the session.
				cl, _ := b.mqtt.MQTT().Clients.Get(id)
				waitUntil(t, func() bool {
					in, ok := cl.State.Inflight.Get(d.PacketID)
					return ok && in.FixedHeader.Type == packets.Publish && string(in.Payload) == "queued"
				}, "the delivery back in the session before its PUBACK")
				r.ack(packets.Puback, d.PacketID)
				waitUntil(t, func() bool { return queued(b.mqtt, id) == 0 }, "the PUBACK to complete the delivery")
			})
		}
	}
}

// TestResentMessagesCarryTopicNames: a message queued for a persistent
// MQTT 5 session is resent on the next connection with its topic name. The
// server's topic aliases last for one connection (MQTT 5 3.3.2.3.4), and
// mochi queued deliveries as sent, alias and no topic name, so the resend
// named an alias the new connection never set (the client closes for the
// protocol error, at every reconnect). Sessions that end with their
// connection keep server-to-client aliases.
func TestResentMessagesCarryTopicNames(t *testing.T) {
	b := startBridged(t, nil)
	for _, tc := range []struct {
		name      string
		expiry    uint32
		wantAlias bool
	}{{"persistent", 600, false}, {"ends with the connection", 0, true}} {
		t.Run(tc.name, func(t *testing.T) {
			id := fmt.Sprintf("alias-sub-%d", tc.expiry)
			topic := "alias/" + id
			props := func(p *packets.Properties) {
				p.SessionExpiryInterval, p.SessionExpiryIntervalFlag = tc.expiry, true
				p.TopicAliasMaximum = 10
			}
			r := dialTransport(t, b, "tcp", 5)
			r.connect(id, false, props)
			r.subscribe(1, 1, topic)
			pub := dialTransport(t, b, "tcp", 5)
			pub.connect(id+"-pub", true, nil)
			var last packets.Packet
			for i, payload := range []string{"one", "two"} {
				pub.publish(uint16(i+1), 1, topic, []byte(payload), nil)
				checkAck(t, pub.read(), 1, uint16(i+1), 0)
				last = r.expect(packets.Publish)
				if i == 0 {
					r.ack(packets.Puback, last.PacketID)
				}
			}
			if aliased := last.TopicName == "" && last.Properties.TopicAlias > 0; aliased != tc.wantAlias {
				t.Fatalf("second delivery: topic %q alias %d, want aliased %v", last.TopicName, last.Properties.TopicAlias, tc.wantAlias)
			}
			if tc.expiry == 0 {
				return
			}
			disconnect(r) // "two" unacknowledged: resent next time
			r = dialTransport(t, b, "tcp", 5)
			r.connect(id, false, props)
			m := r.expect(packets.Publish)
			if m.TopicName != topic || string(m.Payload) != "two" {
				t.Fatalf("resent topic %q (alias %d) payload %q, want %q with its topic name", m.TopicName, m.Properties.TopicAlias, m.Payload, topic)
			}
		})
	}
}
