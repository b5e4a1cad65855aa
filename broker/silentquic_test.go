package broker_test

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/brokertest"
	"github.com/quiot/quiot/internal/quictune"
	"github.com/quiot/quiot/internal/testutil"
)

// muteConn is a client's UDP socket that can go silent at once, as a
// device whose network went away: once muted it neither sends nor
// receives (its own close never reaches the broker). It embeds the
// interface, not *net.UDPConn, so that quic-go reads and writes through
// ReadFrom and WriteTo.
type muteConn struct {
	net.PacketConn
	muted atomic.Bool
}

func (c *muteConn) WriteTo(p []byte, addr net.Addr) (int, error) {
	if c.muted.Load() {
		return len(p), nil
	}
	return c.PacketConn.WriteTo(p, addr)
}

func (c *muteConn) ReadFrom(p []byte) (int, net.Addr, error) {
	for {
		n, addr, err := c.PacketConn.ReadFrom(p)
		if err != nil || !c.muted.Load() {
			return n, addr, err
		}
	}
}

// TestSilentQUICConnectionsClosed: the broker closes HTTP/3 connections
// that fall silent within the bounds of its QUIC configuration (the
// [quic] profile's handshake_idle_timeout and max_idle_timeout), whatever
// the client's own timeouts, and frees what they held (their slot of
// MaxConnsPerAddr, their subscriptions):
//
//   - a handshake that never completes, its client retransmitting its
//     Initial packets and waiting 2 minutes, ends within twice the
//     handshake idle timeout (quic-go's bound on a whole handshake);
//   - a connection with an EventSource subscription whose client goes
//     silent after the handshake (no packet, no acknowledgement of the
//     broker's heartbeats) ends within the idle timeout counted from the
//     broker's first unanswered packet (QUIC's rule: here a heartbeat,
//     sent within half the idle timeout), though its client would wait a
//     minute.
func TestSilentQUICConnectionsClosed(t *testing.T) {
	const bound = 500 * time.Millisecond
	const slack = 10 * time.Second // a loaded host's timers; far below the clients' own timeouts
	tun := quictune.Default()
	tun.HandshakeIdleTimeout, tun.MaxIdleTimeout, tun.KeepAlivePeriod = quictune.Duration(bound), quictune.Duration(bound), 0
	b := brokertest.Start(t, nil, &broker.Options{Tuning: tun, Limits: broker.Limits{MaxConnsPerAddr: 1}})
	server := b.Addr().(*net.UDPAddr)
	const client = "127.0.0.2" // its own address: one slot, not shared with WaitReady's client
	listen := func(t *testing.T) *net.UDPConn {
		pc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP(client)})
		if err != nil {
			t.Skipf("cannot bind %s: %v", client, err)
		}
		t.Cleanup(func() { _ = pc.Close() })
		return pc
	}
	// wait polls the broker's counters until cond holds (60 s at most: a hang).
	wait := func(t *testing.T, what string, cond func(broker.Stats) bool) time.Time {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			if cond(b.Stats()) {
				return time.Now()
			}
			if time.Now().After(deadline) {
				t.Fatalf("timeout waiting for %s: %+v", what, b.Stats())
			}
			time.Sleep(5 * time.Millisecond) // polling interval, not a synchronisation
		}
	}
	// connects reports whether a new client of the address is served.
	connects := func(t *testing.T) error {
		c := testutil.H3ClientConn(b.PKI.Pool(), nil, listen(t))
		defer c.Transport.(*http3.Transport).Close()
		resp, err := c.Get(b.URL + "/healthz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	}
	refused := func(err error) bool {
		var te *quic.TransportError
		return errors.As(err, &te) && te.ErrorCode == quic.ConnectionRefused
	}

	t.Run("handshake never completes", func(t *testing.T) {
		deaf := &deafConn{PacketConn: listen(t), closed: make(chan struct{})}
		tr := &quic.Transport{Conn: deaf}
		ctx, cancel := context.WithCancel(context.Background())
		var dial sync.WaitGroup
		t.Cleanup(func() {
			cancel()
			dial.Wait()
			_ = deaf.Close()
			_ = tr.Close()
		})
		start := time.Now()
		dial.Go(func() {
			tc := &tls.Config{RootCAs: b.PKI.Pool(), ServerName: "localhost", NextProtos: []string{http3.NextProtoH3}}
			if c, err := tr.Dial(ctx, server, tc, &quic.Config{HandshakeIdleTimeout: 2 * time.Minute}); err == nil {
				_ = c.CloseWithError(0, "")
			}
		})
		wait(t, "the half-open handshake", func(s broker.Stats) bool { return s.QUICHalfOpen == 1 })
		if err := connects(t); !refused(err) {
			t.Fatalf("a second client of %s while the handshake holds its slot: %v, want CONNECTION_REFUSED", client, err)
		}
		end := wait(t, "the broker to drop the handshake", func(s broker.Stats) bool { return s.QUICHalfOpen == 0 })
		took := end.Sub(start)
		t.Logf("handshake dropped after %v", took)
		if took > 2*bound+slack {
			t.Errorf("the handshake was dropped after %v, beyond twice the handshake idle timeout %v", took, bound)
		}
		// The slot is free, though the client still retransmits.
		if err := connects(t); err != nil && !refused(err) {
			t.Fatal(err)
		} else if err != nil {
			// A retransmitted Initial may have opened a new attempt:
			// it too ends within the bound.
			wait(t, "the retransmitted attempt to end", func(s broker.Stats) bool { return s.QUICHalfOpen == 0 })
			if err := connects(t); err != nil {
				t.Errorf("a client of %s after the handshake was dropped: %v", client, err)
			}
		}
	})

	t.Run("silent after the handshake", func(t *testing.T) {
		connsIdle(t, b)
		pc := &muteConn{PacketConn: listen(t)}
		c := newClient(t, b, nil)
		c.c = testutil.H3ClientQUIC(b.PKI.Pool(), nil, pc, &quic.Config{MaxIdleTimeout: time.Minute})
		t.Cleanup(func() { c.c.Transport.(*http3.Transport).Close() })
		c.mustSubscribe("silent/#", "", true)
		wait(t, "the subscription", func(s broker.Stats) bool {
			return s.Subscriptions == 1 && s.Protocols[broker.ProtoH3].ConnsOpen == 1
		})
		start := time.Now()
		pc.muted.Store(true)
		end := wait(t, "the broker to close the silent connection", func(s broker.Stats) bool {
			return s.Subscriptions == 0 && s.Protocols[broker.ProtoH3].ConnsOpen == 0
		})
		took := end.Sub(start)
		t.Logf("silent connection closed after %v", took)
		if took > bound+bound/2+slack {
			t.Errorf("the silent connection was closed after %v, beyond the idle timeout %v", took, bound)
		}
		if err := connects(t); err != nil {
			t.Errorf("a client of %s after the silent connection was closed: %v", client, err)
		}
	})
}
