package mqttquic

import (
	"testing"
)

// TestQueuedBytesEveryTransport: a connected QoS 1 subscriber that never
// reads holds at most MaxQueuedBytes in the broker, whatever path it
// reached the broker by (TestLimitQueuedBytes: an offline session over
// MQTT/TCP): of five 403-byte messages, three are queued for it (0, 403
// and 806 bytes held are below the 1000-byte bound) and two dropped and
// counted; once it reads and acknowledges them, nothing is held.
func TestQueuedBytesEveryTransport(t *testing.T) {
	const size = 400 // + 3 bytes of topic
	for _, tr := range pathTransports {
		t.Run(tr, func(t *testing.T) {
			b := startPaths(t, func(o *Options) { o.Limits.MaxQueuedBytes = 1000 })
			id := "stalled-" + tr
			sub := mustPathConnect(t, b.mqtt, b.h3.Broker, b.pki, tr, pathOpts{}, connectOpts{id: id, user: "alice", pass: "tok-alice", clean: true})
			if codes := sub.subscribe("a/#"); len(codes) != 1 || codes[0] != 1 {
				t.Fatalf("subscribe a/#: %x", codes)
			}
			// The subscriber reads nothing from here on.
			publishN(t, b, 5, size)
			waitForCond(t, func() bool { return b.mqtt.Security().DroppedQueueFull >= 2 }, "two messages dropped")
			if n := queued(b.mqtt, id); n != 3 {
				t.Fatalf("queued %d messages, want 3", n)
			}
			if st := b.mqtt.Security(); st.DroppedQueueFull != 2 || st.QueuedBytes != 3*(size+3) {
				t.Errorf("DroppedQueueFull = %d, QueuedBytes = %d, want 2, %d", st.DroppedQueueFull, st.QueuedBytes, 3*(size+3))
			}
			for range 3 {
				sub.next()
			}
			waitForCond(t, func() bool { return b.mqtt.Security().QueuedBytes == 0 }, "acknowledged messages uncounted")
		})
	}
}
