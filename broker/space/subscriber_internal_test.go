package space

import "testing"

// TestSubscriberQueueBytes: a subscriber's queue is bounded in bytes
// (Limits.QueueBytes), the batch being written included, and all queues
// together (Limits.QueueBytesTotal); a full queue drops the oldest (the
// new message when none is queued) with a gap, or cuts the subscriber with
// the disconnect policy; a stopped subscriber gives its bytes back (issue
// 27 finding 2).
func TestSubscriberQueueBytes(t *testing.T) {
	msg := func(seq uint64) *Message { return &Message{Topic: "a", Seq: seq, Payload: make([]byte, 1000)} }
	cost := msgCost(msg(0))
	t.Run("per subscriber", func(t *testing.T) {
		c := &counters{}
		s := newSubscriber("a", Limits{QueueLength: 100, QueueBytes: 3 * cost}, c)
		for i := uint64(1); i <= 10; i++ {
			s.enqueue(msg(i))
		}
		gaps, msgs, end, cut := s.Take(nil, nil)
		if len(msgs) != 3 || msgs[0].Seq != 8 || end || cut {
			t.Fatalf("msgs %d end %v cut %v", len(msgs), end, cut)
		}
		if len(gaps) != 1 || gaps[0].From != 1 || gaps[0].To != 7 || c.dropped.Load() != 7 {
			t.Fatalf("gaps %+v dropped %d", gaps, c.dropped.Load())
		}
		// The taken batch still counts until written: a new message finds
		// the queue full and, with nothing queued to drop, is lost itself.
		s.enqueue(msg(11))
		gaps, msgs, _, _ = s.Take(nil, nil)
		if len(msgs) != 0 || len(gaps) != 1 || gaps[0].From != 11 || gaps[0].To != 11 {
			t.Fatalf("while writing: msgs %d gaps %+v", len(msgs), gaps)
		}
		s.Written()
		s.enqueue(msg(12))
		if _, msgs, _, _ = s.Take(nil, nil); len(msgs) != 1 || s.bytes != cost {
			t.Fatalf("after written: msgs %d bytes %d", len(msgs), s.bytes)
		}
	})
	t.Run("total", func(t *testing.T) {
		c := &counters{}
		total := &byteBudget{max: 4 * cost}
		l := Limits{QueueLength: 100, QueueBytes: 3 * cost}
		s1, s2 := newSubscriber("a", l, c), newSubscriber("a", l, c)
		s1.total, s2.total = total, total
		for i := uint64(1); i <= 3; i++ {
			s1.enqueue(msg(i))
		}
		for i := uint64(1); i <= 3; i++ {
			s2.enqueue(msg(i))
		}
		if n := total.n.Load(); n != 4*cost || s1.bytes != 3*cost || s2.bytes != cost {
			t.Fatalf("total %d, s1 %d, s2 %d (cost %d)", n, s1.bytes, s2.bytes, cost)
		}
		gaps, msgs, _, _ := s2.Take(nil, nil)
		if len(msgs) != 1 || msgs[0].Seq != 3 || len(gaps) != 1 || gaps[0].From != 1 || gaps[0].To != 2 {
			t.Fatalf("s2: msgs %+v gaps %+v", msgs, gaps)
		}
		s1.release()
		s2.release()
		if n := total.n.Load(); n != 0 {
			t.Fatalf("total after release %d", n)
		}
	})
	t.Run("disconnect", func(t *testing.T) {
		c := &counters{}
		s := newSubscriber("a", Limits{QueueLength: 100, QueueBytes: 2 * cost, QueuePolicy: Disconnect}, c)
		for i := uint64(1); i <= 3; i++ {
			s.enqueue(msg(i))
		}
		if _, msgs, end, cut := s.Take(nil, nil); len(msgs) != 2 || !end || !cut || c.cutOff.Load() != 1 {
			t.Fatalf("msgs %d end %v cut %v cutOff %d", len(msgs), end, cut, c.cutOff.Load())
		}
	})
}

func TestSubscriberQueueBound(t *testing.T) {
	c := &counters{}
	s := newSubscriber("a", Limits{QueueLength: 4}, c)
	for i := 1; i <= 10; i++ {
		s.enqueue(&Message{Topic: "a", Seq: uint64(i)})
	}
	gaps, msgs, end, cut := s.Take(nil, nil)
	if len(msgs) != 4 || msgs[0].Seq != 7 || end || cut {
		t.Fatalf("msgs %d first %d end %v cut %v", len(msgs), msgs[0].Seq, end, cut)
	}
	if len(gaps) != 1 || gaps[0].From != 1 || gaps[0].To != 6 || gaps[0].Topic != "a" {
		t.Fatalf("gaps %+v", gaps)
	}
	if c.dropped.Load() != 6 {
		t.Fatalf("dropped %d", c.dropped.Load())
	}
	d := newSubscriber("a", Limits{QueueLength: 2, QueuePolicy: Disconnect}, c)
	for i := 1; i <= 3; i++ {
		d.enqueue(&Message{Topic: "a", Seq: uint64(i)})
	}
	if _, msgs, end, cut := d.Take(nil, nil); len(msgs) != 2 || !end || !cut {
		t.Fatalf("disconnect policy: %d %v %v", len(msgs), end, cut)
	}
}
