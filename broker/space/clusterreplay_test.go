package space_test

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/quiot/quiot/broker/space"
	"github.com/quiot/quiot/internal/wire"
)

// fakeCoverer is a sequencing link whose cluster holds messages 1..upTo
// of topic t (the space holds what comes after): Cover reports first
// (every message from it is applied here) and Replay serves the range
// from fakeReplay.
type fakeCoverer struct {
	upTo, first uint64
	failAt      int // Next call (1-based) that fails; 0: none

	mu       sync.Mutex
	replays  []*fakeReplay
	interest map[string]int
}

func (f *fakeCoverer) Forward(*space.Message) space.Commit { return nil }
func (f *fakeCoverer) Interest(filter string, delta int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.interest == nil {
		f.interest = map[string]int{}
	}
	f.interest[filter] += delta
}
func (f *fakeCoverer) Sequencing() bool { return true }
func (f *fakeCoverer) Cover(string) (from, old uint64, release func(), err error) {
	return f.first, f.upTo, func() {}, nil
}
func (f *fakeCoverer) Replay(_ string, since, to uint64) (space.ClusterReplay, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := &fakeReplay{next: since + 1, to: to, failAt: f.failAt}
	f.replays = append(f.replays, r)
	return r, nil
}

// fakeReplay serves messages next..to of topic t, counting its calls.
type fakeReplay struct {
	next, to uint64
	failAt   int
	calls    int
	closed   bool
}

func (r *fakeReplay) Next(dst []wire.Frame, maxMsgs, _ int) ([]wire.Frame, bool, error) {
	r.calls++
	if r.closed {
		return dst, false, nil
	}
	if r.calls == r.failAt {
		return dst, false, errors.New("cluster unreachable")
	}
	for n := 0; n < maxMsgs && r.next <= r.to; n++ {
		dst = append(dst, wire.Frame{Seq: r.next, Topic: "t", Payload: fmt.Appendf(nil, "m%d", r.next)})
		r.next++
	}
	return dst, r.next <= r.to, nil
}

func (r *fakeReplay) Close() { r.closed = true }

// clusterSpace is a sequenced space whose link's cluster holds 1..10 of
// topic t and which applied 11..15 itself.
func clusterSpace(t *testing.T, failAt int) (*space.Space, *fakeCoverer) {
	t.Helper()
	fc := &fakeCoverer{upTo: 10, first: 11, failAt: failAt}
	sp := space.New(space.Config{Limits: limits, Federation: fc})
	for seq := uint64(11); seq <= 15; seq++ {
		if err := sp.ApplySequencedHistory(space.Message{Topic: "t", Payload: fmt.Appendf(nil, "m%d", seq), Origin: space.OriginCluster}, seq); err != nil {
			t.Fatal(err)
		}
	}
	return sp, fc
}

// TestClusterReplayPacedInSpace: a paced resume from before what the
// space holds reads the cluster's part only as the replay is read, a
// chunk at a time, then the space's history, every message once, in
// order; an unpaced one gets it all at once; a failure reading the
// cluster ends the replay there (nothing of the history after it, so the
// subscriber's resume point does not pass what it missed); ending the
// subscription closes the cluster's part.
func TestClusterReplayPacedInSpace(t *testing.T) {
	since := uint64(0)
	seqs := func(fs []wire.Frame) []uint64 {
		var out []uint64
		for _, f := range fs {
			out = append(out, f.Seq)
		}
		return out
	}
	all := []uint64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}

	t.Run("paced", func(t *testing.T) {
		sp, fc := clusterSpace(t, 0)
		sub, initial, replay, err := sp.SubscribePaced("t", &since, false)
		if err != nil {
			t.Fatal(err)
		}
		if len(initial) != 0 || len(fc.replays) != 1 || fc.replays[0].calls != 0 {
			t.Fatalf("before the replay is read: %d initial frames, %d replays, %d reads of the cluster", len(initial), len(fc.replays), fc.replays[0].calls)
		}
		var got []wire.Frame
		for more, n := true, 0; more; n++ {
			var chunk []wire.Frame
			chunk, more = replay.Next(nil, 3, 1<<20)
			if len(chunk) > 3 {
				t.Fatalf("chunk %d: %d frames", n, len(chunk))
			}
			got = append(got, chunk...)
			if c := fc.replays[0].calls; len(got) < 10 && c != n+1 { // one read of the cluster a chunk
				t.Fatalf("after chunk %d: %d reads of the cluster", n, c)
			}
		}
		if !slices.Equal(seqs(got), all) || space.ReplayErr(replay) != nil {
			t.Fatalf("replayed %v (%v), want %v", seqs(got), space.ReplayErr(replay), all)
		}
		if !fc.replays[0].closed {
			t.Fatal("the cluster's part not closed once read")
		}
		sp.Unsubscribe(sub)
	})

	t.Run("unpaced", func(t *testing.T) {
		sp, _ := clusterSpace(t, 0)
		sub, initial, err := sp.Subscribe("t", &since, false)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(seqs(initial), all) {
			t.Fatalf("initial %v, want %v", seqs(initial), all)
		}
		sp.Unsubscribe(sub)
	})

	t.Run("failure", func(t *testing.T) {
		sp, _ := clusterSpace(t, 2)
		sub, _, replay, err := sp.SubscribePaced("t", &since, false)
		if err != nil {
			t.Fatal(err)
		}
		var got []wire.Frame
		for more := true; more; {
			var chunk []wire.Frame
			chunk, more = replay.Next(nil, 3, 1<<20)
			got = append(got, chunk...)
		}
		if !slices.Equal(seqs(got), []uint64{1, 2, 3}) || space.ReplayErr(replay) == nil {
			t.Fatalf("replayed %v (%v), want 1..3 and an error", seqs(got), space.ReplayErr(replay))
		}
		sp.Unsubscribe(sub)
	})

	t.Run("unsubscribed", func(t *testing.T) {
		sp, fc := clusterSpace(t, 0)
		sub, _, replay, err := sp.SubscribePaced("t", &since, false)
		if err != nil {
			t.Fatal(err)
		}
		replay.Next(nil, 3, 1<<20)
		sp.Unsubscribe(sub)
		if !fc.replays[0].closed {
			t.Fatal("the cluster's part not closed with the subscription")
		}
	})
}
