package broker_test

import (
	"bufio"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/brokertest"
	"github.com/quiot/quiot/internal/quictune"
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
				Tuning: &quictune.Profile{SessionResumption: true, MaxIdleTimeout: quictune.Duration(5 * time.Minute)},
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

// TestCutOffSubscriberReadingAgain: a subscriber over HTTP/1.1 that the
// Disconnect queue policy cut off while it was not reading, and that reads
// again within Limits.IdleTimeout, gets the final gap and the end of its
// response, and its kept-alive connection serves the next request.
func TestCutOffSubscriberReadingAgain(t *testing.T) {
	b := brokertest.Start(t, nil, &broker.Options{
		Limits: broker.Limits{QueueBytes: 1 << 20, QueuePolicy: broker.Disconnect, HistoryPerTopic: -1, IdleTimeout: time.Minute},
	})
	pub := newClient(t, b, nil)
	c, err := tinyRcvBuf(b, "http/1.1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(60 * time.Second)) // bounds a hang only
	if _, err := io.WriteString(c, "GET /v1/topics/big HTTP/1.1\r\nHost: localhost\r\nAccept: text/event-stream\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReaderSize(c, 512)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("subscribe: %v %v", resp, err)
	}
	eventually(t, "the subscription", func() bool { return b.Stats().Subscriptions == 1 })
	payload := strings.Repeat("p", 256<<10)
	for range 20 {
		pub.mustPublish("big", payload, "qos=0")
	}
	if st := b.Stats(); st.CutOff != 1 {
		t.Fatalf("not cut off: %+v", st)
	}
	if err := untilGap(resp.Body, true); err != nil {
		t.Fatalf("no final gap: %v", err)
	}
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		t.Fatalf("the cut-off response did not end cleanly: %v", err)
	}
	resp.Body.Close()
	if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err = http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("next request on the connection: %v %v", resp, err)
	}
	resp.Body.Close()
}
