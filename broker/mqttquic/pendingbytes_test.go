package mqttquic

import (
	"strings"
	"testing"
)

// TestLimitQoS0PendingBytes: QoS 0 deliveries waiting to be written to a
// subscriber that does not read are bounded in bytes (Limits.MaxQueuedBytes
// per client). mochi bounded its write queue in packets only, 256 copies of
// the largest packet per client: before the bound, 300 × 256 KiB at QoS 0
// to one such subscriber grew the heap by about 138 MB whatever the bounds
// were set to.
func TestLimitQoS0PendingBytes(t *testing.T) {
	const size, bound = 64 << 10, 256 << 10
	for _, tr := range []string{"tcp", "tls", "quic"} {
		t.Run(tr, func(t *testing.T) {
			b, _ := startSecure(t, aclFile, func(o *Options) { o.Limits.MaxQueuedBytes = bound })
			sub := mustConnect(t, b.mqtt, b.pki, tr, connectOpts{id: "q0-stalled", user: "alice", pass: "tok-alice", clean: true})
			sub.subscribe("a/#") // and never reads again
			pub := mustConnect(t, b.mqtt, b.pki, "tcp", connectOpts{id: "q0-pub", user: "alice", pass: "tok-alice", clean: true})
			payload := strings.Repeat("x", size)
			for i := 0; i < 400 && b.mqtt.Security().DroppedPendingBytes == 0; i++ {
				if _, err := pub.publish("a/x", payload, 0, false); err != nil {
					t.Fatalf("publish %d: %v", i, err)
				}
			}
			waitForCond(t, func() bool { return b.mqtt.Security().DroppedPendingBytes > 0 }, "a QoS 0 delivery dropped for the byte bound")
			if st := b.mqtt.Security(); st.PendingWriteBytes > bound {
				t.Fatalf("%d bytes waiting to be written, bound %d", st.PendingWriteBytes, bound)
			}
			_ = sub.nc.Close()
			waitForCond(t, func() bool { return b.mqtt.Security().PendingWriteBytes == 0 }, "the closed subscriber's bytes given back")
		})
	}
}
