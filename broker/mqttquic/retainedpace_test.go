package mqttquic

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/quiot/quiot/broker"
)

// Retained replays paced by the subscriber (docs/mqtt.md, "Retained
// messages"): mochi queued a SUBSCRIBE's whole retained replay at once on
// the client's reading goroutine, dropping the QoS 1 deliveries beyond
// the session's bounds and reading the client's PUBACKs only after it.

// connectRM connects over transport with MQTT version v (5: with Receive
// Maximum rm if rm > 0).
func connectRM(t *testing.T, br *bridged, transport, id string, v byte, rm uint16) *rawClient {
	t.Helper()
	c := &rawClient{t: t, nc: secDial(t, br.mqtt, br.pki, transport), v: v}
	c.r = bufio.NewReader(c.nc)
	pk := packets.Packet{
		FixedHeader:     packets.FixedHeader{Type: packets.Connect},
		ProtocolVersion: v,
		Connect:         packets.ConnectParams{ProtocolName: []byte("MQTT"), ClientIdentifier: id, Clean: true, Keepalive: 60},
	}
	if v == 5 && rm > 0 {
		pk.Properties.ReceiveMaximum = rm
	}
	c.write(pk, (*packets.Packet).ConnectEncode)
	ack, err := c.read(30 * time.Second)
	if err != nil || ack.FixedHeader.Type != packets.Connack || ack.ReasonCode != 0 {
		t.Fatalf("connect %q: %v %+v", id, err, ack.FixedHeader)
	}
	return c
}

// retainN retains n messages of payload on r/0000, r/0001, ... in that
// order, through an MQTT publisher (QoS 1, each acknowledged before the
// next), and waits until the MQTT side holds them.
func retainN(t *testing.T, br *bridged, n int, payload string) {
	t.Helper()
	sys := br.mqtt.MQTT().Topics.Retained.Len()
	pub := connectRM(t, br, "tcp", "retainer", 5, 0)
	for i := range n {
		if code, err := pub.publish(fmt.Sprintf("r/%04d", i), payload, 1, true); err != nil || code != 0 {
			t.Fatalf("retain %d: 0x%02x %v", i, code, err)
		}
	}
	pub.disconnect()
	waitForCond(t, func() bool { return br.mqtt.MQTT().Topics.Retained.Len() == sys+n }, "every message retained")
}

// subscribeQoS subscribes c to filter at qos and returns the SUBACK code;
// deliveries read before it are kept unacknowledged in c.pending.
func subscribeQoS(c *rawClient, filter string, qos byte) byte {
	c.t.Helper()
	c.nextID++
	pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Subscribe, Qos: 1}, PacketID: c.nextID,
		Filters: []packets.Subscription{{Filter: filter, Qos: qos}}}
	c.write(pk, (*packets.Packet).SubscribeEncode)
	for {
		ack, err := c.read(30 * time.Second)
		if err != nil {
			c.t.Fatalf("subscribe %s: %v", filter, err)
		}
		if ack.FixedHeader.Type == packets.Suback {
			return ack.ReasonCodes[0]
		}
		if ack.FixedHeader.Type == packets.Publish {
			c.pending = append(c.pending, ack)
		}
	}
}

// TestRetainedReplayPaced: a QoS 1 subscriber to 2000 retained messages
// gets every one, in the order they were retained, none dropped: with a
// small Receive Maximum over TCP and QUIC, and as an MQTT 3.1.1 client
// (no Receive Maximum: the session's bound, 1024 messages in flight). mochi
// sent the Receive Maximum, held the rest in the session up to 1024
// (sent later in no particular order) and dropped 976.
func TestRetainedReplayPaced(t *testing.T) {
	const n = 2000
	for _, tt := range []struct {
		name      string
		transport string
		v         byte
		rm        uint16
	}{
		{"tcp v5 rm 10", "tcp", 5, 10},
		{"quic v5 rm 10", "quic", 5, 10},
		{"tcp v3.1.1", "tcp", 4, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			br := startBridged(t, nil)
			retainN(t, br, n, "v")
			c := connectRM(t, br, tt.transport, "replay", tt.v, tt.rm)
			if code := subscribeQoS(c, "r/#", 1); code != 1 {
				t.Fatalf("SUBACK 0x%02x", code)
			}
			for i := 0; i < n; {
				var pk packets.Packet
				if len(c.pending) > 0 {
					pk, c.pending = c.pending[0], c.pending[1:]
				} else {
					var err error
					if pk, err = c.read(30 * time.Second); err != nil {
						t.Fatalf("after %d of %d (inflight dropped %d): %v", i, n, atomic.LoadInt64(&br.mqtt.MQTT().Info.InflightDropped), err)
					}
				}
				if pk.FixedHeader.Type != packets.Publish {
					t.Fatalf("packet type %d", pk.FixedHeader.Type)
				}
				if !pk.FixedHeader.Retain {
					// The last retained publishes may still be on their way to
					// subscribers (the bridge): a live delivery, not the replay's.
					c.ack(pk)
					continue
				}
				if want := fmt.Sprintf("r/%04d", i); pk.TopicName != want || pk.FixedHeader.Qos != 1 || !pk.FixedHeader.Retain {
					t.Fatalf("delivery %d: %s QoS %d retain %v, want %s QoS 1 retained", i, pk.TopicName, pk.FixedHeader.Qos, pk.FixedHeader.Retain, want)
				}
				c.ack(pk)
				i++
			}
			info := br.mqtt.MQTT().Info
			if d, m := atomic.LoadInt64(&info.InflightDropped), atomic.LoadInt64(&info.MessagesDropped); d != 0 || m != 0 {
				t.Fatalf("dropped: %d inflight, %d messages", d, m)
			}
		})
	}
}

// TestRetainedReplayNonAckers: subscribers that take their Receive
// Maximum of a 2000-message replay and never acknowledge hold the broker
// at their bound (no copy of the rest of the replay), their readers still
// answer, another subscriber gets the whole replay meanwhile, and a
// disconnect ends the replay. mochi held 1019 more deliveries in each
// session (then dropped the rest).
func TestRetainedReplayNonAckers(t *testing.T) {
	const (
		n       = 2000
		stalled = 16
		rm      = 5
		bound   = 96 << 10 // bytes of heap per stalled subscriber (14-22 KB measured; mochi 1.44 MB)
	)
	br := startBridged(t, nil)
	retainN(t, br, n, strings.Repeat("v", 100))
	mq := br.mqtt.MQTT()

	before := heapInuse()
	cs := make([]*rawClient, stalled)
	for i := range cs {
		c := connectRM(t, br, "tcp", fmt.Sprintf("stalled-%d", i), 5, rm)
		if code := subscribeQoS(c, "r/#", 1); code != 1 {
			t.Fatalf("SUBACK 0x%02x", code)
		}
		for len(c.pending) < rm { // its Receive Maximum, not acknowledged
			pk, err := c.read(30 * time.Second)
			if err != nil {
				t.Fatal(err)
			}
			c.pending = append(c.pending, pk)
		}
		cs[i] = c
	}
	held := (heapInuse() - before) / stalled
	t.Logf("%d bytes of heap per subscriber stalled in a replay of %d (both sides of the connection)", held, n)
	if held > bound {
		t.Errorf("%d bytes held per stalled subscriber, bound %d", held, bound)
	}
	if d := atomic.LoadInt64(&mq.Info.InflightDropped); d != 0 {
		t.Errorf("%d deliveries dropped", d)
	}
	// The stalled replays are seen in the metrics.
	var m bytes.Buffer
	br.mqtt.WritePrometheus(&m)
	if want := fmt.Sprintf("\nquiot_mqtt_retained_replays %d\n", stalled); !strings.Contains(m.String(), want) {
		t.Errorf("metrics lack %q:\n%s", strings.TrimSpace(want), m.String())
	}

	// Their readers answer (a PINGREQ; no delivery comes first: none was
	// acknowledged).
	for _, c := range cs {
		c.write(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pingreq}}, (*packets.Packet).PingreqEncode)
		if pk, err := c.read(30 * time.Second); err != nil || pk.FixedHeader.Type != packets.Pingresp {
			t.Fatalf("PINGREQ of a stalled subscriber: %v, packet type %d", err, pk.FixedHeader.Type)
		}
	}

	// Another subscriber is not held up.
	o := connectRM(t, br, "quic", "other", 5, 20)
	if code := subscribeQoS(o, "r/#", 1); code != 1 {
		t.Fatalf("SUBACK 0x%02x", code)
	}
	for range len(o.pending) {
		o.ack(o.pending[0])
		o.pending = o.pending[1:]
	}
	for got := len(o.pending); got < n; got++ {
		pk, err := o.read(30 * time.Second)
		if err != nil {
			t.Fatalf("other subscriber: after %d of %d: %v", got, n, err)
		}
		o.ack(pk)
	}

	// Acknowledged, a stalled subscriber's replay goes on; closed, it ends.
	c := cs[0]
	replayed := 0
	for _, pk := range c.pending {
		c.ack(pk)
		if pk.FixedHeader.Retain {
			replayed++
		}
	}
	for {
		pk, err := c.read(30 * time.Second)
		if err != nil {
			t.Fatalf("after the acknowledgements: %v", err)
		}
		c.ack(pk)
		if !pk.FixedHeader.Retain {
			continue // a live delivery of the last retained publish
		}
		if want := fmt.Sprintf("r/%04d", replayed); pk.TopicName != want {
			t.Fatalf("after the acknowledgements: %q, want %q", pk.TopicName, want)
		}
		break
	}
	for _, c := range cs {
		_ = c.nc.Close()
	}
	waitForCond(t, func() bool { return mq.RetainedReplays() == 0 }, "the replays of the closed subscribers ended")
}

// TestRetainedReplayDoesNotBlockReader: a QoS 0 subscriber that reads
// nothing while a replay larger than its connection's buffers and write
// queue is under way still has its packets handled: its PUBLISH reaches
// another subscriber. mochi ran the replay on the client's packet
// handling, waiting for the writer to make room, so the PUBLISH waited
// for a reader that never came.
func TestRetainedReplayDoesNotBlockReader(t *testing.T) {
	br := startBridged(t, nil)
	const n = 120 // 15 MiB, more than the connection's buffers and the write queue's bytes (4 MiB)
	sys := br.mqtt.MQTT().Topics.Retained.Len()
	payload := bytes.Repeat([]byte("b"), 128<<10)
	for i := range n {
		if _, err := br.h3.Broker.Publish(context.Background(), broker.Message{Topic: fmt.Sprintf("r/%04d", i), Payload: payload, Retain: true}); err != nil {
			t.Fatal(err)
		}
	}
	waitForCond(t, func() bool { return br.mqtt.MQTT().Topics.Retained.Len() == sys+n }, "every message retained on the MQTT side")
	c := connectRM(t, br, "tcp", "silent", 5, 0)
	if code := subscribeQoS(c, "r/#", 0); code != 0 {
		t.Fatalf("SUBACK 0x%02x", code)
	}
	o := connectRM(t, br, "tcp", "other", 5, 0)
	if code := subscribeQoS(o, "x/y", 0); code != 0 {
		t.Fatalf("SUBACK 0x%02x", code)
	}
	// Wait for the replay to stall on the silent subscriber's connection.
	waitForCond(t, func() bool {
		cl, ok := br.mqtt.MQTT().Clients.Get("silent")
		return ok && cl.State.Inflight.Len() == 0 && atomic.LoadInt64(&br.mqtt.MQTT().Info.PendingWriteBytes) > 0
	}, "the replay queued")
	c.write(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish}, TopicName: "x/y", Payload: []byte("through")}, (*packets.Packet).PublishEncode)
	pk, err := o.read(10 * time.Second)
	if err != nil || string(pk.Payload) != "through" {
		t.Fatalf("the silent subscriber's PUBLISH: %v %q", err, pk.Payload)
	}
}
