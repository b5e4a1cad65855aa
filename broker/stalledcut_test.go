package broker_test

import (
	"strings"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/brokertest"
)

// TestStalledSubscriberCutOff: with the Disconnect queue policy
// (--queue-policy disconnect), a subscriber that never reads is cut off
// once its queue is full, and its subscription and stream end once
// Limits.IdleTimeout (--idle-timeout) has passed, on every HTTP path:
// binary and EventSource over HTTP/1.1 and HTTP/2 on TCP, EventSource
// over HTTP/3. Before, the broker counted it as cut off but its handler
// stayed blocked in a write that never ended (the client's TCP window, or
// its QUIC flow-control credit, spent): the subscription, its connection
// and the batch being written were held as long as the client kept its
// connection open. The QUIC idle timeouts are long here, so that only the
// cut off can end the HTTP/3 stream. (A cut-off subscriber that reads
// again within IdleTimeout still gets its final gap:
// TestSlowSubscriberDoesNotDelayFast.)
func TestStalledSubscriberCutOff(t *testing.T) {
	const payloadSize = 256 << 10
	for _, tc := range []struct {
		name string
		sub  func(t *testing.T, b *brokertest.Broker) stalledSub
	}{
		{"tcp http/1.1 binary", stalledH1(false)},
		{"tcp http/1.1 sse", stalledH1(true)},
		{"tcp h2 binary", stalledH2(false)},
		{"tcp h2 sse", stalledH2(true)},
		{"h3 sse", stalledH3SSE},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // each waits out its IdleTimeout
			b := brokertest.Start(t, nil, &broker.Options{
				Limits: broker.Limits{QueueBytes: 1 << 20, QueuePolicy: broker.Disconnect, HistoryPerTopic: -1, IdleTimeout: 300 * time.Millisecond},
				QUIC:   &quic.Config{MaxIdleTimeout: 5 * time.Minute},
			})
			pub := newClient(t, b, nil)
			tc.sub(t, b)
			eventually(t, "the subscription", func() bool { return b.Stats().Subscriptions == 1 })
			payload := strings.Repeat("p", payloadSize)
			for range 20 {
				pub.mustPublish("big", payload, "qos=0")
			}
			if st := b.Stats(); st.CutOff != 1 {
				t.Fatalf("not cut off: %+v", st)
			}
			eventually(t, "the cut-off subscription to end", func() bool { return b.Stats().Subscriptions == 0 })
		})
	}
}
