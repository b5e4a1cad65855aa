package space_test

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/quiot/quiot/broker/space"
	"github.com/quiot/quiot/internal/topic"
	"github.com/quiot/quiot/internal/wire"
)

// TestHistoryReplayPaced: a paced history replay (since=0 on a/#) with
// publishes and evictions interleaved between its chunks, or running
// beside it, then the live messages from the Subscriber's queue, deliver
// every message of a/# once, in sequence order, or announce it lost: each
// message published on a/# is delivered or inside a gap on its topic (or
// a gap without topic), none delivered is inside a gap of its topic nor
// follows a gap that ends after it (a resume point moves to a gap's end),
// and the losses during the replay (evictions of topics already announced, a
// topic dropped before its turn) are among the gaps. Undisturbed, it gives
// what Subscribe gives at once.
func TestHistoryReplayPaced(t *testing.T) {
	for _, tc := range []struct {
		name       string
		concurrent bool // publish from another goroutine, not between chunks
	}{
		{"interleaved", false},
		{"concurrent", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			l := limits
			l.HistoryPerTopic = 8
			l.HistoryBytes = 50 * (2 + 3 + space.EntryOverhead) // 50 messages of a/N with 2 bytes
			l.QueueLength = 1 << 16
			sp := space.New(space.Config{Limits: l})
			var mu sync.Mutex
			published := map[uint64]string{} // seq: topic, of a/#
			publish := func(name string) {
				seq, err := sp.Publish(ctx, space.Message{Topic: name, Payload: []byte("pp")})
				if err != nil {
					t.Error(err)
					return
				}
				if topic.Match("a/#", name) {
					mu.Lock()
					published[seq] = name
					mu.Unlock()
				}
			}
			// 40 messages on a/0..a/9, a/zz once, 20 more: the first 11 or
			// so are evicted (every a/N has a gap), a/zz is held.
			for i := range 40 {
				publish(fmt.Sprintf("a/%d", i%10))
			}
			publish("a/zz")
			for i := range 20 {
				publish(fmt.Sprintf("a/%d", i%10))
			}
			since := uint64(0)
			_, atOnce, err := sp.Subscribe("a/#", &since, false)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.ContainsFunc(atOnce, func(f wire.Frame) bool { return f.Topic == "a/zz" && !f.IsGap() }) {
				t.Fatal("a/zz not in the history at the start")
			}

			// Undisturbed: the same frames as Subscribe's (topic gaps in
			// the order the topics were created rather than the map's:
			// compared by name).
			sub0, initial0, replay0, err := sp.SubscribePaced("a/#", &since, false)
			if err != nil || len(initial0) != 0 || replay0 == nil {
				t.Fatalf("SubscribePaced: %d frames, %v", len(initial0), err)
			}
			var paced0 []wire.Frame
			for more := true; more; {
				paced0, more = replay0.Next(paced0, 3, 1<<20)
			}
			sp.Unsubscribe(sub0)
			byTopicGapsFirst := func(a, b wire.Frame) int {
				if a.IsGap() && b.IsGap() {
					return cmp.Compare(a.Topic, b.Topic)
				}
				return 0
			}
			want0 := slices.Clone(atOnce)
			slices.SortStableFunc(want0, byTopicGapsFirst)
			slices.SortStableFunc(paced0, byTopicGapsFirst)
			if !slices.EqualFunc(paced0, want0, sameFrame) {
				t.Fatalf("undisturbed paced replay:\n got %v\nwant %v", paced0, want0)
			}

			sub, initial, replay, err := sp.SubscribePaced("a/#", &since, false)
			if err != nil || len(initial) != 0 {
				t.Fatalf("SubscribePaced: %d frames, %v", len(initial), err)
			}
			defer sp.Unsubscribe(sub)
			// Between chunks (or beside them): a message on a/live and one
			// on c/x, evicting the oldest history, a/zz among it.
			disturb := func() {
				publish("a/live")
				publish("c/x")
			}
			var got []wire.Frame
			done := make(chan struct{})
			if tc.concurrent {
				go func() {
					defer close(done)
					for range 60 {
						disturb()
					}
				}()
			}
			burst := false
			for more, i := true, 0; more; i++ {
				var chunk []wire.Frame
				chunk, more = replay.Next(nil, 3, 1<<20)
				if n := countMsgs(chunk); n > 3 {
					t.Fatalf("a chunk of %d messages, asked 3", n)
				}
				got = append(got, chunk...)
				if !tc.concurrent && i == 0 {
					for j := range 30 { // during the topic gaps: a/zz goes
						publish(fmt.Sprintf("c/%d", j))
					}
				}
				if !tc.concurrent && countMsgs(got) > 0 && !burst {
					// In the history part: a/9's held messages, ahead of
					// the replay, go by its topic's bound.
					burst = true
					for range l.HistoryPerTopic {
						publish("a/9")
					}
				}
				if !tc.concurrent && i < 60 {
					disturb()
				}
			}
			if tc.concurrent {
				<-done
			}
			// The live messages: all published by now are queued.
			gaps, msgs, _, _ := sub.Take(nil, nil)
			for _, g := range gaps {
				got = append(got, wire.GapFrame(g))
			}
			for _, m := range msgs {
				got = append(got, wire.Frame{Seq: m.Seq, Topic: m.Topic, Payload: m.Payload})
			}

			delivered := map[uint64]bool{}
			var last, gapEnd uint64 // gapEnd: the highest end of a gap after a message
			var lost []wire.Gap
			for _, f := range got {
				if f.IsGap() {
					g, err := f.Gap()
					if err != nil {
						t.Fatal(err)
					}
					lost = append(lost, g)
					if last > 0 {
						gapEnd = max(gapEnd, g.To)
					}
					continue
				}
				if f.Seq <= last || published[f.Seq] != f.Topic {
					t.Fatalf("message %q seq %d after %d: out of order, repeated or not published", f.Topic, f.Seq, last)
				}
				if f.Seq <= gapEnd {
					// A resume point moved to the gap's end would skip it.
					t.Fatalf("message %q seq %d after a gap up to %d", f.Topic, f.Seq, gapEnd)
				}
				last = f.Seq
				delivered[f.Seq] = true
			}
			inGap := func(name string, seq uint64, anyTopic bool) bool {
				return slices.ContainsFunc(lost, func(g wire.Gap) bool {
					return (g.Topic == name || anyTopic && g.Topic == "") && g.From <= seq && seq <= g.To
				})
			}
			for seq, name := range published {
				switch {
				case delivered[seq] && inGap(name, seq, false):
					t.Errorf("%s seq %d delivered and announced lost", name, seq)
				case !delivered[seq] && !inGap(name, seq, true):
					t.Errorf("%s seq %d neither delivered nor announced lost", name, seq)
				}
			}
			if !tc.concurrent {
				// The losses during the replay were announced: a/zz dropped
				// before its turn, a/0's messages evicted after its gap.
				if !slices.ContainsFunc(lost, func(g wire.Gap) bool { return g.Topic == "a/zz" }) {
					t.Errorf("no gap for a/zz, dropped during the replay: %v", lost)
				}
				if !slices.ContainsFunc(got[slices.IndexFunc(got, func(f wire.Frame) bool { return !f.IsGap() }):], func(f wire.Frame) bool { return f.IsGap() && f.Topic == "a/9" }) {
					t.Errorf("no gap for a/9 during the history part: %v", lost)
				}
				if n := len(lost); n <= 10 {
					t.Errorf("%d gaps, want more than the 10 topic gaps: %v", n, lost)
				}
			}
			t.Logf("%d frames: %d messages delivered of %d published, %d gaps", len(got), len(delivered), len(published), len(lost))
		})
	}
}

func countMsgs(fs []wire.Frame) int {
	n := 0
	for i := range fs {
		if !fs[i].IsGap() {
			n++
		}
	}
	return n
}
