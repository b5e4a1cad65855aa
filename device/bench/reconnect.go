package bench

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/device/client"
	"github.com/quiot/quiot/internal/certs"
	"github.com/quiot/quiot/internal/quictune"
)

// The reconnect workload: the NB-IoT PSM/eDRX pattern. A device wakes up,
// connects, publishes one message, closes and sleeps; the next wake-up is a
// new connection of the same process, which keeps its TLS session cache and
// its QUIC token store, so it resumes the session, starts from the RTT
// measured before (the token's) and, with 0-RTT, sends the publish in its
// first flight. Broker and publisher run in this process over the link
// emulator (the publisher's side only).

// ReconnectOptions configure Reconnect. Link, Profile and Broker tuning are
// required in the sense that their zero values are filled in.
type ReconnectOptions struct {
	// Link starts the publisher's link emulator; required.
	Link Link
	// Profile is the link profile's name, e.g. "nbiot"; required.
	Profile string
	// Tuning is the QUIC profile of broker and client; nil means lean.
	Tuning *quictune.Profile
	// Wakeups is how many connect-publish-close cycles run; zero means 5.
	Wakeups int
	// Sleep is the pause between wake-ups; zero means 1 s.
	Sleep time.Duration
	// Payload is the message size in bytes; zero means 256.
	Payload int
	// Logger receives diagnostics; nil means discard.
	Logger *slog.Logger
}

// Wakeup is what one wake-up measured.
type Wakeup struct {
	// TTFDMs is the time from the application's publish call (no
	// connection yet) to the broker's acknowledgement.
	TTFDMs float64 `json:"ttfd_ms"`
	// RadioOnMs is the time from the first to the last datagram of the
	// wake-up on the device's socket (sent or received).
	RadioOnMs float64 `json:"radio_on_ms"`
	// Bytes and Datagrams count both directions on the device's socket.
	Bytes     int64 `json:"bytes"`
	Datagrams int64 `json:"datagrams"`
	// Used0RTT is whether the publish went in 0-RTT data.
	Used0RTT bool `json:"used_0rtt"`
}

// Reconnect runs the reconnect workload over HTTP/3 (request mode) and
// returns each wake-up's figures; the first wake-up is a cold start.
func Reconnect(ctx context.Context, o ReconnectOptions) ([]Wakeup, error) {
	if o.Link == nil || o.Profile == "" {
		return nil, errors.New("reconnect: no link or profile")
	}
	if o.Tuning == nil {
		o.Tuning = quictune.Lean()
	}
	if o.Wakeups == 0 {
		o.Wakeups = 5
	}
	if o.Sleep == 0 {
		o.Sleep = time.Second
	}
	if o.Payload == 0 {
		o.Payload = 256
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	cert, err := certs.SelfSigned(nil, nil)
	if err != nil {
		return nil, fmt.Errorf("reconnect: %w", err)
	}
	b, err := broker.New(&broker.Options{Listen: "127.0.0.1:0", Certificates: []tls.Certificate{cert.TLS}, Tuning: o.Tuning, Logger: o.Logger})
	if err != nil {
		return nil, fmt.Errorf("reconnect: %w", err)
	}
	if err := b.Start(); err != nil {
		return nil, fmt.Errorf("reconnect: %w", err)
	}
	defer b.Close()
	addr, lk, err := o.Link.Start(ctx, o.Profile, b.Addr().String(), 1)
	if err != nil {
		return nil, fmt.Errorf("reconnect: link: %w", err)
	}
	defer lk.Close()

	cache := tls.NewLRUClientSessionCache(4)
	tokens := quic.NewLRUTokenStore(4, 2)
	payload := make([]byte, o.Payload)
	var out []Wakeup
	for i := range o.Wakeups {
		if i > 0 {
			select {
			case <-ctx.Done():
				return out, ctx.Err()
			case <-time.After(o.Sleep):
			}
		}
		w, err := wakeOnce(ctx, "https://"+addr, o, cache, tokens, payload)
		if err != nil {
			return out, fmt.Errorf("reconnect: wake-up %d: %w", i+1, err)
		}
		out = append(out, w)
	}
	return out, nil
}

// wakeOnce is one connect-publish-close cycle.
func wakeOnce(ctx context.Context, url string, o ReconnectOptions, cache tls.ClientSessionCache, tokens quic.TokenStore, payload []byte) (Wakeup, error) {
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return Wakeup{}, err
	}
	pc := &radioConn{PacketConn: udp}
	defer udp.Close()
	var used0RTT bool
	c, err := client.New(client.Options{
		Broker: url, Insecure: true, Profile: o.Tuning, SessionCache: cache, TokenStore: tokens,
		PacketConn: pc, Logger: o.Logger,
	})
	if err != nil {
		return Wakeup{}, err
	}
	start := time.Now()
	if _, err := c.Publish(ctx, "wake/up", payload, client.PublishOptions{QoS: 1}); err != nil {
		_ = c.Close()
		return Wakeup{}, err
	}
	ttfd := time.Since(start)
	used0RTT = client.Used0RTT(c)
	if err := c.Close(); err != nil {
		return Wakeup{}, err
	}
	// The CONNECTION_CLOSE is the wake-up's last datagram; the socket
	// stays open a moment for stragglers of the broker.
	w := pc.summary()
	w.TTFDMs = float64(ttfd) / float64(time.Millisecond)
	w.Used0RTT = used0RTT
	return w, nil
}

// radioConn counts a wake-up's datagrams and their first and last times.
type radioConn struct {
	net.PacketConn
	mu          sync.Mutex
	first, last time.Time
	bytes, n    int64
}

func (c *radioConn) note(size int) {
	now := time.Now()
	c.mu.Lock()
	if c.first.IsZero() {
		c.first = now
	}
	c.last = now
	c.bytes += int64(size)
	c.n++
	c.mu.Unlock()
}

// ReadFrom implements net.PacketConn.
func (c *radioConn) ReadFrom(p []byte) (int, net.Addr, error) {
	n, a, err := c.PacketConn.ReadFrom(p)
	if err == nil {
		c.note(n)
	}
	return n, a, err
}

// WriteTo implements net.PacketConn.
func (c *radioConn) WriteTo(p []byte, a net.Addr) (int, error) {
	n, err := c.PacketConn.WriteTo(p, a)
	if err == nil {
		c.note(n)
	}
	return n, err
}

func (c *radioConn) summary() Wakeup {
	c.mu.Lock()
	defer c.mu.Unlock()
	return Wakeup{RadioOnMs: float64(c.last.Sub(c.first)) / float64(time.Millisecond), Bytes: c.bytes, Datagrams: c.n}
}

// SetReadBuffer passes quic-go's buffer sizing to the UDP socket.
func (c *radioConn) SetReadBuffer(n int) error {
	if s, ok := c.PacketConn.(interface{ SetReadBuffer(int) error }); ok {
		return s.SetReadBuffer(n)
	}
	return nil
}

// SetWriteBuffer passes quic-go's buffer sizing to the UDP socket.
func (c *radioConn) SetWriteBuffer(n int) error {
	if s, ok := c.PacketConn.(interface{ SetWriteBuffer(int) error }); ok {
		return s.SetWriteBuffer(n)
	}
	return nil
}
