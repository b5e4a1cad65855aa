package space_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/quiot/quiot/broker/space"
	"github.com/quiot/quiot/internal/wire"
)

// TestRetainedReplayPaced: a paced subscription reads its retained
// messages in chunks of the asked size, in sequence order, matching its
// filter; messages replaced or cleared during the replay are not replayed
// (the replacements are live), nor are retained messages published after
// the subscription started; the index's compaction loses nothing; and the
// whole replay is what Subscribe returns at once.
func TestRetainedReplayPaced(t *testing.T) {
	ctx := context.Background()
	sp := space.New(space.Config{Limits: limits})
	retain := func(topic, payload string) {
		t.Helper()
		if _, err := sp.Publish(ctx, space.Message{Topic: topic, Payload: []byte(payload), Retain: true}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 200 {
		retain(fmt.Sprintf("a/%03d", i), "v1")
	}
	retain("b/x", "v1")

	_, all, err := sp.Subscribe("a/#", nil, false)
	if err != nil {
		t.Fatal(err)
	}
	sub, initial, replay, err := sp.SubscribePaced("a/#", nil, false)
	if err != nil || len(initial) != 0 || replay == nil {
		t.Fatalf("SubscribePaced: %d frames, replay %v, %v", len(initial), replay, err)
	}
	defer sp.Unsubscribe(sub)
	first, more := replay.Next(nil, 16, 1<<20)
	if len(first) != 16 || !more || !slices.EqualFunc(first, all[:16], sameFrame) {
		t.Fatalf("first chunk: %d frames (more %v), want the first 16 of Subscribe's", len(first), more)
	}
	if byBytes, _ := replay.Next(nil, 100, 1); len(byBytes) != 1 || byBytes[0].Topic != "a/016" {
		t.Fatalf("a chunk of 1 byte: %d frames, want the next one", len(byBytes))
	}

	retain("a/050", "v2") // replaced: live, not replayed
	retain("a/060", "")   // cleared
	retain("a/new", "v1") // published after the subscription started
	for range 3 {         // replaced, enough to compact the index
		for i := 100; i < 200; i++ {
			retain(fmt.Sprintf("a/%03d", i), "v2")
		}
	}
	var rest []wire.Frame
	for more := true; more; {
		var chunk []wire.Frame
		chunk, more = replay.Next(nil, 7, 1<<20)
		if len(chunk) > 7 {
			t.Fatalf("a chunk of %d frames, asked 7", len(chunk))
		}
		rest = append(rest, chunk...)
	}
	var want []string
	for i := 17; i < 100; i++ {
		if i != 50 && i != 60 {
			want = append(want, fmt.Sprintf("a/%03d", i))
		}
	}
	var got []string
	for _, f := range rest {
		if f.Flags&wire.FlagRetained == 0 || string(f.Payload) != "v1" {
			t.Errorf("%s: flags %#x payload %q", f.Topic, f.Flags, f.Payload)
		}
		got = append(got, f.Topic)
	}
	if !slices.Equal(got, want) {
		t.Errorf("rest of the replay:\n got %v\nwant %v", got, want)
	}
	if more, _ := replay.Next(nil, 10, 10); len(more) != 0 {
		t.Errorf("after the end: %d frames", len(more))
	}

	// A new subscription replays the current retained messages, in order.
	_, now, _ := sp.Subscribe("a/#", nil, false)
	sub2, _, replay2, _ := sp.SubscribePaced("a/#", nil, false)
	defer sp.Unsubscribe(sub2)
	var paced []wire.Frame
	for more := true; more; {
		paced, more = replay2.Next(paced, 13, 1<<20)
	}
	if !slices.EqualFunc(paced, now, sameFrame) {
		t.Errorf("paced replay of %d frames differs from Subscribe's %d", len(paced), len(now))
	}
}

func sameFrame(a, b wire.Frame) bool {
	return a.Seq == b.Seq && a.Topic == b.Topic && string(a.Payload) == string(b.Payload) && a.Flags == b.Flags
}
