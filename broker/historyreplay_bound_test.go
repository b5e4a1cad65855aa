package broker_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/brokertest"
)

// fillHistory publishes 10-byte messages to topics h/000..h/999 until the
// history is at its bound (--history-bytes, 16 MiB: about 151,000) and
// evicts: each topic then has a gap after 0. It returns the messages the
// history holds.
func fillHistory(tb testing.TB, br *brokertest.Broker) int {
	tb.Helper()
	payload := bytes.Repeat([]byte("h"), 10)
	for i := 0; ; i++ {
		if _, err := br.Broker.Publish(context.Background(), broker.Message{Topic: fmt.Sprintf("h/%03d", i%1000), Payload: payload}); err != nil {
			tb.Fatal(err)
		}
		// Past the bound by a round of all topics: each lost its first.
		if i%1000 == 999 {
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
	stored := fillHistory(t, br)
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
