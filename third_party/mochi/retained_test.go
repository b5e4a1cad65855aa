// SPDX-License-Identifier: MIT

package mqtt

import (
	"fmt"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
)

// TestMatchRetained: matchRetained, and fewRetained's walk of the
// filter's branch, select the retained messages mochi's
// walk of the tree (TopicsIndex.Messages) selects, for filters with
// wildcards over a mix of topics ($SYS and other $ topics, empty levels,
// parents and children).
func TestMatchRetained(t *testing.T) {
	topics := []string{
		"a", "a/b", "a/b/c", "a/b/c/d", "a/x/c", "a//c", "a/", "/a", "/", "b/b/c",
		"$SYS/broker/uptime", "$SYS", "$x/y", "$x", "sys/a", "a/b/cd", "ab/b/c",
	}
	x := NewTopicsIndex()
	for _, topic := range topics {
		x.RetainMessage(packets.Packet{TopicName: topic, Payload: []byte("p"), FixedHeader: packets.FixedHeader{Retain: true}})
	}
	for _, filter := range []string{
		"#", "+", "+/+", "+/#", "a/#", "a/+", "a/+/c", "a/+/#", "+/b/c", "$SYS/#", "$SYS/+/uptime",
		"$x/#", "+/+/+/+", "/#", "/+", "a//#", "a/b/#", "a/b/+", "+/", "a/b/c/#", "x/#",
	} {
		t.Run(filter, func(t *testing.T) {
			var want, got []string
			for _, pk := range x.Messages(filter) {
				want = append(want, pk.TopicName)
			}
			for _, topic := range topics {
				if matchRetained(filter, topic) {
					got = append(got, topic)
				}
			}
			sort.Strings(want)
			sort.Strings(got)
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("matchRetained %v, Messages %v", got, want)
			}
			few, ok := x.fewRetained(filter, x.order.last(), len(topics))
			sort.Strings(few)
			if !ok || fmt.Sprint(few) != fmt.Sprint(want) {
				t.Fatalf("fewRetained %v %v, Messages %v", few, ok, want)
			}
		})
	}
}

// TestFewRetainedBesideRetain: the walk of a filter's branch beside
// retains and clears in that branch (which trim the tree) neither
// deadlocks nor races.
func TestFewRetainedBesideRetain(t *testing.T) {
	x := NewTopicsIndex()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 20000; i++ {
			payload := "v"
			if i%2 == 1 {
				payload = ""
			}
			x.RetainMessage(packets.Packet{TopicName: fmt.Sprintf("s/%d/x", i%7), Payload: []byte(payload), FixedHeader: packets.FixedHeader{Retain: true}})
		}
	}()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case <-done:
			return
		case <-deadline:
			t.Fatal("deadlocked")
		default:
		}
		if _, ok := x.fewRetained("s/+/x", x.order.last(), 64); !ok {
			t.Fatal("more than 64 in the branch")
		}
	}
}

// TestRetainedIndexOrder: the index walks the retained messages in the
// order retained (a replaced one at its new place, a cleared one not at
// all), a chunk at a time from a cursor, up to a limit, and compacts its
// stubs.
func TestRetainedIndexOrder(t *testing.T) {
	x := NewTopicsIndex()
	retain := func(topic, payload string) {
		x.RetainMessage(packets.Packet{TopicName: topic, Payload: []byte(payload), FixedHeader: packets.FixedHeader{Retain: true}})
	}
	for i := 0; i < 1000; i++ {
		retain(fmt.Sprintf("r/%04d", i), "v")
	}
	for i := 0; i < 1000; i += 2 {
		retain(fmt.Sprintf("r/%04d", i), "") // cleared
	}
	retain("r/0001", "again") // to the end
	limit := x.order.last()
	retain("r/late", "v") // after the limit

	var got []string
	var cursor uint64
	for walked := false; !walked; {
		var chunk []string
		chunk, cursor, _, walked = x.order.next("r/#", cursor, limit, nil, 7, replayScan)
		if len(chunk) > 7 {
			t.Fatalf("chunk of %d", len(chunk))
		}
		got = append(got, chunk...)
	}
	var want []string
	for i := 3; i < 1000; i += 2 {
		want = append(want, fmt.Sprintf("r/%04d", i))
	}
	want = append(want, "r/0001")
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("walked %d topics %v..., want %d %v...", len(got), got[:3], len(want), want[:3])
	}
	if n, stubs := len(x.order.entries), x.order.stubs; n-stubs != 501 || stubs > n/2 {
		t.Fatalf("%d entries, %d stubs: not compacted", n, stubs)
	}

	x.clearRetained("r/0003") // expired
	if _, ok := x.Retained.Get("r/0003"); ok {
		t.Fatal("r/0003 still retained")
	}
	chunk, _, _, _ := x.order.next("r/#", 0, x.order.last(), nil, 1, replayScan)
	if len(chunk) != 1 || chunk[0] != "r/0005" {
		t.Fatalf("after clearing r/0003 the walk starts at %v", chunk)
	}
}

// TestRetainedReplayWaitsForPuback: a QoS 1 replay larger than the
// client's Receive Maximum sends that many, continues as PUBACKs come
// (the reader handles them meanwhile), in the order retained, and leaves
// nothing in the session beyond the Receive Maximum; a message replaced
// during the replay is not replayed in its old form.
func TestRetainedReplayWaitsForPuback(t *testing.T) {
	s := newServer()
	s.Options.Capabilities.MaximumInflight = 100
	conn := newDiscardConn()
	cl := s.NewClient(conn, "t", "c", false)
	cl.Properties.ProtocolVersion = 5
	cl.State.Inflight.ResetSendQuota(4)
	const n = 300
	for i := 0; i < n; i++ {
		s.Topics.RetainMessage(packets.Packet{TopicName: fmt.Sprintf("r/%04d", i), Payload: []byte("v"), FixedHeader: packets.FixedHeader{Retain: true, Qos: 1}})
	}
	sub := packets.Subscription{Filter: "r/#", Qos: 1}
	s.Topics.Subscribe(cl.ID, sub)
	cl.State.Subscriptions.Add(sub.Filter, sub)

	s.publishRetainedToClient(cl, sub, false)
	if got := cl.State.Inflight.Len(); got != 4 {
		t.Fatalf("%d in flight after the first step, want the Receive Maximum 4", got)
	}
	if s.RetainedReplays() != 1 {
		t.Fatal("no replay waiting")
	}
	// Replaced before the replay reaches it: its old form is not replayed.
	s.Topics.RetainMessage(packets.Packet{TopicName: "r/0200", Payload: []byte("new"), FixedHeader: packets.FixedHeader{Retain: true, Qos: 1}})

	var got []string
	for len(got) < n-1 {
		waitFor(t, func() bool { return cl.State.Inflight.Len() > 0 }, "a delivery in flight")
		if l := cl.State.Inflight.Len(); l > 4 {
			t.Fatalf("%d in flight, Receive Maximum 4", l)
		}
		for _, pk := range cl.State.Inflight.GetAll(false) {
			if pk.Expiry < 0 {
				t.Fatalf("%s held in the session", pk.TopicName)
			}
		}
		pks := cl.State.Inflight.GetAll(false)
		sort.Slice(pks, func(i, j int) bool { return pks[i].PacketID < pks[j].PacketID })
		for _, pk := range pks {
			got = append(got, pk.TopicName)
			if err := s.processPacket(cl, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Puback}, PacketID: pk.PacketID}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i, topic := range got {
		want := fmt.Sprintf("r/%04d", i)
		if i >= 200 {
			want = fmt.Sprintf("r/%04d", i+1)
		}
		if topic != want {
			t.Fatalf("delivery %d: %s, want %s", i, topic, want)
		}
	}
	waitFor(t, func() bool { return s.RetainedReplays() == 0 }, "the replay done")
	if d := atomic.LoadInt64(&s.Info.InflightDropped); d != 0 {
		t.Fatalf("%d dropped", d)
	}
}

// TestRetainedReplayEndsOnDisconnect: a replay waiting for PUBACKs that
// never come ends when the client does, and so does one whose
// subscription is gone (UNSUBSCRIBE).
func TestRetainedReplayEndsOnDisconnect(t *testing.T) {
	for _, end := range []string{"disconnect", "unsubscribe"} {
		t.Run(end, func(t *testing.T) {
			s := newServer()
			conn := newDiscardConn()
			cl := s.NewClient(conn, "t", "c", false)
			cl.Properties.ProtocolVersion = 5
			cl.State.Inflight.ResetSendQuota(2)
			for i := 0; i < 100; i++ {
				s.Topics.RetainMessage(packets.Packet{TopicName: fmt.Sprintf("r/%04d", i), Payload: []byte("v"), FixedHeader: packets.FixedHeader{Retain: true, Qos: 1}})
			}
			sub := packets.Subscription{Filter: "r/#", Qos: 1}
			s.Topics.Subscribe(cl.ID, sub)
			cl.State.Subscriptions.Add(sub.Filter, sub)
			s.publishRetainedToClient(cl, sub, false)
			if s.RetainedReplays() != 1 {
				t.Fatal("no replay waiting")
			}
			if end == "disconnect" {
				cl.Stop(nil)
			} else {
				cl.State.Subscriptions.Delete(sub.Filter)
				for _, pk := range cl.State.Inflight.GetAll(false) {
					_ = s.processPacket(cl, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Puback}, PacketID: pk.PacketID})
				}
			}
			waitFor(t, func() bool { return s.RetainedReplays() == 0 }, "the replay ended")
			if _, ok := s.replays.m.Load(cl); ok {
				t.Fatal("the replayer is still registered")
			}
		})
	}
}

// TestRetainedReplayResubscribe: a SUBSCRIBE to a filter whose replay is
// under way starts it again (the retained messages are sent at every
// SUBSCRIBE, MQTT-3.3.1-9), replacing the one under way rather than
// queueing a second.
func TestRetainedReplayResubscribe(t *testing.T) {
	s := newServer()
	cl := s.NewClient(newDiscardConn(), "t", "c", false)
	cl.Properties.ProtocolVersion = 5
	cl.State.Inflight.ResetSendQuota(1)
	for i := 0; i < 10; i++ {
		s.Topics.RetainMessage(packets.Packet{TopicName: fmt.Sprintf("r/%04d", i), Payload: []byte("v"), FixedHeader: packets.FixedHeader{Retain: true, Qos: 1}})
	}
	sub := packets.Subscription{Filter: "r/#", Qos: 1}
	s.Topics.Subscribe(cl.ID, sub)
	cl.State.Subscriptions.Add(sub.Filter, sub)
	for i := 0; i < 50; i++ {
		s.publishRetainedToClient(cl, sub, true)
	}
	v, ok := s.replays.m.Load(cl)
	if !ok {
		t.Fatal("no replay waiting")
	}
	s.replays.mu.Lock()
	queued := len(v.(*replayer).queue)
	s.replays.mu.Unlock()
	if queued > 2 {
		t.Fatalf("%d replays queued for one filter", queued)
	}
	cl.Stop(nil)
	waitFor(t, func() bool { return s.RetainedReplays() == 0 }, "the replay ended")
}

// waitFor polls cond (cheap state reads) until it holds, failing after
// 10 s: it waits for an event, it does not time anything.
func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestRetainedReplayStepBounded: one step of a replay examines at most
// replayScan retained messages, however few of them match (the step
// run on the client's packet handling right after SUBACK stays short);
// the following steps finish the walk.
func TestRetainedReplayStepBounded(t *testing.T) {
	s := newServer()
	count := new(retainedCounter)
	_ = s.AddHook(count, nil)
	cl := s.NewClient(newDiscardConn(), "t", "c", false)
	cl.Properties.ProtocolVersion = 5
	retain := func(topic string) {
		s.Topics.RetainMessage(packets.Packet{TopicName: topic, Payload: []byte("v"), FixedHeader: packets.FixedHeader{Retain: true}})
	}
	for i := 0; i < 100; i++ {
		retain(fmt.Sprintf("s/%04d", i))
	}
	for i := 0; i < 3*replayScan; i++ {
		retain(fmt.Sprintf("r/%05d", i))
	}
	retain("s/last")
	sub := packets.Subscription{Filter: "s/#"}
	s.Topics.Subscribe(cl.ID, sub)
	cl.State.Subscriptions.Add(sub.Filter, sub)
	if _, ok := s.Topics.fewRetained(sub.Filter, s.Topics.order.last(), replayChunk); ok {
		t.Fatal("the branch is small enough to be picked from the tree")
	}
	r := &retainedReplay{sub: sub, limit: s.Topics.order.last()}
	if st := r.step(s, cl, false); st != replayMore || r.walked {
		t.Fatalf("first step: %v, walked %v", st, r.walked)
	}
	if got := count.n.Load(); got != 100 {
		t.Fatalf("first step sent %d, want the 100 among the first %d", got, replayScan)
	}
	steps := 1
	for r.step(s, cl, true) != replayDone {
		steps++
	}
	if got := count.n.Load(); got != 101 || steps < 3 {
		t.Fatalf("%d sent in %d steps", got, steps)
	}
}
