package probehold

import (
	"net"
	"sync"
	"testing"
	"time"
)

// recConn records what was written and returns one datagram on ReadFrom.
type recConn struct {
	net.PacketConn
	mu      sync.Mutex
	written int
	last    []byte // the last datagram written
	closed  bool
}

func (c *recConn) WriteTo(p []byte, _ net.Addr) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.written++
	c.last = append([]byte(nil), p...)
	return len(p), nil
}
func (c *recConn) ReadFrom(p []byte) (int, net.Addr, error) { return 1, nil, nil }
func (c *recConn) Close() error                             { c.closed = true; return nil }

// fakeTimers replaces the Conn's timers with ones fired by hand.
type fakeTimers struct {
	now    *time.Time
	timers []*fakeTimer
}

type fakeTimer struct {
	at      time.Time
	f       func()
	stopped bool
}

func (ft *fakeTimers) afterFunc(d time.Duration, f func()) func() {
	t := &fakeTimer{at: ft.now.Add(d), f: f}
	ft.timers = append(ft.timers, t)
	return func() { t.stopped = true }
}

// fire runs the timers due by now that were not stopped.
func (ft *fakeTimers) fire() {
	for _, t := range ft.timers {
		if !t.stopped && !t.at.After(*ft.now) {
			t.stopped = true
			t.f()
		}
	}
}

// TestHold: probes within the hold after a flight are held (reported as
// sent), 1-RTT datagrams never; an answer from the peer opens the next
// flight at once.
func TestHold(t *testing.T) {
	long := []byte{0xc0, 1, 2}  // a long-header (handshake) datagram
	short := []byte{0x40, 1, 2} // a short-header (1-RTT) datagram
	now := time.Unix(1000, 0)
	rc := &recConn{}
	g := New(rc, time.Second)
	g.now = func() time.Time { return now }
	g.afterFunc = (&fakeTimers{now: &now}).afterFunc // fired by no one here
	steps := []struct {
		at   time.Duration
		p    []byte
		sent bool
	}{
		{0, long, true},                        // the first flight
		{5 * time.Millisecond, long, true},     // ... its second datagram
		{200 * time.Millisecond, long, false},  // quic-go's first probe: held
		{600 * time.Millisecond, long, false},  // second probe: held
		{600 * time.Millisecond, short, true},  // never held
		{1400 * time.Millisecond, long, true},  // after the hold: a new flight
		{1410 * time.Millisecond, long, true},  // ... and its second datagram
		{1500 * time.Millisecond, long, false}, // held again
	}
	start := now
	for i, s := range steps {
		now = start.Add(s.at)
		before := rc.written
		if _, err := g.WriteTo(s.p, nil); err != nil {
			t.Fatal(err)
		}
		if sent := rc.written > before; sent != s.sent {
			t.Fatalf("step %d (+%v): sent %v, want %v", i, s.at, sent, s.sent)
		}
	}
	if g.held != 3 {
		t.Fatalf("held %d, want 3", g.held)
	}
	// An answer from the peer opens the next flight at once (the client's
	// Finished after the broker's first flight) ...
	if _, _, err := g.ReadFrom(make([]byte, 10)); err != nil {
		t.Fatal(err)
	}
	for i, s := range []struct {
		at   time.Duration
		sent bool
	}{
		{1510 * time.Millisecond, true},  // the answered flight
		{1520 * time.Millisecond, true},  // ... within its gap
		{1700 * time.Millisecond, false}, // a Handshake-level probe: held
		{2100 * time.Millisecond, false}, // and the next
		{2520 * time.Millisecond, true},  // after the hold
	} {
		now = start.Add(s.at)
		before := rc.written
		if _, err := g.WriteTo(long, nil); err != nil {
			t.Fatal(err)
		}
		if sent := rc.written > before; sent != s.sent {
			t.Fatalf("after an answer, step %d (+%v): sent %v, want %v", i, s.at, sent, s.sent)
		}
	}
	// ... and a probe after an answer passes too.
	if _, _, err := g.ReadFrom(make([]byte, 10)); err != nil {
		t.Fatal(err)
	}
	now = now.Add(100 * time.Millisecond)
	before := rc.written
	if _, err := g.WriteTo(long, nil); err != nil || rc.written != before+1 {
		t.Fatalf("after a second answer: written %d, want %d (%v)", rc.written, before+1, err)
	}
	if g.held != 5 {
		t.Fatalf("held %d, want 5", g.held)
	}
}

// TestReleaseWhenHoldEnds: when a hold ends without an answer, the newest
// datagram held goes out at once and opens the next flight and hold (so
// quic-go's next probe falls inside it); an answer, a probe of quic-go's
// after the hold, or Close drops what is held.
func TestReleaseWhenHoldEnds(t *testing.T) {
	ms := time.Millisecond
	dg := func(n byte) []byte { return []byte{0xc0, n} } // long-header datagram n
	type step struct {
		at   time.Duration
		op   string // "send", "recv", "fire", "close"
		p    []byte
		pass bool // "send": reached the socket; "fire": a held one did
	}
	for _, tc := range []struct {
		name     string
		steps    []step
		wrote    int
		last     []byte // the last datagram written
		released int
	}{
		{name: "unanswered: the newest held goes when the hold ends", steps: []step{
			{0, "send", dg(1), true},         // the first flight
			{5 * ms, "send", dg(2), true},    // ... its second datagram
			{200 * ms, "send", dg(3), false}, // quic-go's probes: held
			{600 * ms, "send", dg(4), false},
			{1400 * ms, "send", dg(5), false},
			{1999 * ms, "fire", nil, false},
			{2000 * ms, "fire", nil, true},    // dg(5) goes
			{2005 * ms, "send", dg(6), false}, // no flight gap after a release
			{3000 * ms, "send", dg(7), false}, // quic-go's next probe: in the new hold
			{4000 * ms, "fire", nil, true},    // unanswered again: dg(7) goes
		}, wrote: 4, last: dg(7), released: 2},
		{name: "a 0-RTT datagram held is no probe: the newest probe goes", steps: []step{
			{0, "send", dg(1), true},
			{200 * ms, "send", dg(2), false},
			{300 * ms, "send", []byte{0xd0, 0, 0, 0, 1, 9}, false}, // 0-RTT, QUIC v1
			{2000 * ms, "fire", nil, true},
		}, wrote: 2, last: dg(2), released: 1},
		{name: "an answer within the hold drops what is held", steps: []step{
			{0, "send", dg(1), true},
			{200 * ms, "send", dg(2), false},
			{1500 * ms, "recv", nil, false},
			{2000 * ms, "fire", nil, false},
			{2100 * ms, "send", dg(3), true}, // the answered flight
		}, wrote: 2, last: dg(3)},
		{name: "a probe of quic-go's after the hold takes the held one's place", steps: []step{
			{0, "send", dg(1), true},
			{200 * ms, "send", dg(2), false},
			{2000 * ms, "send", dg(3), true},
			{2000 * ms, "fire", nil, false},
		}, wrote: 2, last: dg(3)},
		{name: "close drops what is held", steps: []step{
			{0, "send", dg(1), true},
			{200 * ms, "send", dg(2), false},
			{300 * ms, "close", nil, false},
			{2000 * ms, "fire", nil, false},
		}, wrote: 1, last: dg(1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Unix(1000, 0)
			now := start
			ft := &fakeTimers{now: &now}
			rc := &recConn{}
			g := New(rc, 2*time.Second)
			g.now = func() time.Time { return now }
			g.afterFunc = ft.afterFunc
			for i, s := range tc.steps {
				now = start.Add(s.at)
				switch s.op {
				case "send":
					before := rc.written
					if n, err := g.WriteTo(s.p, nil); err != nil || n != len(s.p) {
						t.Fatalf("step %d: WriteTo = %d, %v", i, n, err)
					}
					if sent := rc.written > before; sent != s.pass {
						t.Fatalf("step %d (+%v): sent %v, want %v", i, s.at, sent, s.pass)
					}
				case "recv":
					if _, _, err := g.ReadFrom(make([]byte, 10)); err != nil {
						t.Fatal(err)
					}
				case "fire":
					before := rc.written
					ft.fire()
					if sent := rc.written > before; sent != s.pass {
						t.Fatalf("step %d (+%v): timers sent %v, want %v", i, s.at, sent, s.pass)
					}
				case "close":
					if err := g.Close(); err != nil || !rc.closed {
						t.Fatalf("Close = %v, socket closed %v", err, rc.closed)
					}
				}
			}
			if rc.written != tc.wrote || string(rc.last) != string(tc.last) {
				t.Errorf("%d datagrams written, the last %x; want %d, the last %x", rc.written, rc.last, tc.wrote, tc.last)
			}
			if got := g.Released(); got != tc.released {
				t.Errorf("released %d, want %d", got, tc.released)
			}
		})
	}
}
