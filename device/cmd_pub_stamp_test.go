package main

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/quiot/quiot/device/client"
)

// stampClient acknowledges every publish with a send-time stamp taken
// connect after the call on the first publish (connection setup) and at the
// call afterwards.
type stampClient struct {
	mu      sync.Mutex
	n       int
	connect time.Duration
}

func (c *stampClient) Publish(_ context.Context, _ string, _ []byte, _ client.PublishOptions) (client.Ack, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	sent := time.Now()
	if c.n == 1 {
		sent = sent.Add(c.connect)
	}
	return client.Ack{Seq: uint64(c.n), Sent: sent}, nil
}

func (c *stampClient) Subscribe(context.Context, string, uint64, func(client.Message)) error {
	return nil
}
func (c *stampClient) Stats() client.Stats { return client.Stats{} }
func (c *stampClient) Close() error        { return nil }

// TestPublishLoopStampDelays: the publisher records, per call, how long the
// message waited before its send-time stamp (the bench's latency from the
// publish call needs it).
func TestPublishLoopStampDelays(t *testing.T) {
	for _, inflight := range []int{1, 4} {
		c := &stampClient{connect: time.Hour}
		res, err := publishLoop(context.Background(), c, pubPlan{topic: "t", count: 5, inflight: inflight}, slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err != nil {
			t.Fatal(err)
		}
		if len(res.StampDelays) != 5 {
			t.Fatalf("inflight %d: %d stamp delays, want 5", inflight, len(res.StampDelays))
		}
		big := 0
		for _, d := range res.StampDelays {
			if d >= time.Hour {
				big++
			}
		}
		if big != 1 {
			t.Fatalf("inflight %d: delays %v, want one of an hour", inflight, res.StampDelays)
		}
	}
}
