package broker_test

import (
	"runtime"
	"strings"
	"testing"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/brokertest"
	"github.com/quiot/quiot/internal/testutil"
)

// TestStalledSubscribersHoldBoundedBytes: HTTP subscribers that never
// read, fed large payloads, hold at most Limits.QueueBytes each (before,
// 1024 messages of 256 KiB each: 256 MiB a subscription); the losses are
// counted and announced as a gap (issue 27 finding 2).
func TestStalledSubscribersHoldBoundedBytes(t *testing.T) {
	const (
		payloadSize = 256 << 10
		perSub      = 1 << 20
		n           = 100 // 25 MiB published
	)
	b := brokertest.Start(t, nil, &broker.Options{Limits: broker.Limits{QueueBytes: perSub, QueueBytesTotal: 2 * perSub, HistoryPerTopic: -1}})
	pub := newClient(t, b, nil)
	var stalled []*sub
	for range 2 {
		c := newClient(t, b, nil)
		// A tiny flow-control window: the broker's writes block at once.
		c.c = testutil.H3ClientQUIC(b.PKI.Pool(), nil, nil, &quic.Config{
			InitialStreamReceiveWindow: 8 << 10, MaxStreamReceiveWindow: 8 << 10,
			InitialConnectionReceiveWindow: 16 << 10, MaxConnectionReceiveWindow: 16 << 10,
		})
		t.Cleanup(func() { c.c.Transport.(*http3.Transport).Close() })
		stalled = append(stalled, c.mustSubscribe("big", "", false))
	}
	// Each subscriber: its queue and the batch its blocked write holds
	// (both within perSub, counted together), plus the encoded copy.
	publishToStalled(t, b, pub, n, payloadSize, perSub, 8*perSub)
	// When it reads at last, a stalled subscriber learns of its losses.
	for i, s := range stalled {
		for {
			f, err := s.next()
			if err != nil {
				t.Fatalf("subscriber %d: no gap: %v", i, err)
			}
			if f.IsGap() {
				break
			}
		}
	}
}

// publishToStalled publishes n messages of size bytes to "big", whose
// subscribers do not read, and checks that none queues more than perSub
// bytes, that the losses are counted, and that the heap grows by at most
// maxGrowth.
func publishToStalled(t *testing.T, b *brokertest.Broker, pub *client, n, size, perSub, maxGrowth int) {
	t.Helper()
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	base := ms.HeapAlloc
	payload := strings.Repeat("p", size)
	for range n {
		pub.mustPublish("big", payload, "qos=0")
	}
	st := b.Stats()
	if st.QueueDepthMax*size > perSub {
		t.Errorf("a stalled subscriber queues %d messages of %d bytes, beyond its bound of %d bytes", st.QueueDepthMax, size, perSub)
	}
	if st.Dropped == 0 {
		t.Errorf("nothing dropped: %+v", st)
	}
	runtime.GC()
	runtime.ReadMemStats(&ms)
	grown := int64(ms.HeapAlloc) - int64(base)
	t.Logf("heap grew by %d bytes; queue depth max %d, dropped %d", grown, st.QueueDepthMax, st.Dropped)
	if grown > int64(maxGrowth) {
		t.Errorf("heap grew by %d bytes for %d bytes published; want at most %d", grown, n*size, maxGrowth)
	}
}
