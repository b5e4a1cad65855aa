// Package mqttquic serves MQTT 3.1.1 and 5.0 over QUIC (and optionally
// over TCP) with mochi-mqtt/server, interoperable with EMQX and NanoMQ: ALPN
// "mqtt", UDP 14567 by default, single-stream mode (one client-opened
// bidirectional stream per connection carries every MQTT packet).
//
// Given the HTTP/3 broker (Options.Broker), it joins the two protocols into
// one topic space: MQTT publishes go into the broker (and so reach HTTP/3
// subscribers and its history), HTTP/3 publishes are injected into mochi
// (and so reach MQTT subscribers), retained messages included; identities
// and ACLs come from the broker's authenticator.
package mqttquic

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/listeners"
	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/qlogwriter"

	"github.com/quiot/quiot/broker/store"
	"github.com/quiot/quiot/internal/quictune"
)

// Options configure a Server. Defaults are applied by New.
type Options struct {
	// QUICAddr is the UDP address of the MQTT over QUIC listener; empty
	// means ":14567"; "off" disables the listener.
	QUICAddr string
	// TCPAddr is the address of an MQTT over plain TCP listener; empty
	// means none (e.g. ":1883" enables it).
	TCPAddr string
	// TLSAddr is the address of an MQTT over TLS listener (TLS 1.3 only,
	// TLS and ClientCAs as for QUIC, see tls.go); empty means none (e.g.
	// ":8883" enables it).
	TLSAddr string
	// TLS is the server certificate configuration for QUIC and TLSAddr
	// (required unless QUICAddr is "off" and TLSAddr empty). It is cloned;
	// ALPN is set to "mqtt" on QUIC.
	TLS *tls.Config
	// ClientCAs, when set, verifies client certificates presented over QUIC
	// (mTLS); the identity is the certificate's common name. Clients
	// without a certificate may still log in with a username and password.
	ClientCAs *x509.CertPool
	// Profile is the QUIC tuning profile; nil means quictune.Default().
	Profile *quictune.Profile
	// PacketConn, when set, is the UDP socket of the QUIC listener (e.g. a
	// counting wrapper); nil means a new socket on QUICAddr.
	PacketConn net.PacketConn
	// Tracer, when set, is installed in the listener's quic.Config.
	Tracer func(ctx context.Context, isClient bool, connID quic.ConnectionID) qlogwriter.Trace
	// Broker joins the MQTT topic space to the HTTP/3 broker and takes
	// authentication and ACLs from it; nil means a standalone MQTT broker
	// that allows everyone.
	Broker Core
	// MaxPacketSize caps an MQTT packet (a larger one closes the
	// connection); zero means 320 KiB (the broker's 256 KiB payload limit
	// plus headers).
	MaxPacketSize uint32
	// MaxSessionExpiry caps the session expiry a client may ask for, in
	// seconds; zero means one day.
	MaxSessionExpiry uint32
	// MaxPendingWrites bounds the packets queued for one client before
	// further QoS 0 deliveries to it are dropped (counted by mochi); zero
	// means 1024, the HTTP/3 broker's subscriber queue length (mochi's own
	// default, 8192, costs 64 KiB per client).
	MaxPendingWrites int32
	// WriteBufferSize is the size up to which packets queued for one
	// client are gathered into a single write (a packet with nothing queued
	// behind it is written at once, so this adds no delay); zero means
	// 16 KiB (mochi's default, 2 KiB, makes twice the write system calls
	// in a fan-out).
	WriteBufferSize int
	// DataDir, when set, keeps persistent sessions (their subscriptions
	// and queued QoS 1 messages) across restarts in DataDir/mqtt-sessions.db
	// (broker/store); empty means sessions live in memory only.
	DataDir string
	// StreamTimeout bounds the wait for a client's MQTT stream after the
	// QUIC handshake; zero means 10 s.
	StreamTimeout time.Duration
	// Logger receives diagnostics; nil means slog.Default().
	Logger *slog.Logger
}

func (o *Options) ensureDefaults() {
	if o.QUICAddr == "" {
		o.QUICAddr = ":14567"
	}
	if o.Profile == nil {
		o.Profile = quictune.Default()
	}
	if o.MaxPacketSize == 0 {
		o.MaxPacketSize = 320 << 10
	}
	if o.MaxPendingWrites == 0 {
		o.MaxPendingWrites = 1024
	}
	if o.WriteBufferSize == 0 {
		o.WriteBufferSize = 16 << 10
	}
	if o.MaxSessionExpiry == 0 {
		o.MaxSessionExpiry = 24 * 3600
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// Server is an MQTT broker with a QUIC listener and an optional TCP
// listener, bridged to the HTTP/3 broker.
type Server struct {
	opts Options
	mq   *mqtt.Server
	quic *QUICListener
	tcp  *listeners.TCP
	tlsl *listeners.TCP // MQTT over TLS (tls.go)
	br   *bridge

	closeOnce sync.Once
}

// New builds the server; Start opens the listeners.
func New(opts Options) (*Server, error) {
	opts.ensureDefaults()
	if (opts.QUICAddr != "off" || opts.TLSAddr != "") && opts.TLS == nil {
		return nil, errors.New("mqtt server: a TLS configuration is required for MQTT over QUIC or TLS")
	}
	caps := mqtt.NewDefaultServerCapabilities()
	caps.MaximumPacketSize = opts.MaxPacketSize
	caps.MaximumSessionExpiryInterval = opts.MaxSessionExpiry
	caps.MaximumClientWritesPending = opts.MaxPendingWrites
	// Messages expire only when their publisher says so (MQTT 5's
	// default), as on the HTTP/3 side. mochi's default (one day) would
	// stamp a Message Expiry Interval on every delivery to an MQTT 5
	// client (a clock read and a property per delivery) and drop MQTT's
	// copy of a retained message after a day while HTTP/3 keeps it.
	caps.MaximumMessageExpiryInterval = 0
	mq := mqtt.New(&mqtt.Options{
		Capabilities:             caps,
		ClientNetWriteBufferSize: opts.WriteBufferSize,
		Logger:                   slog.New(quietHandler{opts.Logger.Handler()}).With("component", "mqtt"),
		// $SYS topics are refreshed once a minute (mochi's default is 1 s,
		// wasteful on a Pi).
		SysTopicResendInterval: 60,
	})
	s := &Server{opts: opts, mq: mq}
	if opts.DataDir != "" {
		so := store.SessionOptions{Dir: opts.DataDir, Server: mq, Logger: opts.Logger}
		if c, ok := opts.Broker.(store.SessionCore); ok {
			so.Core = c
		}
		h, err := store.OpenSessions(so)
		if err != nil {
			return nil, fmt.Errorf("mqtt server: %w", err)
		}
		if err := mq.AddHook(h, nil); err != nil {
			return nil, fmt.Errorf("mqtt server: add session hook: %w", err)
		}
	}
	if err := mq.AddHook(new(compatHook), nil); err != nil {
		return nil, fmt.Errorf("mqtt server: add compat hook: %w", err)
	}
	if opts.Broker != nil {
		ah := &authHook{core: opts.Broker}
		if err := mq.AddHook(ah, nil); err != nil {
			return nil, fmt.Errorf("mqtt server: add auth hook: %w", err)
		}
		br := newBridge(mq, opts.Broker, ah, opts.Logger)
		s.br = br
		if err := mq.AddHook(br, nil); err != nil {
			return nil, fmt.Errorf("mqtt server: add bridge hook: %w", err)
		}
	} else if err := mq.AddHook(new(allowHook), nil); err != nil {
		return nil, fmt.Errorf("mqtt server: add allow hook: %w", err)
	}
	return s, nil
}

// Start opens the listeners and starts serving. It returns once the
// sockets are bound.
func (s *Server) Start() error {
	if s.opts.QUICAddr != "off" {
		tc := s.opts.TLS.Clone()
		s.opts.Profile.ApplyServerTLS(tc)
		if s.opts.ClientCAs != nil {
			tc.ClientCAs = s.opts.ClientCAs
			tc.ClientAuth = tls.VerifyClientCertIfGiven
		}
		qc := s.opts.Profile.QUICConfig()
		qc.Tracer = s.opts.Tracer
		s.quic = NewQUICListener(ListenerConfig{
			Address:       s.opts.QUICAddr,
			PacketConn:    s.opts.PacketConn,
			TLS:           tc,
			QUIC:          qc,
			StreamTimeout: s.opts.StreamTimeout,
		})
		if err := s.mq.AddListener(s.quic); err != nil {
			return fmt.Errorf("mqtt server: %w", err)
		}
	}
	if s.opts.TCPAddr != "" {
		s.tcp = listeners.NewTCP(listeners.Config{ID: "mqtt-tcp", Address: s.opts.TCPAddr})
		if err := s.mq.AddListener(s.tcp); err != nil {
			s.closeListeners()
			return fmt.Errorf("mqtt server: %w", err)
		}
		s.warnPlainTCP()
	}
	if err := s.startTLS(); err != nil {
		s.closeListeners()
		return err
	}
	if err := s.mq.Serve(); err != nil {
		return fmt.Errorf("mqtt server: %w", err)
	}
	return nil
}

func (s *Server) closeListeners() {
	if s.quic != nil {
		s.quic.Close(func(string) {})
	}
}

// QUICAddr returns the bound UDP address of the QUIC listener, or nil.
func (s *Server) QUICAddr() net.Addr {
	if s.quic == nil || s.quic.ln == nil {
		return nil
	}
	return s.quic.ln.Addr()
}

// TCPAddr returns the bound address of the TCP listener, or "".
func (s *Server) TCPAddr() string {
	if s.tcp == nil {
		return ""
	}
	return s.tcp.Address()
}

// ProtocolErrors counts QUIC connections closed for malformed MQTT bytes.
func (s *Server) ProtocolErrors() int64 {
	if s.quic == nil {
		return 0
	}
	return s.quic.ProtocolErrors.Load()
}

// MQTT returns the underlying mochi server (for inspection in tests and
// metrics).
func (s *Server) MQTT() *mqtt.Server { return s.mq }

// Close disconnects every client and closes the listeners. It is safe to
// call more than once.
func (s *Server) Close() error {
	var err error
	s.closeOnce.Do(func() { err = s.mq.Close() })
	return err
}

var _ io.Closer = (*Server)(nil)

// allowHook lets every client connect, publish and subscribe (standalone
// mode without a broker).
type allowHook struct{ mqtt.HookBase }

// ID names the hook.
func (h *allowHook) ID() string { return "quiot-allow-all" }

// Provides reports the events the hook handles.
func (h *allowHook) Provides(b byte) bool {
	return b == mqtt.OnConnectAuthenticate || b == mqtt.OnACLCheck
}

// OnConnectAuthenticate accepts every client.
func (h *allowHook) OnConnectAuthenticate(*mqtt.Client, packets.Packet) bool { return true }

// OnACLCheck allows every topic.
func (h *allowHook) OnACLCheck(*mqtt.Client, string, bool) bool { return true }

// compatHook keeps user properties on PUBLISH packets for clients that
// asked for no problem information: MQTT 5 (3.1.2.11.7) restricts that flag
// to other packet types, but mochi strips user properties from every packet,
// which would lose the "quiot-time" send stamp.
//
// mochi runs OnPacketEncode for every packet written (each delivery), so
// the hook provides it only once a client has asked for no problem
// information (sticky: most clients never do).
type compatHook struct {
	mqtt.HookBase
	needed atomic.Bool
}

// ID names the hook.
func (h *compatHook) ID() string { return "quiot-compat" }

// Provides reports the events the hook handles.
func (h *compatHook) Provides(b byte) bool {
	return b == mqtt.OnConnect || b == mqtt.OnPacketEncode && h.needed.Load()
}

// OnConnect turns the encoding fix on when a client asks for no problem
// information (before anything is written to it).
func (h *compatHook) OnConnect(cl *mqtt.Client, _ packets.Packet) error {
	if p := cl.Properties.Props; p.RequestProblemInfoFlag && p.RequestProblemInfo == 0 {
		h.needed.Store(true)
	}
	return nil
}

// OnPacketEncode re-allows properties on outgoing PUBLISH packets.
func (h *compatHook) OnPacketEncode(_ *mqtt.Client, pk packets.Packet) packets.Packet {
	if pk.FixedHeader.Type == packets.Publish {
		pk.Mods.DisallowProblemInfo = false
	}
	return pk
}

// quietHandler demotes mochi's chatty Info records (hooks added, listeners
// attached, every client connecting) to Debug; warnings stay.
type quietHandler struct{ slog.Handler }

// Enabled reports whether records at level l (after demotion) are logged.
func (h quietHandler) Enabled(ctx context.Context, l slog.Level) bool {
	if l == slog.LevelInfo {
		l = slog.LevelDebug
	}
	return h.Handler.Enabled(ctx, l)
}

// Handle logs r, Info demoted to Debug.
func (h quietHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level == slog.LevelInfo {
		r.Level = slog.LevelDebug
	}
	return h.Handler.Handle(ctx, r)
}

// WithAttrs keeps the demotion on derived handlers.
func (h quietHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return quietHandler{h.Handler.WithAttrs(as)}
}

// WithGroup keeps the demotion on derived handlers.
func (h quietHandler) WithGroup(name string) slog.Handler {
	return quietHandler{h.Handler.WithGroup(name)}
}
