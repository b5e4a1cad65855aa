package broker_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/brokertest"
	"github.com/quiot/quiot/internal/wire"
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
			subs := heldByNonReaders(t, br, "since=0", sse, subscribers, perSubBound, fmt.Sprintf("%d history messages", stored))
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
				history := br.Stats().HistoryMessages // earlier runs' "end" evicted some
				measureReplay(b, br, "since=0",
					func(f wire.Frame) bool { return f.Topic == "end" && !f.Replayed() }, // the live one, not an earlier run's
					func(f wire.Frame) bool { return f.Replayed() })
				b.ReportMetric(float64(history), "history")
			}
		})
	}
}
