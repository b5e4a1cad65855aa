package broker

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"log/slog"
	"net"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/qlogwriter"

	"github.com/quiot/quiot/broker/auth"
	"github.com/quiot/quiot/broker/web"
	"github.com/quiot/quiot/internal/quictune"
)

// Limits bound what clients can make the broker hold. A zero field means its
// default.
type Limits struct {
	// MaxPayload is the largest payload in bytes; zero means 256 KiB.
	MaxPayload int
	// MaxTopicLength is the longest topic or filter in bytes; zero means 256.
	MaxTopicLength int
	// MaxTopicLevels is the deepest topic or filter; zero means 16.
	MaxTopicLevels int
	// HistoryPerTopic is how many messages each topic keeps for resume; zero
	// means 1024; negative keeps none.
	HistoryPerTopic int
	// HistoryBytes bounds the memory of all history (payload and topic bytes
	// plus ~96 bytes per message); zero means 16 MiB.
	HistoryBytes int64
	// RetainedBytes bounds the memory of all retained messages (counted as
	// HistoryBytes is); zero means 16 MiB. A retained publish beyond it
	// fails (HTTP 507).
	RetainedBytes int64
	// QueueLength is each subscriber's queue length in messages; zero means 1024.
	QueueLength int
	// QueueBytes bounds the memory one subscriber's queue holds: its queued
	// messages and the batch being written to the client, counted as
	// HistoryBytes is (payload and topic bytes plus ~96 bytes a message);
	// zero means 4 MiB (as an MQTT session's queue), and it is raised to
	// fit one message of MaxPayload. Beyond it the queue is full, as
	// beyond QueueLength.
	QueueBytes int64
	// QueueBytesTotal bounds the memory of all HTTP subscribers' queues
	// together (counted as QueueBytes); zero means 64 MiB (as all MQTT
	// sessions' queues). A message that would go beyond it finds its
	// subscriber's queue full.
	QueueBytesTotal int64
	// QueuePolicy applies when a subscriber's queue is full (QueueLength,
	// QueueBytes or QueueBytesTotal reached); zero means DropOldest. With
	// Disconnect, the subscription ends after its final gap; a subscriber
	// that does not read gets IdleTimeout for it, then its stream ends.
	QueuePolicy QueuePolicy
	// MaxSubscriptionsPerConn bounds concurrent subscriptions on one
	// connection; zero means 100. Beyond it a subscribe gets 429.
	MaxSubscriptionsPerConn int
	// MaxSubscriptionsPerIdentity bounds the live subscriptions of one
	// identity over all its connections (anonymous clients: of one remote
	// IP address); zero means 1000. Beyond it a subscribe gets 429.
	MaxSubscriptionsPerIdentity int
	// MaxSubscriptions bounds the live HTTP subscriptions in total; zero
	// means 10000. Beyond it a subscribe gets 503.
	MaxSubscriptions int

	// MaxConns bounds the open HTTP connections, HTTP/3 and TCP (HTTP/1.1,
	// HTTP/2) together, handshakes included; zero means 1024. Beyond it a
	// QUIC connection attempt is refused (CONNECTION_REFUSED) and a TCP
	// connection gets one 503 and is closed (see limits.go).
	MaxConns int
	// MaxConnsPerAddr bounds the open HTTP connections from one remote IP
	// address; zero means 128 (devices behind one NAT share an address).
	MaxConnsPerAddr int
	// QUICRetryAbove is the number of QUIC handshakes in progress from
	// addresses not yet validated from which a new HTTP/3 connection
	// attempt must first prove its source address (a Retry packet, one
	// more round trip), before it is charged to MaxConns and
	// MaxConnsPerAddr: spoofed Initial packets cannot then keep another
	// address's slots. Zero means 64 (srcvalid.DefaultThreshold); a
	// negative value asks every new connection for a Retry. broker/node
	// applies the same value to the MQTT-over-QUIC listener unless its
	// own limits set one.
	QUICRetryAbove int
	// MaxConnsPerIdentity bounds the open HTTP connections bound to one
	// identity (certificate CN or credentials); zero means 128. A request
	// that would bind one more connection to the identity gets 429.
	MaxConnsPerIdentity int
	// MaxStreamsPerConn bounds the concurrent requests (streams) of one
	// connection: QUIC's MAX_STREAMS for HTTP/3, SETTINGS_MAX_CONCURRENT_STREAMS
	// for HTTP/2; a client waits for a free stream. Zero means the QUIC
	// profile's MaxIncomingStreams (quic-go's 100 when the profile leaves it
	// unset) for HTTP/3, and 100 for HTTP/2.
	MaxStreamsPerConn int
	// MaxHeaderBytes bounds a request's header section on every listener;
	// zero means 64 KiB. Beyond it a request gets 431 (HTTP/1.1, HTTP/2)
	// or is refused by the HTTP/3 layer.
	MaxHeaderBytes int
	// ReadHeaderTimeout bounds the time a TCP client takes to send a
	// request's header; zero means 10 s.
	ReadHeaderTimeout time.Duration
	// IdleTimeout closes a TCP connection idle between requests (HTTP/1.1
	// keep-alive, HTTP/2 without streams); zero means 2 minutes. HTTP/3
	// connections end by the QUIC idle timeout. On every listener it also
	// bounds the time a subscription that QueuePolicy Disconnect cut off
	// takes to write its last batch and final gap: a subscriber that does
	// not read is not held longer.
	IdleTimeout time.Duration
	// StreamInflight bounds the QoS 0 frames of one publish stream
	// (POST /v1/publish) that the Store has accepted but not yet committed;
	// the stream reads its next frame once they are stored (backpressure,
	// counted in Stats.StreamInflightWaits). Zero means 64. Without a Store
	// nothing is in flight (a publish is applied before it returns), and a
	// QoS 1 frame always waits for its commit.
	StreamInflight int
}

const (
	// defaultHeartbeat is Options.Heartbeat's default (when the QUIC idle
	// timeout is 30 s or more).
	defaultHeartbeat = 15 * time.Second
	// quicDefaultIdleTimeout is quic-go's idle timeout when quic.Config
	// sets none.
	quicDefaultIdleTimeout = 30 * time.Second
)

// Options configure a Broker. A nil *Options, and every zero field, means the
// documented default.
type Options struct {
	// Listen is the UDP (HTTP/3) and TCP (HTTP/1.1, HTTP/2) address; empty
	// means ":4433". Ignored for UDP when PacketConn is set.
	Listen string
	// PacketConn, when set, is the UDP socket quic-go runs on (e.g. a
	// byte-counting wrapper). The broker does not close it. Without
	// TCPListener (or DisableTCP) Start listens on TCP on the socket's port,
	// which fails when another socket of the host has that port on TCP: open
	// both with ListenPair.
	PacketConn net.PacketConn
	// DisableTCP turns off the HTTP/1.1+HTTP/2 listener on TCP.
	DisableTCP bool
	// TCPListener, when set, is used for HTTP/1.1 and HTTP/2 instead of
	// listening on Listen's port. The broker closes it.
	TCPListener net.Listener

	// Certificates are the server's certificates. If empty, CertFile and
	// KeyFile are loaded. One of them is required.
	Certificates []tls.Certificate
	// CertFile and KeyFile are PEM files of the server certificate and key.
	CertFile, KeyFile string
	// ClientCAs verifies client certificates (mTLS). If nil and ClientCAFile
	// is set, it is loaded from there. With neither, client certificates are
	// not requested. Certificates are optional (token clients still work);
	// a verified certificate's CN is the connection's identity.
	ClientCAs *x509.CertPool
	// ClientCAFile is a PEM file of CA certificates for ClientCAs.
	ClientCAFile string

	// Tuning is the QUIC/TLS profile the broker's quic.Config is built
	// from (quictune.Profile.QUICConfig); nil means quictune.Default().
	// Limits.MaxStreamsPerConn, when set, replaces its stream limit.
	Tuning *quictune.Profile
	// Tracer, when set, is installed in the broker's quic.Config (e.g. the
	// metrics' connection tracer, internal/qmetrics).
	Tracer func(ctx context.Context, isClient bool, connID quic.ConnectionID) qlogwriter.Trace

	// Auth holds identities and the ACL; nil means no ACL, deny by
	// default: clients from loopback addresses may do everything, others
	// are refused (auth.LoopbackOnly). auth.Open() serves everyone.
	Auth *auth.Authenticator

	// Limits; see Limits for defaults.
	Limits Limits

	// ShutdownGrace bounds Shutdown when its context has no deadline; zero
	// means 5 s.
	ShutdownGrace time.Duration

	// Heartbeat is how long a subscription stream may stay silent before
	// the broker writes a heartbeat: a comment line on SSE streams, a
	// heartbeat frame (internal/wire) on binary streams whose request asked
	// for them with "Quiot-Heartbeat: 1". It keeps the QUIC idle timeout
	// (and NAT bindings, proxies) from ending a quiet subscription when the
	// connection has no QUIC keep-alive. Zero means 15 s, or half the QUIC
	// idle timeout when that is shorter (quic-go's default idle timeout is
	// 30 s); negative disables heartbeats.
	Heartbeat time.Duration

	// StatelessResetKey, when set, makes the QUIC transport answer packets
	// of connections it does not know with stateless resets; kept across
	// restarts (broker/store.ResetKey), it lets clients of the previous run
	// reconnect at once instead of waiting for their idle timeout. Nil
	// means no stateless resets (quic-go's default).
	StatelessResetKey *quic.StatelessResetKey

	// Store keeps history, retained messages, the epoch and the sequence
	// counter across restarts (broker/store opens one on a data
	// directory); nil means memory only. The broker loads it in New and
	// closes it when it stops; when New fails, the caller closes it.
	Store Store

	// Cluster is the federation link that shares the topic space with other
	// brokers (broker/cluster: NATS); nil means this broker alone. The
	// caller starts and closes the link.
	Cluster Federation

	// Web is the browser part (broker/web): CORS for configured origins,
	// session tokens for EventSource, /v1/stats, /v1/topics and the
	// dashboard at "/"; nil means none of it.
	Web *web.Options

	// Logger receives the broker's logs; nil means slog.Default().
	Logger *slog.Logger
}

// ensureDefaults returns a copy of o with every default applied.
func (o *Options) ensureDefaults() Options {
	var c Options
	if o != nil {
		c = *o
	}
	if c.Listen == "" {
		c.Listen = ":4433"
	}
	if c.Tuning == nil {
		c.Tuning = quictune.Default()
	}
	if c.Auth == nil {
		c.Auth = auth.LoopbackOnly()
	}
	l := &c.Limits
	if l.MaxPayload <= 0 {
		l.MaxPayload = 256 << 10
	}
	if l.MaxTopicLength <= 0 {
		l.MaxTopicLength = 256
	}
	if l.MaxTopicLevels <= 0 {
		l.MaxTopicLevels = 16
	}
	if l.HistoryPerTopic == 0 {
		l.HistoryPerTopic = 1024
	}
	if l.HistoryPerTopic < 0 {
		l.HistoryPerTopic = 0
	}
	if l.HistoryBytes <= 0 {
		l.HistoryBytes = 16 << 20
	}
	if l.RetainedBytes <= 0 {
		l.RetainedBytes = 16 << 20
	}
	if l.QueueLength <= 0 {
		l.QueueLength = 1024
	}
	if l.QueueBytes <= 0 {
		l.QueueBytes = 4 << 20
	}
	l.QueueBytes = max(l.QueueBytes, int64(l.MaxPayload+l.MaxTopicLength)+entryOverhead)
	if l.QueueBytesTotal <= 0 {
		l.QueueBytesTotal = 64 << 20
	}
	if l.MaxSubscriptionsPerConn <= 0 {
		l.MaxSubscriptionsPerConn = 100
	}
	if l.MaxSubscriptionsPerIdentity <= 0 {
		l.MaxSubscriptionsPerIdentity = 1000
	}
	if l.MaxSubscriptions <= 0 {
		l.MaxSubscriptions = 10000
	}
	if l.MaxConns <= 0 {
		l.MaxConns = 1024
	}
	if l.MaxConnsPerAddr <= 0 {
		l.MaxConnsPerAddr = 128
	}
	if l.MaxConnsPerIdentity <= 0 {
		l.MaxConnsPerIdentity = 128
	}
	if l.MaxStreamsPerConn <= 0 {
		l.MaxStreamsPerConn = c.Tuning.StreamLimit()
	}
	c.Tuning = c.Tuning.WithStreamLimit(l.MaxStreamsPerConn)
	if l.MaxHeaderBytes <= 0 {
		l.MaxHeaderBytes = 64 << 10
	}
	if l.ReadHeaderTimeout <= 0 {
		l.ReadHeaderTimeout = 10 * time.Second
	}
	if l.IdleTimeout <= 0 {
		l.IdleTimeout = 2 * time.Minute
	}
	if l.StreamInflight <= 0 {
		l.StreamInflight = 64
	}
	if c.ShutdownGrace <= 0 {
		c.ShutdownGrace = 5 * time.Second
	}
	if c.Heartbeat == 0 {
		idle := time.Duration(c.Tuning.MaxIdleTimeout)
		if idle <= 0 {
			idle = quicDefaultIdleTimeout
		}
		c.Heartbeat = min(defaultHeartbeat, idle/2)
	}
	if c.Heartbeat < 0 {
		c.Heartbeat = 0
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}
