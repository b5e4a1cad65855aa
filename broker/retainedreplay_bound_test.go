package broker_test

import (
	"fmt"
	"testing"

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
	stored := fillRetained(t, br, 10)
	if stored < 100_000 {
		t.Fatalf("only %d retained messages stored", stored)
	}
	for _, sse := range []bool{false, true} {
		t.Run(fmt.Sprintf("sse=%v", sse), func(t *testing.T) {
			subs := heldByNonReaders(t, br, "", sse, subscribers, perSubBound, fmt.Sprintf("%d retained messages", stored))
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
