package broker_test

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/brokertest"
	"github.com/quiot/quiot/internal/quictune"
	"github.com/quiot/quiot/internal/testutil"
)

// deafConn is a UDP socket that sends but never receives: a client whose
// Initial packets carry a source address it does not own (a spoofer never
// sees the server's answers).
type deafConn struct {
	net.PacketConn
	once   sync.Once
	closed chan struct{}
}

func (c *deafConn) ReadFrom([]byte) (int, net.Addr, error) {
	<-c.closed
	return 0, nil, net.ErrClosed
}

func (c *deafConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return c.PacketConn.Close()
}

// TestQUICRetryBeforePerAddressLimits is issue 27 finding 10 (c): once
// Limits.QUICRetryAbove handshakes from unvalidated addresses are in
// progress, a new HTTP/3 connection attempt must first prove its source
// address (a Retry) before it is charged to MaxConnsPerAddr. Attempts
// that never answer (as spoofed ones) thus hold at most QUICRetryAbove
// slots of an address: with 2 slots per address and a threshold of 1, a
// second spoofed attempt gets a Retry and is never charged, and a real
// client of that address still connects (through a Retry). Without the
// validation both spoofed attempts took the address's 2 slots and the
// real client was refused.
func TestQUICRetryBeforePerAddressLimits(t *testing.T) {
	b := brokertest.Start(t, nil, &broker.Options{
		Limits: broker.Limits{MaxConnsPerAddr: 2, QUICRetryAbove: 1},
		Tuning: &quictune.Profile{SessionResumption: true, HandshakeIdleTimeout: quictune.Duration(2 * time.Minute), MaxIdleTimeout: quictune.Duration(2 * time.Minute)},
	})
	server := b.Addr().(*net.UDPAddr)
	const victim = "127.0.0.2"
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP(victim)})
	if err != nil {
		t.Skipf("cannot bind %s: %v", victim, err)
	}
	deaf := &deafConn{PacketConn: udp, closed: make(chan struct{})}
	tr := &quic.Transport{Conn: deaf}
	ctx, cancel := context.WithCancel(context.Background())
	var dials sync.WaitGroup
	t.Cleanup(func() {
		cancel()
		dials.Wait()
		_ = deaf.Close() // first: the transport's reader waits on it
		_ = tr.Close()
	})
	spoof := func() {
		dials.Add(1)
		go func() {
			defer dials.Done()
			tc := &tls.Config{RootCAs: b.PKI.Pool(), ServerName: "localhost", NextProtos: []string{"h3"}}
			if c, err := tr.Dial(ctx, server, tc, &quic.Config{HandshakeIdleTimeout: 2 * time.Minute}); err == nil {
				_ = c.CloseWithError(0, "")
			}
		}()
	}
	wait := func(what string, cond func(broker.Stats) bool) broker.Stats {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second) // only catches a hang
		for {
			st := b.Stats()
			if cond(st) {
				return st
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: half-open %d, retries %d", what, st.QUICHalfOpen, st.QUICRetries)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	spoof()
	wait("first spoofed attempt half-open", func(st broker.Stats) bool { return st.QUICHalfOpen >= 1 })
	spoof()
	st := wait("second spoofed attempt answered", func(st broker.Stats) bool { return st.QUICRetries >= 1 || st.QUICHalfOpen >= 2 })
	if st.QUICHalfOpen != 1 || st.QUICRetries < 1 {
		t.Errorf("after two spoofed attempts: half-open %d, retries %d; want 1 and a Retry for the second", st.QUICHalfOpen, st.QUICRetries)
	}

	real, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP(victim)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = real.Close() })
	c := testutil.H3ClientConn(b.PKI.Pool(), nil, real)
	resp, err := c.Get(b.URL + "/healthz")
	if err != nil {
		t.Fatalf("real client of %s beside the spoofed attempts: %v", victim, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("healthz: %d", resp.StatusCode)
	}
	if st := b.Stats(); st.QUICRetries < 2 {
		t.Errorf("retries %d: the real client came through a Retry too", st.QUICRetries)
	}
}
