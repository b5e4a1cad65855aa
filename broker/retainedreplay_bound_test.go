package broker_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/brokertest"
)

// TestRetainedReplayBoundedForNonReaders: HTTP/3 subscriptions to # that
// do not read, with the retained store full of small messages
// (--retained-bytes, 16 MiB: about 147,000 of 10 bytes), hold a bounded
// part of the replay each (a chunk and the stream's flow-control window),
// not the whole retained set: before, each held every retained message
// as a frame (12.5 MB), outside --queue-bytes. The bound holds whenever
// it is measured (the replay only grows to it), on binary and SSE streams.
func TestRetainedReplayBoundedForNonReaders(t *testing.T) {
	if testing.Short() {
		t.Skip("fills the retained store")
	}
	const (
		subscribers = 4
		perSubBound = 4 << 20 // a chunk, the write buffer, QUIC windows on both ends (the client's is in this process)
	)
	br := brokertest.Start(t, nil, nil)
	payload := bytes.Repeat([]byte("r"), 10)
	stored := 0
	for {
		_, err := br.Broker.Publish(context.Background(), broker.Message{Topic: fmt.Sprintf("r/%06d", stored), Payload: payload, Retain: true})
		if errors.Is(err, broker.ErrRetainedFull) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		stored++
	}
	if stored < 100_000 {
		t.Fatalf("only %d retained messages stored", stored)
	}
	for _, sse := range []bool{false, true} {
		t.Run(fmt.Sprintf("sse=%v", sse), func(t *testing.T) {
			before := heapInuse()
			subs := make([]*sub, 0, subscribers)
			for range subscribers {
				subs = append(subs, newClient(t, br, nil).mustSubscribe("#", "", sse)) // headers only: nothing read
			}
			// The response began for each: the replay is under way, held by
			// the stream's flow control. Sample until it has had time to
			// fill the windows (the bound must hold at every sample).
			var most int64
			for i := range 5 {
				if i > 0 {
					time.Sleep(50 * time.Millisecond)
				}
				held := (heapInuse() - before) / subscribers
				most = max(most, held)
				if held > perSubBound {
					t.Fatalf("%d retained messages: %d bytes held per subscriber that does not read (bound %d)", stored, held, perSubBound)
				}
			}
			t.Logf("%d retained messages: at most %d bytes held per subscriber that does not read", stored, most)
			// A subscriber that reads still gets every retained message (on
			// SSE, the same replay, the first thousand: a test kept short).
			s, want := subs[0], stored
			if sse {
				want = 1000
			}
			for got := 0; got < want; got++ {
				f, err := s.next()
				if err != nil {
					t.Fatalf("after %d retained messages: %v", got, err)
				}
				if !f.Retained() {
					t.Fatalf("after %d retained messages: a frame not retained (%q)", got, f.Topic)
				}
			}
			for _, s := range subs {
				s.close()
			}
		})
	}
}
