package broker_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/brokertest"
	"github.com/quiot/quiot/internal/wire"
)

// fillRetained publishes retained messages of size bytes to topics
// r/000000, r/000001, ... until the retained store is full
// (--retained-bytes, 16 MiB: about 147,000 of 10 bytes) and returns how
// many it holds.
func fillRetained(tb testing.TB, br *brokertest.Broker, size int) int {
	tb.Helper()
	payload := bytes.Repeat([]byte("r"), size)
	for stored := 0; ; stored++ {
		_, err := br.Broker.Publish(context.Background(), broker.Message{Topic: fmt.Sprintf("r/%06d", stored), Payload: payload, Retain: true})
		if errors.Is(err, broker.ErrRetainedFull) {
			return stored
		}
		if err != nil {
			tb.Fatal(err)
		}
	}
}

// heldByNonReaders opens n subscriptions to # with query that read
// nothing after the headers, while the replay is under way and held by
// the streams' flow control, and samples the heap five times: it fails
// when a subscriber holds more than bound bytes at any sample (the replay
// only grows to it). what names the replay in messages. It returns the
// subscriptions, for the caller to read and close.
func heldByNonReaders(t *testing.T, br *brokertest.Broker, query string, sse bool, n int, bound int64, what string) []*sub {
	t.Helper()
	before := heapInuse()
	subs := make([]*sub, 0, n)
	for range n {
		subs = append(subs, newClient(t, br, nil).mustSubscribe("#", query, sse)) // headers only: nothing read
	}
	var most int64
	for i := range 5 {
		if i > 0 {
			time.Sleep(50 * time.Millisecond) // time for the replay to fill the windows; the bound holds at every sample
		}
		held := (heapInuse() - before) / int64(n)
		most = max(most, held)
		if held > bound {
			t.Fatalf("%s: %d bytes held per subscriber (%s) that does not read (bound %d)", what, held, query, bound)
		}
	}
	t.Logf("%s: at most %d bytes held per subscriber (%s) that does not read", what, most, query)
	return subs
}

// measureReplay subscribes to # with query (binary frames), publishes
// "end" once the response began, and reads until isEnd: it reports
// cpu-ns (the whole process, broker and client, from the request until
// the end), alloc-B (allocated meanwhile, the client's decoding
// included), heap-B (the live heap once the response began and before
// the client read its body: what the broker holds for a subscriber that
// does not read) and received (the frames counted).
func measureReplay(b *testing.B, br *brokertest.Broker, query string, isEnd, counted func(wire.Frame) bool) {
	b.Helper()
	c := newClient(b, br, nil)
	var ms runtime.MemStats
	before := heapInuse()
	runtime.ReadMemStats(&ms)
	alloc, cpu := ms.TotalAlloc, cpuTime()
	s := c.mustSubscribe("#", query, false)
	held := heapInuse() - before
	if _, err := br.Broker.Publish(context.Background(), broker.Message{Topic: "end", Payload: []byte("end")}); err != nil {
		b.Fatal(err)
	}
	received := 0
	for {
		f, err := s.dec.Frame()
		if err != nil {
			b.Fatal(err)
		}
		if isEnd(f) {
			break
		}
		if counted(f) {
			received++
		}
	}
	elapsed := cpuTime() - cpu
	runtime.ReadMemStats(&ms)
	b.ReportMetric(float64(elapsed), "cpu-ns/subscribe")
	b.ReportMetric(float64(ms.TotalAlloc-alloc), "alloc-B/subscribe")
	b.ReportMetric(float64(held), "heap-B")
	b.ReportMetric(float64(received), "received")
	s.close()
}
