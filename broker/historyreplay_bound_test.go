package broker_test

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/brokertest"
)

// fillHistory publishes messages of size bytes to topics h/000..h/999
// until the history is at its bound (--history-bytes, 16 MiB: about
// 151,000 of 10 bytes) and evicts: each topic then has a gap after 0. It
// returns the messages the history holds.
func fillHistory(tb testing.TB, br *brokertest.Broker, size int) int {
	tb.Helper()
	payload := bytes.Repeat([]byte("h"), size)
	for i := 0; ; i++ {
		if _, err := br.Broker.Publish(context.Background(), broker.Message{Topic: fmt.Sprintf("h/%03d", i%1000), Payload: payload}); err != nil {
			tb.Fatal(err)
		}
		// Past the bound by a round of all topics: each lost its first.
		if i%1000 == 999 || size > 1<<10 && i >= 1000 {
			if held := br.Stats().HistoryMessages; held+1000 <= i+1 {
				return held
			}
		}
	}
}

// TestHistoryReplayBoundedForNonReaders: HTTP/3 subscriptions to # with
// the resume point since=0 that do not read, with the history full of
// small messages (--history-bytes, 16 MiB: about 151,000 of 10 bytes on
// 1000 topics, each with a gap), hold a bounded part of the replay each
// (a chunk and the stream's flow-control window), not the whole history:
// before, each held every history message and topic gap as a frame
// (12.5 MB), outside --queue-bytes. The bound holds whenever it is
// measured (the replay only grows to it), on binary and SSE streams; a
// subscriber that reads gets the gaps, then every message once, in order,
// flagged replayed.
func TestHistoryReplayBoundedForNonReaders(t *testing.T) {
	if testing.Short() {
		t.Skip("fills the history")
	}
	const (
		subscribers = 4
		perSubBound = 4 << 20 // a chunk, the write buffer, QUIC windows on both ends (the client's is in this process)
	)
	br := brokertest.Start(t, nil, nil)
	stored := fillHistory(t, br, 10)
	if stored < 100_000 {
		t.Fatalf("only %d history messages stored", stored)
	}
	for _, sse := range []bool{false, true} {
		t.Run(fmt.Sprintf("sse=%v", sse), func(t *testing.T) {
			before := heapInuse()
			subs := make([]*sub, 0, subscribers)
			for range subscribers {
				subs = append(subs, newClient(t, br, nil).mustSubscribe("#", "since=0", sse)) // headers only: nothing read
			}
			var most int64
			for i := range 5 {
				if i > 0 {
					time.Sleep(50 * time.Millisecond) // the bound must hold at every sample
				}
				held := (heapInuse() - before) / subscribers
				most = max(most, held)
				if held > perSubBound {
					t.Fatalf("%d history messages: %d bytes held per since=0 subscriber that does not read (bound %d)", stored, held, perSubBound)
				}
			}
			t.Logf("%d history messages: at most %d bytes held per since=0 subscriber that does not read", stored, most)
			// A subscriber that reads gets a gap on each topic, then the
			// history in order (on SSE, the first thousand messages: a test
			// kept short).
			s, want := subs[0], stored
			if sse {
				want = 1000
			}
			gaps := map[string]bool{}
			var last uint64
			for got := 0; got < want; {
				f, err := s.next()
				if err != nil {
					t.Fatalf("after %d messages: %v", got, err)
				}
				if f.IsGap() {
					if got > 0 || gaps[f.Topic] {
						t.Fatalf("after %d messages: gap %q (again, or after messages)", got, f.Topic)
					}
					gaps[f.Topic] = true
					continue
				}
				if !f.Replayed() || f.Seq <= last {
					t.Fatalf("after %d messages: %q seq %d (last %d) flags %#x: want replayed, in order", got, f.Topic, f.Seq, last, f.Flags)
				}
				last = f.Seq
				got++
			}
			if len(gaps) != 1000 {
				t.Errorf("%d topic gaps, want 1000", len(gaps))
			}
			for _, s := range subs {
				s.close()
			}
		})
	}
}

// BenchmarkHistoryReplayHTTP: one HTTP/3 subscription to # with since=0
// (binary frames: a gap for each of the 1000 topics, then the whole
// history) with the history at its bound (--history-bytes, 16 MiB), in
// two shapes: the largest payloads (256 KiB) and many small messages (10
// bytes). cpu-ns is the whole process (broker and client) from the
// request until the client read a message published after the replay;
// alloc-B what was allocated meanwhile (the client's decoding included);
// heap-B the live heap once the response began and before the client
// read its body (what the broker holds for a subscriber that does not
// read); received the history messages read, history those held.
func BenchmarkHistoryReplayHTTP(b *testing.B) {
	for _, shape := range []struct {
		name    string
		payload int
	}{{"256KiB", 256<<10 - 64}, {"10B", 10}} {
		b.Run(shape.name, func(b *testing.B) {
			br := brokertest.Start(b, nil, nil)
			stored := fillHistory(b, br, shape.payload)
			b.Logf("%d history messages, %d bytes", stored, br.Stats().HistoryBytes)
			b.ResetTimer()
			for range b.N {
				c := newClient(b, br, nil)
				history := br.Stats().HistoryMessages // earlier runs' "end" evicted some
				var ms runtime.MemStats
				before := heapInuse()
				runtime.ReadMemStats(&ms)
				alloc, cpu := ms.TotalAlloc, cpuTime()
				s := c.mustSubscribe("#", "since=0", false)
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
					if f.Topic == "end" && !f.Replayed() { // the live one, not an earlier run's
						break
					}
					if f.Replayed() {
						received++
					}
				}
				elapsed := cpuTime() - cpu
				runtime.ReadMemStats(&ms)
				b.ReportMetric(float64(elapsed), "cpu-ns/subscribe")
				b.ReportMetric(float64(ms.TotalAlloc-alloc), "alloc-B/subscribe")
				b.ReportMetric(float64(held), "heap-B")
				b.ReportMetric(float64(received), "received")
				b.ReportMetric(float64(history), "history")
				s.close()
			}
		})
	}
}
