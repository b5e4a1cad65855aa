package netimpair

import (
	"net"
	"testing"
	"time"
)

// TestRelayBlackout: while the link is cut nothing passes either way (and
// every datagram is counted); once restored, both ways work again.
func TestRelayBlackout(t *testing.T) {
	srv := listen(t)
	go echo(srv)
	r := startRelay(t, srv.LocalAddr(), Options{})
	cli := listen(t)
	buf := make([]byte, 100)
	roundTrip := func() bool {
		if _, err := cli.WriteTo([]byte("ping"), r.Addr()); err != nil {
			t.Fatal(err)
		}
		_ = cli.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, _, err := cli.ReadFrom(buf)
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			return false
		}
		if err != nil {
			t.Fatal(err)
		}
		return string(buf[:n]) == "ping"
	}
	if !roundTrip() {
		t.Fatal("no echo before the blackout")
	}
	r.SetBlackout(true)
	for range 3 {
		if _, err := cli.WriteTo([]byte("lost"), r.Addr()); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "three datagrams dropped", func() bool { return r.Stats().Up.DroppedBlackout == 3 })
	if s := r.Stats(); s.Up.Forwarded != 1 || s.Up.Dropped() != 3 {
		t.Fatalf("stats during blackout %+v", s)
	}
	r.SetBlackout(false)
	if !roundTrip() {
		t.Fatal("no echo after the blackout")
	}
	// A datagram the server sends during a blackout is dropped too.
	r.SetBlackout(true)
	if _, err := srv.WriteTo([]byte("late"), mustSessionAddr(t, r)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the down datagram dropped", func() bool { return r.Stats().Down.DroppedBlackout == 1 })
}

// mustSessionAddr returns the relay's upstream socket address of its one
// session (where the server's answers go).
func mustSessionAddr(t *testing.T, r *Relay) net.Addr {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.sessions {
		return s.conn.LocalAddr()
	}
	t.Fatal("no session")
	return nil
}
