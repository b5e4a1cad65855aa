package cluster_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/cluster"
	"github.com/quiot/quiot/internal/testutil"
	"github.com/quiot/quiot/internal/wire"
)

// pacedRange is what a resume on p/# reads from the stream in
// TestClusterReplayPaced: the frames expected, in order.
type pacedRange struct {
	since, to uint64
	want      []wire.Frame // gaps (Topic, From in Payload, To in Seq) and messages (Seq)
}

// readPaced reads a replay to its end in chunks of at most maxMsgs frames
// and maxBytes (beyond the first frame), checking each chunk's bounds;
// after is called once after the first chunk.
func readPaced(t *testing.T, r broker.ClusterReplay, maxMsgs, maxBytes int, after func()) []wire.Frame {
	t.Helper()
	var all, chunk []wire.Frame
	for more, n := true, 0; more; n++ {
		var err error
		chunk, more, err = r.Next(chunk[:0], maxMsgs, maxBytes)
		if err != nil {
			t.Fatalf("chunk %d: %v", n, err)
		}
		bytes := 0
		for i, f := range chunk {
			if i > 0 && bytes >= maxBytes {
				t.Fatalf("chunk %d: frame %d beyond %d bytes", n, i, maxBytes)
			}
			bytes += len(f.Payload) + len(f.Topic)
		}
		if len(chunk) > maxMsgs {
			t.Fatalf("chunk %d: %d frames, at most %d asked", n, len(chunk), maxMsgs)
		}
		all = append(all, chunk...)
		if n == 0 && after != nil {
			after()
		}
	}
	if chunk, more, err := r.Next(nil, maxMsgs, maxBytes); len(chunk) > 0 || more || err != nil {
		t.Fatalf("after the end: %d frames, more %v, %v", len(chunk), more, err)
	}
	return all
}

// sameFrames checks got against want: gaps by topic and range, messages
// by sequence number and payload.
func sameFrames(t *testing.T, got, want []wire.Frame) {
	t.Helper()
	for i := range max(len(got), len(want)) {
		if i >= len(got) || i >= len(want) {
			t.Fatalf("%d frames, want %d", len(got), len(want))
		}
		g, w := got[i], want[i]
		if g.IsGap() != w.IsGap() || g.Seq != w.Seq || g.Topic != w.Topic || !bytes.Equal(g.Payload, w.Payload) {
			t.Fatalf("frame %d: %+v (payload %q), want %+v (payload %q)", i, g, g.Payload, w, w.Payload)
		}
	}
}

// TestClusterReplayPaced: a resume's replay from the stream, read in
// chunks of every size (one frame; a few; a few bytes, so that a fetch
// is cut; the broker's own), gives the same frames as one read: the gap
// of a topic whose oldest messages the stream dropped to its per-topic
// bound first, then every message of the range once, in order, across
// the chunk boundaries. Messages the stream drops while the replay waits
// between chunks are announced by a gap without topic where they were,
// after every message before them.
func TestClusterReplayPaced(t *testing.T) {
	t.Parallel()
	nc := startNATS(t, 1)
	pki := testutil.NewPKI(t)
	a := startNode(t, pki, "a", nc.urls(), func(bo *broker.Options, co *cluster.Options) {
		co.Replicas = 1
		bo.Limits.HistoryPerTopic = 50 // the stream keeps 50 messages per topic too
	})
	// 10 rounds of one message on each of 30 topics, then 8 on p/busy:
	// the stream drops the first 30 of p/busy.
	type sent struct {
		seq          uint64
		topic, value string
	}
	var all []sent
	busy := 0
	for round := range 10 {
		for i := range 30 {
			all = append(all, sent{topic: fmt.Sprintf("p/t%02d", i), value: fmt.Sprintf("r%d t%d", round, i)})
		}
		for range 8 {
			all = append(all, sent{topic: "p/busy", value: fmt.Sprintf("b%d", busy)})
			busy++
		}
	}
	for i := range all {
		seq, err := a.b.Broker.Publish(context.Background(), broker.Message{Topic: all[i].topic, Payload: []byte(all[i].value), QoS: 1})
		if err != nil || seq == 0 {
			t.Fatalf("publish %d: seq %d, %v", i, seq, err)
		}
		all[i].seq = seq
	}
	firstBusy := uint64(0) // the oldest p/busy message the stream holds: b30
	for _, m := range all {
		if m.value == "b30" {
			firstBusy = m.seq
		}
	}
	expect := func(since, to uint64, busyGap bool) []wire.Frame {
		var want []wire.Frame
		if busyGap {
			want = append(want, wire.GapFrame(wire.Gap{Topic: "p/busy", From: since + 1, To: firstBusy - 1}))
		}
		for _, m := range all {
			if m.seq > since && m.seq <= to && (m.topic != "p/busy" || m.seq >= firstBusy) {
				want = append(want, wire.Frame{Seq: m.seq, Topic: m.topic, Payload: []byte(m.value)})
			}
		}
		return want
	}
	last := all[len(all)-1].seq
	mid := all[len(all)/2].seq
	ranges := map[string]pacedRange{
		"all":        {0, last, expect(0, last, true)},
		"to middle":  {0, mid, expect(0, mid, true)},
		"from round": {all[5*38].seq - 1, last, expect(all[5*38].seq-1, last, false)}, // p/busy: 40 after it, under the bound
	}
	for _, shape := range []struct {
		name              string
		maxMsgs, maxBytes int
	}{{"1", 1, 1 << 20}, {"7", 7, 1 << 20}, {"bytes", 64, 40}, {"broker", 256, 64 << 10}} {
		for name, rg := range ranges {
			t.Run(shape.name+"/"+name, func(t *testing.T) {
				r, err := a.link.Replay("p/#", rg.since, rg.to)
				if err != nil {
					t.Fatal(err)
				}
				defer r.Close()
				sameFrames(t, readPaced(t, r, shape.maxMsgs, shape.maxBytes, nil), rg.want)
			})
		}
	}

	t.Run("dropped meanwhile", func(t *testing.T) {
		r, err := a.link.Replay("p/#", 0, last)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		// After the first chunk (the p/busy gap), the second (10 messages),
		// the stream drops everything below the 100th message.
		cut := all[100].seq
		var got []wire.Frame
		chunk, _, err := r.Next(nil, 10, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, chunk...)
		chunk, _, err = r.Next(nil, 10, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, chunk...)
		purgeBelow(t, nc, cut)
		got = append(got, readPaced(t, r, 10, 1<<20, nil)...)
		want := expect(0, all[9].seq, true)
		want = append(want, wire.GapFrame(wire.Gap{From: all[9].seq + 1, To: cut - 1}))
		want = append(want, expect(cut-1, last, false)...)
		sameFrames(t, got, want)
	})
}

// purgeBelow removes the history stream's messages numbered below seq.
func purgeBelow(t *testing.T, nc *natsCluster, seq uint64) {
	t.Helper()
	conn, err := nats.Connect(nc.urls())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	js, _ := jetstream.New(conn)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	str, err := js.Stream(ctx, "quiot_history")
	if err != nil {
		t.Fatal(err)
	}
	if err := str.Purge(ctx, jetstream.WithPurgeSequence(seq)); err != nil {
		t.Fatal(err)
	}
}
