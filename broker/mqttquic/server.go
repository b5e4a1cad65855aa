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
//
// The topic space itself is broker/space (the broker's Space()): MQTT
// publishes go through the broker's Publish (Core), HTTP/3 publishes reach
// mochi through the space's taps, and the space gets the MQTT
// subscriptions' interest for its cluster link (AddInterest,
// CoverInterest) and serves the MQTT session store's replay after a
// restart (HistoryAfter, RetainedMessages).
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
	// WSAddr is the address of an MQTT over WebSocket listener (ws://,
	// path /mqtt, subprotocol "mqtt" or "mqttv3.1", see ws.go); empty
	// means none (e.g. ":8080" enables it). It is plain: passwords cross
	// the network in clear, and the server warns when it listens beyond
	// loopback.
	WSAddr string
	// WSSAddr is the address of an MQTT over secure WebSocket listener
	// (wss://, TLS 1.3 only with TLS and ClientCAs as for TLSAddr); empty
	// means none (e.g. ":8884" enables it).
	WSSAddr string
	// CORSOrigins are the origins (scheme://host[:port], "*" for any; the
	// broker's --cors-origins, checked by broker/web) whose web pages may
	// connect over WebSocket. A request with another Origin header is
	// refused with 403 before the upgrade; one without Origin (not a
	// browser) is judged by its CONNECT like every MQTT client. Empty
	// means no web page of any origin may connect.
	CORSOrigins []string
	// WSOnBroker, when true, also serves MQTT over WebSocket at /mqtt on
	// the HTTP broker's own port (the TCP listener, HTTP/1.1 upgrade;
	// Broker must be a *broker.Broker), with its certificate: a page the
	// broker serves (of its origin) may connect, other pages as
	// CORSOrigins says.
	WSOnBroker bool
	// TLS is the server certificate configuration for QUIC, TLSAddr and
	// WSSAddr (required unless QUICAddr is "off" and TLSAddr and WSSAddr
	// are empty). It is cloned; ALPN is set to "mqtt" on QUIC.
	TLS *tls.Config
	// ClientCAs, when set, verifies client certificates presented over QUIC
	// (mTLS); the identity is the certificate's common name. Clients
	// without a certificate may still log in with a username and password.
	ClientCAs *x509.CertPool
	// Tuning is the QUIC tuning profile; nil means quictune.Default().
	Tuning *quictune.Profile
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
	// MaxPendingWrites bounds the packets queued for one client, beyond
	// what its connection's send buffer holds, before further deliveries
	// to it are dropped (counted by mochi); zero means 256. mochi
	// allocates the whole queue with the client, 8 bytes a slot, whether
	// or not it is ever used: its own default, 8192, costs 64 KiB per
	// client, 1024 cost 8 KiB (docs/BENCH.md, "quiot beside mosquitto").
	MaxPendingWrites int32
	// ReadBufferSize is the size of each client's read buffer; zero means
	// 1 KiB (mochi's default is 2 KiB). A packet larger than the buffer
	// is read in more pieces, not refused.
	ReadBufferSize int
	// ReadLoops gives every MQTT/TCP client a goroutine waiting in a read
	// of its own socket (mochi's read loop), as before the poller; false,
	// the default, reads all plain MQTT/TCP clients through one poller on
	// Linux (third_party/mochi/QUIOT.md, change 20). TLS, WebSocket and
	// QUIC clients keep their read loops either way.
	ReadLoops bool
	// WriteBufferSize is the size up to which packets queued for one
	// client are gathered into a single write; zero (the default) writes
	// each packet at once. mochi (v2.7.9) strands what it has gathered
	// when the write that should flush it fails before writing (a delivery
	// over the client's Maximum Packet Size, dropped as MQTT requires):
	// the client's PINGRESP and later deliveries then wait for the next
	// write, which may never come (TestClientMaximumPacketSize stalled
	// about 1 run in 300 that way). Gathering saves write system calls on
	// MQTT/TCP fan-out; over QUIC a write only copies into the stream.
	WriteBufferSize int
	// TopicAliasMaximum is the highest topic alias an MQTT 5 client may
	// use (announced in CONNACK); zero means 64. Each alias holds a topic
	// name for the connection's life, so this bounds that memory.
	TopicAliasMaximum uint16
	// DataDir, when set, keeps persistent sessions (their subscriptions
	// and queued QoS 1 messages) across restarts in DataDir/mqtt-sessions.db
	// (broker/store); empty means sessions live in memory only.
	DataDir string
	// StreamTimeout bounds the wait for a client's MQTT stream after the
	// QUIC handshake, and for the CONNECT after a WebSocket upgrade; zero
	// means 10 s.
	StreamTimeout time.Duration
	// Limits bound clients, sessions and queued messages (limits.go);
	// each zero field has its documented default.
	Limits Limits
	// Logger receives diagnostics; nil means slog.Default().
	Logger *slog.Logger
}

func (o *Options) ensureDefaults() {
	if o.QUICAddr == "" {
		o.QUICAddr = ":14567"
	}
	if o.Tuning == nil {
		o.Tuning = quictune.Default()
	}
	if o.MaxPacketSize == 0 {
		o.MaxPacketSize = 320 << 10
	}
	if o.MaxPendingWrites == 0 {
		o.MaxPendingWrites = 256
	}
	if o.ReadBufferSize == 0 {
		o.ReadBufferSize = 1 << 10
	}
	if o.MaxSessionExpiry == 0 {
		o.MaxSessionExpiry = 24 * 3600
	}
	if o.TopicAliasMaximum == 0 {
		o.TopicAliasMaximum = 64
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	o.Limits.ensureDefaults()
}

// Server is an MQTT broker with a QUIC listener and an optional TCP
// listener, bridged to the HTTP/3 broker.
type Server struct {
	opts Options
	mq   *mqtt.Server
	quic *QUICListener
	tcp  *listeners.TCP
	tlsl *listeners.TCP // MQTT over TLS (tls.go)
	ws   *wsListener    // MQTT over WebSocket (ws.go)
	// wsAll are the WebSocket listeners, the one on the broker's port
	// included.
	wsAll []*wsListener
	wss   *wsListener // MQTT over secure WebSocket (ws.go)
	// mounted serves MQTT over WebSocket on the broker's port (ws.go).
	mounted wsMounter
	br      *bridge
	// compat is kept for tests (CONNACK marks left over).
	compat *compatHook

	closeOnce sync.Once
	resetKey  *quic.StatelessResetKey // from DataDir
}

// New builds the server; Start opens the listeners.
func New(opts Options) (*Server, error) {
	opts.ensureDefaults()
	if (opts.QUICAddr != "off" || opts.TLSAddr != "" || opts.WSSAddr != "") && opts.TLS == nil {
		return nil, errors.New("mqtt server: a TLS configuration is required for MQTT over QUIC, TLS or secure WebSocket")
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
	opts.Limits.apply(caps, opts.Broker == nil)
	caps.TopicAliasMaximum = opts.TopicAliasMaximum
	// Acknowledgements carry no properties of the publish they answer
	// (mochi copies them, user properties included, by default; MQTT 5
	// allows a PUBACK only a reason string and user properties of its own).
	caps.Compatibilities.NoInheritedPropertiesOnAck = true
	mq := mqtt.New(&mqtt.Options{
		Capabilities:             caps,
		ClientNetWriteBufferSize: max(opts.WriteBufferSize, 1), // 1: every packet is at least as large, so none is gathered
		ClientNetReadBufferSize:  opts.ReadBufferSize,
		PollReads:                !opts.ReadLoops,
		Logger:                   slog.New(quietHandler{opts.Logger.Handler()}).With("component", "mqtt"),
		// $SYS topics are refreshed once a minute (mochi's default is 1 s,
		// wasteful on a Pi).
		SysTopicResendInterval: 60,
	})
	compat := &compatHook{mq: mq, maxPacketSize: opts.MaxPacketSize, topicAliasMaximum: opts.TopicAliasMaximum, pre: newPreConnect(opts.Limits)}
	compat.pre.core = opts.Broker
	s := &Server{opts: opts, mq: mq, compat: compat}
	if opts.DataDir != "" {
		so := store.SessionOptions{Dir: opts.DataDir, Server: mq, Logger: opts.Logger}
		if sp := spaceOf(opts.Broker); sp != nil {
			so.Core = sp
		} else if c, ok := opts.Broker.(store.SessionCore); ok {
			so.Core = c
		}
		h, err := store.OpenSessions(so)
		if err != nil {
			return nil, fmt.Errorf("mqtt server: %w", err)
		}
		if err := mq.AddHook(h, nil); err != nil {
			return nil, fmt.Errorf("mqtt server: add session hook: %w", err)
		}
		compat.qosHooks = append(compat.qosHooks, h)
		if s.resetKey, err = store.ResetKey(opts.DataDir); err != nil {
			return nil, fmt.Errorf("mqtt server: %w", err)
		}
	}
	if err := mq.AddHook(compat, nil); err != nil {
		return nil, fmt.Errorf("mqtt server: add compat hook: %w", err)
	}
	if opts.Broker != nil {
		ah := newAuthHook(mq, opts.Broker, opts.Limits, opts.Logger)
		ah.certs = opts.ClientCAs != nil || opts.TLS != nil && opts.TLS.ClientAuth != tls.NoClientCert
		if err := mq.AddHook(ah, nil); err != nil {
			return nil, fmt.Errorf("mqtt server: add auth hook: %w", err)
		}
		compat.qosHooks = append(compat.qosHooks, ah)
		br := newBridge(mq, opts.Broker, ah, opts.Logger)
		s.br = br
		if err := mq.AddHook(br, nil); err != nil {
			return nil, fmt.Errorf("mqtt server: add bridge hook: %w", err)
		}
		if ih := newInterestHook(opts.Broker); ih != nil { // interest.go: cluster interest
			ih.allowed = ah.maySubscribe
			if err := mq.AddHook(ih, nil); err != nil {
				return nil, fmt.Errorf("mqtt server: add interest hook: %w", err)
			}
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
		s.opts.Tuning.ApplyServerTLS(tc)
		if s.opts.ClientCAs != nil {
			tc.ClientCAs = s.opts.ClientCAs
			tc.ClientAuth = tls.VerifyClientCertIfGiven
		}
		s.quic = NewQUICListener(ListenerConfig{
			Address:       s.opts.QUICAddr,
			PacketConn:    s.opts.PacketConn,
			TLS:           tc,
			Tuning:        s.opts.Tuning,
			Tracer:        s.opts.Tracer,
			StreamTimeout: s.opts.StreamTimeout,
			RetryAbove:    s.opts.Limits.QUICRetryAbove,
			Admit:         s.compat.pre.admitQUIC, // connections without CONNECT, per address

			StatelessResetKey: s.resetKey,
		})
		if err := s.mq.AddListener(sessionEnds{s.quic, s.compat}); err != nil {
			return fmt.Errorf("mqtt server: %w", err)
		}
	}
	if s.opts.TCPAddr != "" {
		s.tcp = listeners.NewTCP(listeners.Config{ID: "mqtt-tcp", Address: s.opts.TCPAddr})
		if err := s.mq.AddListener(sessionEnds{s.tcp, s.compat}); err != nil {
			s.closeListeners()
			return fmt.Errorf("mqtt server: %w", err)
		}
		s.warnPlainTCP()
	}
	if err := s.startTLS(); err != nil {
		s.closeListeners()
		return err
	}
	if err := s.startWS(); err != nil {
		s.closeListeners()
		return err
	}
	if err := s.mq.Serve(); err != nil {
		return fmt.Errorf("mqtt server: %w", err)
	}
	// mochi starts each listener's Serve on a goroutine of its own: a
	// WebSocket upgrade that came before it was refused with 503 ("the
	// MQTT server is starting"), so Start returns once they serve.
	for _, l := range s.wsAll {
		<-l.ready
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
	s.closeOnce.Do(func() {
		if s.mounted != nil {
			s.mounted.SetMQTTWebSocket(nil)
		}
		s.compat.shut() // compat.go: no connection reaches mochi once its Close has begun
		err = s.mq.Close()
	})
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
