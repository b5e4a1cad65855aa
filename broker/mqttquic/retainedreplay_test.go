package mqttquic

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/quiot/quiot/broker"
)

// TestRetainedReplayComplete: a subscriber that reads gets every retained
// message its filter matches, also when they are more than its write queue
// holds (256 packets) or more bytes than --mqtt-max-queued-bytes (4 MiB).
// mochi queued the whole replay at once and dropped what did not fit: a
// subscriber to # over a full retained store got a few per cent of it.
func TestRetainedReplayComplete(t *testing.T) {
	for _, tt := range []struct {
		name    string
		n, size int
	}{
		{"600 small", 600, 10},
		{"40 of 200 KiB", 40, 200 << 10},
	} {
		t.Run(tt.name, func(t *testing.T) {
			br := startBridged(t, nil)
			sys := br.mqtt.MQTT().Topics.Retained.Len() // mochi's own $SYS topics
			payload := bytes.Repeat([]byte("r"), tt.size)
			for i := range tt.n {
				if _, err := br.h3.Broker.Publish(context.Background(), broker.Message{Topic: fmt.Sprintf("r/%04d", i), Payload: payload, Retain: true}); err != nil {
					t.Fatal(err)
				}
			}
			waitForCond(t, func() bool { return br.mqtt.MQTT().Topics.Retained.Len() == sys+tt.n }, "every message retained on the MQTT side")
			c := mustConnect(t, br.mqtt, br.pki, "tcp", connectOpts{id: "replay", clean: true})
			if got := c.subscribe("r/#"); got[0] > 1 {
				t.Fatalf("SUBACK %x", got)
			}
			got := map[string]bool{}
			for _, pk := range c.pending {
				got[pk.TopicName] = true
			}
			for len(got) < tt.n {
				pk, err := c.read(30 * time.Second)
				if err != nil {
					t.Fatalf("after %d of %d retained messages (dropped %d): %v", len(got), tt.n, br.mqtt.MQTT().Info.MessagesDropped, err)
				}
				if pk.FixedHeader.Type == packets.Publish {
					c.ack(pk)
					if len(pk.Payload) != tt.size {
						t.Fatalf("%s: %d bytes, want %d", pk.TopicName, len(pk.Payload), tt.size)
					}
					got[pk.TopicName] = true
				}
			}
			if d := br.mqtt.MQTT().Info.MessagesDropped; d != 0 {
				t.Fatalf("%d deliveries dropped", d)
			}
		})
	}
}
