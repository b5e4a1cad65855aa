package space_test

import (
	"context"
	"errors"
	"testing"

	"github.com/quiot/quiot/broker/space"
)

// limits are small bounds for tests, as broker.Options would set them.
var limits = space.Limits{
	MaxPayload: 1024, MaxTopicLength: 64, MaxTopicLevels: 8,
	HistoryPerTopic: 8, HistoryBytes: 1 << 20, RetainedBytes: 1 << 20,
	QueueLength: 16, QueueBytes: 1 << 20, QueueBytesTotal: 1 << 20,
}

// TestPublishSubscribe: a space without a broker numbers messages, keeps
// history and retained messages, and gives a new subscription the retained
// messages, a resuming one the history after its point, then live messages.
func TestPublishSubscribe(t *testing.T) {
	var in []string
	sp := space.New(space.Config{Limits: limits, CountIn: func(o string) { in = append(in, o) }})
	ctx := context.Background()
	for i, m := range []space.Message{
		{Topic: "a/1", Payload: []byte("r1"), Retain: true, Origin: "h3"},
		{Topic: "a/2", Payload: []byte("x"), Origin: "mqtt"},
		{Topic: "a/1", Payload: []byte("r2"), Retain: true, Origin: "h3"},
	} {
		seq, err := sp.Publish(ctx, m)
		if err != nil || seq != uint64(i+1) {
			t.Fatalf("publish %d: seq %d, %v", i, seq, err)
		}
	}
	if len(in) != 3 || in[1] != "mqtt" {
		t.Fatalf("CountIn calls %v", in)
	}
	sub, first, err := sp.Subscribe("a/#", nil, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(first) != 1 || first[0].Seq != 3 || string(first[0].Payload) != "r2" {
		t.Fatalf("retained on subscribe: %+v", first)
	}
	since := uint64(1)
	res, hist, err := sp.Subscribe("a/#", &since, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(hist) != 2 || hist[0].Seq != 2 || hist[1].Seq != 3 {
		t.Fatalf("history after 1: %+v", hist)
	}
	if _, err := sp.Publish(ctx, space.Message{Topic: "a/3", Payload: []byte("live")}); err != nil {
		t.Fatal(err)
	}
	for _, s := range []*space.Subscriber{sub, res} {
		<-s.Notify()
		_, msgs, end, _ := s.Take(nil, nil)
		if len(msgs) != 1 || msgs[0].Seq != 4 || end {
			t.Fatalf("live: %d messages, end %v", len(msgs), end)
		}
		s.Written()
		sp.Unsubscribe(s)
	}
	st := sp.Stats()
	if st.LastSeq != 4 || st.Retained != 1 || st.HistoryMessages != 4 || st.Topics != 3 || st.Subscriptions != 0 {
		t.Fatalf("stats %+v", st)
	}
	sp.Shutdown()
	if _, err := sp.Publish(ctx, space.Message{Topic: "a"}); !errors.Is(err, space.ErrShuttingDown) {
		t.Fatalf("publish after shutdown: %v", err)
	}
}

// TestApplySequenced: a message the cluster numbered goes into history and
// the retained message either way; only a live one reaches subscribers and
// taps; a number already applied is refused.
func TestApplySequenced(t *testing.T) {
	tests := []struct {
		name       string
		live       bool
		wantQueued int
		wantTaps   int
	}{
		{"live", true, 1, 1},
		{"history only", false, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sp := space.New(space.Config{Limits: limits})
			taps := 0
			sp.AddTap(func(*space.Message) { taps++ })
			sub, _, err := sp.Subscribe("t", nil, false)
			if err != nil {
				t.Fatal(err)
			}
			apply := sp.ApplySequencedHistory
			if tt.live {
				apply = sp.ApplySequenced
			}
			m := space.Message{Topic: "t", Payload: []byte("p"), Retain: true, Origin: space.OriginCluster}
			if err := apply(m, 7); err != nil {
				t.Fatal(err)
			}
			if err := apply(m, 7); !errors.Is(err, space.ErrOutOfOrder) {
				t.Fatalf("same number again: %v", err)
			}
			_, msgs, _, _ := sub.Take(nil, nil)
			if len(msgs) != tt.wantQueued || taps != tt.wantTaps {
				t.Fatalf("queued %d, taps %d; want %d, %d", len(msgs), taps, tt.wantQueued, tt.wantTaps)
			}
			if r := sp.RetainedMessages(); len(r) != 1 || r[0].Seq != 7 {
				t.Fatalf("retained %+v", r)
			}
			if h, last := sp.HistoryAfter(0); len(h) != 1 || h[0].Seq != 7 || last != 7 {
				t.Fatalf("history %+v, last %d", h, last)
			}
		})
	}
}
