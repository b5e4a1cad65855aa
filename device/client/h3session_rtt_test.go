package client

import (
	"context"
	"crypto/tls"
	"testing"
	"time"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/brokertest"
	"github.com/quiot/quiot/internal/quictune"
	"github.com/quiot/quiot/internal/testutil"
)

// TestHandshakeHoldDefault: which RTT the handshake probe hold starts from.
func TestHandshakeHoldDefault(t *testing.T) {
	file := t.TempDir() + "/session.json"
	withRTT := NewFileSessionCache(file, testutil.DiscardLogger())
	withRTT.(RTTMemory).SetLastRTT("b:443", 1500*time.Millisecond)
	set := quictune.Lean()
	set.HandshakeRTT = quictune.Duration(2 * time.Second)
	for _, tc := range []struct {
		name        string
		o           Options
		want        time.Duration
		fromSession bool
	}{
		{"lean with the session file's RTT", Options{Tuning: quictune.Lean(), SessionCache: withRTT}, 1500 * time.Millisecond, true},
		{"lean, another broker", Options{Tuning: quictune.Lean(), SessionCache: NewFileSessionCache(t.TempDir()+"/none.json", nil)}, 0, false},
		{"lean, a cache without RTTs", Options{Tuning: quictune.Lean(), SessionCache: tls.NewLRUClientSessionCache(1)}, 0, false},
		{"default profile ignores the file", Options{Tuning: quictune.Default(), SessionCache: withRTT}, 0, false},
		{"handshake_rtt wins", Options{Tuning: set, SessionCache: withRTT}, 2 * time.Second, false},
		{"Options.HandshakeRTT wins", Options{Tuning: quictune.Lean(), SessionCache: withRTT, HandshakeRTT: time.Second}, time.Second, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, from := handshakeHold(&tc.o, "b:443")
			if got != tc.want || from != tc.fromSession {
				t.Fatalf("handshakeHold = %v, %v; want %v, %v", got, from, tc.want, tc.fromSession)
			}
		})
	}
}

// TestH3HoldFromSessionFile: a publisher that closes records its
// connection's RTT in the session file; the next one (a new process: a new
// cache from the file), with lean's defaults, starts its probe hold from it.
func TestH3HoldFromSessionFile(t *testing.T) {
	b := brokertest.Start(t, nil, &broker.Options{Tuning: quictune.Lean()})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	file := t.TempDir() + "/session.json"
	start := func() *h3Client {
		c, err := New(Options{Broker: b.URL, RootCAs: b.PKI.Pool(), Logger: testutil.DiscardLogger(),
			Tuning: quictune.Lean(), SessionCache: NewFileSessionCache(file, testutil.DiscardLogger())})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		if _, err := c.Publish(ctx, "dev/t", []byte("x"), PublishOptions{QoS: 1}); err != nil {
			t.Fatal(err)
		}
		return c.(*h3Client)
	}
	first := start()
	if rtt, from := HandshakeHold(first); rtt != 0 || from {
		t.Fatalf("first start: hold %v (from the file %v), want none", rtt, from)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	recorded := NewFileSessionCache(file, testutil.DiscardLogger()).(RTTMemory).LastRTT(first.hostport)
	if recorded <= 0 {
		t.Fatalf("session file holds no RTT after the first connection")
	}
	second := start()
	if rtt, from := HandshakeHold(second); rtt != recorded || !from {
		t.Fatalf("second start: hold %v (from the file %v), want %v from the file", rtt, from, recorded)
	}
}
