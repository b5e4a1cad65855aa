package probehold

import (
	"net"
	"testing"
	"time"
)

// recConn records what was written and returns one datagram on ReadFrom.
type recConn struct {
	net.PacketConn
	written int
}

func (c *recConn) WriteTo(p []byte, _ net.Addr) (int, error) { c.written++; return len(p), nil }
func (c *recConn) ReadFrom(p []byte) (int, net.Addr, error)  { return 1, nil, nil }

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
