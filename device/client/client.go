// Package client is quiot's publisher and subscriber for both protocols behind
// one interface: HTTP/3 pub-sub (https://host:4433) and MQTT over QUIC
// (mqtt-quic://host:14567), MQTT over TCP (mqtt://host:1883) or MQTT over TLS
// (mqtts://host:8883). New picks the implementation from the broker URL's
// scheme.
package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/qlogwriter"

	"github.com/quiot/quiot/internal/quictune"
)

// Message is one message delivered to a subscriber.
type Message struct {
	// Topic is the topic the message was published to.
	Topic string
	// Seq is the broker's per-topic sequence number; 0 when the protocol does
	// not carry it (MQTT).
	Seq uint64
	// Sent is the publisher's send time when it stamped one; zero otherwise.
	Sent time.Time
	// Received is when this client received the message.
	Received time.Time
	// Payload is the message body.
	Payload []byte
	// QoS is the delivery QoS (0 or 1).
	QoS byte
	// Retained marks a retained message replayed on subscribe.
	Retained bool
	// Replayed marks a message the broker replayed from its history
	// because the subscription asked for it (Subscribe's since): published
	// before the subscription began, so its latency says nothing about
	// delivery. Messages the client fetched from history itself, resuming
	// after a reconnect, are not marked: they were published while
	// subscribed, and their latency includes the outage. HTTP/3 only.
	Replayed bool
	// Gap marks a gap announcement: the broker's history no longer covers
	// sequence numbers up to Seq-1 on Topic; Payload is empty.
	Gap bool
}

// Latency returns Received - Sent, or 0 when the message was not stamped.
func (m *Message) Latency() time.Duration {
	if m.Sent.IsZero() {
		return 0
	}
	return m.Received.Sub(m.Sent)
}

// PublishOptions are per-message publish settings.
type PublishOptions struct {
	// QoS is 0 (fire and forget, no broker acknowledgement awaited for MQTT)
	// or 1 (acknowledged once the broker accepted the message).
	QoS byte
	// Retain asks the broker to keep the message as the topic's retained one.
	Retain bool
	// Sent is the send time stamped into the message (HTTP/3 Quiot-Time
	// header or frame field; MQTT 5 user property "quiot-time"); zero means
	// time.Now() at send.
	Sent time.Time
}

// Ack is the broker's acknowledgement of a publish.
type Ack struct {
	// Seq is the sequence number the broker gave the message (0 for MQTT,
	// and for a message that went to the spool).
	Seq uint64
	// Spooled is true when a Spooled client took the message into its
	// on-disk spool: it is accepted and will be delivered in order later.
	Spooled bool
	// SpoolID is the message's ID in the spool (when Spooled).
	SpoolID uint64
	// Sent is the send time stamped into the message (the subscriber's
	// latency starts there); zero when unknown (spooled). The stamp is
	// taken once the connection is up, so Sent minus the time Publish was
	// called is the connection setup the message waited for.
	Sent time.Time
}

// SinceStart, as Subscribe's since, asks for a replay of all the history
// the broker holds, from its first message (?since=0 on the wire: sequence
// numbers start at 1). HTTP/3 only.
const SinceStart = ^uint64(0)

// Client is a connection to a broker that publishes and subscribes.
// Implementations connect lazily on first use and reconnect with backoff.
type Client interface {
	// Publish sends one message and, for QoS 1, waits for the broker's
	// acknowledgement.
	Publish(ctx context.Context, topic string, payload []byte, opts PublishOptions) (Ack, error)
	// Subscribe delivers messages matching filter to h until ctx is done or
	// an unrecoverable error occurs (authorization, bad filter). since > 0
	// asks for a replay of history after that sequence number, SinceStart
	// for all the history the broker holds (HTTP/3 only; 0: no replay, the
	// retained messages instead). Across reconnects the client resumes
	// after the last sequence it saw.
	Subscribe(ctx context.Context, filter string, since uint64, h func(Message)) error
	// Stats reports connection-level measurements.
	Stats() Stats
	// Close closes the connection.
	Close() error
}

// Stats are a client's connection measurements.
type Stats struct {
	// Handshake is the duration of the first connection's QUIC (or TCP+MQTT)
	// handshake: dial -> handshake complete.
	Handshake time.Duration
	// Reconnects counts connections made after the first.
	Reconnects int
}

// Options configure a client. Only Broker is required.
type Options struct {
	// Broker is the broker URL: https://host:4433 (HTTP/3 pub-sub),
	// mqtt-quic://host:14567 (MQTT over QUIC), mqtt://host:1883 (MQTT/TCP)
	// or mqtts://host:8883 (MQTT over TLS 1.3).
	Broker string
	// Tuning is the QUIC tuning profile; nil means quictune.Default().
	Tuning *quictune.Profile
	// RootCAs verifies the broker; nil means the system pool.
	RootCAs *x509.CertPool
	// Insecure skips verification of the broker's certificate (development).
	Insecure bool
	// PinSHA256, when set (32 bytes), verifies the broker's leaf
	// certificate by its SHA-256 fingerprint instead of by a CA (RootCAs
	// is then not used), on every protocol; a mismatch wraps
	// ErrPinMismatch and is final. Nil means CA verification.
	PinSHA256 []byte
	// Certificate is the client certificate for mTLS; nil means none.
	Certificate *tls.Certificate
	// Token authenticates once per connection (HTTP/3: Authorization:
	// Bearer on the first request; MQTT: the password, with ClientID as the
	// username unless Username is set).
	Token string
	// AuthEveryRequest sends the token (Authorization: Bearer, or Basic
	// with Username) on every HTTP/3 request instead of once per
	// connection; the broker checks it each time. It costs header bytes on
	// every message (quic-go's QPACK does not index it away). Default
	// false: once per connection. In publish mode "stream" it only adds the
	// header to each request (the stream, subscriptions), not per message.
	// Ignored for MQTT, which authenticates once in CONNECT.
	AuthEveryRequest bool
	// Username is the MQTT username (and HTTP Basic user when set).
	Username string
	// ClientID is the MQTT client identifier; empty means a random one.
	ClientID string
	// PublishMode is "request" (one HTTP/3 request per message, the default)
	// or "stream" (one long-lived request carrying frames). Ignored for MQTT.
	PublishMode string
	// PacketConn, when set, is the UDP socket under quic-go's Transport, e.g.
	// a counting wrapper; nil means a new socket on an ephemeral port, not
	// bound to an address (the connection follows the device's address:
	// docs/TUNING.md, "NAT bindings and connection migration"). On the
	// client's own socket and on a *net.UDPConn, a send that finds no route
	// or address once a connection is up counts as a lost datagram, so a
	// handover keeps the connection, and on Linux a change of the source
	// address towards the broker (in the socket's network namespace) makes
	// the client probe the broker from the new address at once; other
	// wrappers pass such errors to quic-go, which closes the connection,
	// and are not watched.
	PacketConn net.PacketConn
	// SessionCache, when set, is the TLS session cache, shared by clients
	// of one process so that a new client resumes the session of an
	// earlier one (and, with the profile's allow_0rtt, sends its first
	// publish in 0-RTT data); nil means a cache of the client's own when
	// the profile resumes sessions. MQTT over QUIC and TLS use it for
	// resumption (no 0-RTT).
	SessionCache tls.ClientSessionCache
	// TokenStore, when set, keeps the broker's address-validation tokens
	// (NEW_TOKEN, with the RTT measured) across clients of one process; nil
	// means a store of the client's own (HTTP/3) or none (MQTT over QUIC).
	TokenStore quic.TokenStore
	// HandshakeRTT, when set, is the RTT expected to the broker (e.g. the
	// smoothed RTT of an earlier connection, SmoothedRTT): until the
	// broker's first datagram arrives, handshake probes that quic-go would
	// send sooner than 1.5 x HandshakeRTT after a flight are held back
	// (h3probe.go). Zero means the profile's handshake_rtt, else, with
	// its handshake_rtt_from_session (lean), the RTT SessionCache
	// remembers of the last connection to the broker (RTTMemory: the
	// --session-file), else none known: probes are held for 2 s, so the
	// first one goes at quic-go's 3 s (coldProbeHold in h3probe.go).
	// HTTP/3 and MQTT over QUIC.
	HandshakeRTT time.Duration
	// Tracer, when set, is installed in the quic.Config.
	Tracer func(ctx context.Context, isClient bool, connID quic.ConnectionID) qlogwriter.Trace
	// Reconnect enables reconnection with exponential backoff and jitter;
	// zero MaxBackoff means 30 s.
	Reconnect bool
	// MaxBackoff caps the reconnect backoff; zero means 30 s.
	MaxBackoff time.Duration
	// ConnectTimeout bounds how long a Publish or Subscribe keeps trying
	// to reach a broker that does not answer (each attempt included):
	// after it the call fails with an error wrapping ErrUnreachable. Zero
	// means no bound: with Reconnect, retry until the context ends.
	ConnectTimeout time.Duration
	// SpoolWindow is how many spooled messages a Spooled client keeps in
	// flight (written, acknowledgement awaited) when the protocol keeps
	// their order: HTTP/3 PublishMode "stream". Zero means 16; 1 sends one
	// message per round trip, as over MQTT and HTTP/3 requests.
	SpoolWindow int
	// Logger receives diagnostics; nil means slog.Default().
	Logger *slog.Logger
}

// ErrUnsupportedScheme is returned by New for a broker URL it cannot serve.
var ErrUnsupportedScheme = errors.New("unsupported broker URL scheme")

// factory makes a Client for a parsed broker URL.
type factory func(u *url.URL, opts *Options) (Client, error)

var factories = map[string]factory{}

// registerScheme makes New use f for URLs with scheme s; called from init.
func registerScheme(s string, f factory) { factories[s] = f }

// schemesHelp lists the broker URL schemes with an example each.
const schemesHelp = "https://host:4433 (HTTP/3), mqtt-quic://host:14567 (MQTT over QUIC), mqtt://host:1883 (MQTT over TCP) or mqtts://host:8883 (MQTT over TLS)"

// New returns a client for opts.Broker. It does not connect yet.
func New(opts Options) (Client, error) {
	if !strings.Contains(opts.Broker, "://") {
		// "localhost:4433" would parse as scheme "localhost", and
		// "127.0.0.1:4433" fail with url's "first path segment" error.
		return nil, fmt.Errorf("%w: broker URL %q has no scheme (want %s)", ErrUnsupportedScheme, opts.Broker, schemesHelp)
	}
	u, err := url.Parse(opts.Broker)
	if err != nil {
		return nil, fmt.Errorf("bad broker URL %q: %w", opts.Broker, err)
	}
	f, ok := factories[strings.ToLower(u.Scheme)]
	if !ok {
		known := make([]string, 0, len(factories))
		for s := range factories {
			known = append(known, s+"://")
		}
		sort.Strings(known)
		return nil, fmt.Errorf("%w %q (want one of %s: %s)", ErrUnsupportedScheme, u.Scheme, strings.Join(known, ", "), schemesHelp)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("bad broker URL %q: no host (want e.g. https://localhost:4433)", opts.Broker)
	}
	if opts.PinSHA256 != nil && len(opts.PinSHA256) != 32 {
		return nil, fmt.Errorf("bad certificate pin: %d bytes, want a SHA-256 (32)", len(opts.PinSHA256))
	}
	o := opts
	if o.Tuning == nil {
		o.Tuning = quictune.Default()
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.MaxBackoff == 0 {
		o.MaxBackoff = 30 * time.Second
	}
	if o.PublishMode == "" {
		o.PublishMode = "request"
	}
	if o.SpoolWindow <= 0 {
		o.SpoolWindow = 16
	}
	return f(u, &o)
}
