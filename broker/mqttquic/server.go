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
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
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
	if o.Profile == nil {
		o.Profile = quictune.Default()
	}
	if o.MaxPacketSize == 0 {
		o.MaxPacketSize = 320 << 10
	}
	if o.MaxPendingWrites == 0 {
		o.MaxPendingWrites = 1024
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
	wss  *wsListener    // MQTT over secure WebSocket (ws.go)
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
		Logger:                   slog.New(quietHandler{opts.Logger.Handler()}).With("component", "mqtt"),
		// $SYS topics are refreshed once a minute (mochi's default is 1 s,
		// wasteful on a Pi).
		SysTopicResendInterval: 60,
	})
	compat := &compatHook{mq: mq, maxPacketSize: opts.MaxPacketSize, topicAliasMaximum: opts.TopicAliasMaximum}
	s := &Server{opts: opts, mq: mq, compat: compat}
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

// mochi acknowledges a successful QoS 1 publish with the reason code it
// finds in packets.QosCodes[1], which is 0x01 ("Granted QoS 1", a SUBACK
// code). A PUBACK's success code is 0x00 (MQTT 5 3.4.2.1); paho-mqtt
// (Python) fails on 0x01 and hangs every later publish. The only hook that
// could change the acknowledgement is OnPacketEncode, which mochi runs for
// every packet written, each delivery included; the table's one use in
// mochi v2.7.9 is that acknowledgement (server.go, processPublish), so the
// entry is set here instead, before any server exists.
func init() {
	packets.QosCodes[1] = packets.CodeSuccess
}

// compatHook mends what clients observe of mochi where MQTT 3.1.1 or 5.0
// asks for something else (docs/mqtt.md's conformance table lists them):
//
//   - a PUBLISH mochi would drop without a word (a topic name under $SYS or
//     $share; mochi answers neither PUBACK nor PUBREC, and the publisher
//     waits for ever) is refused as every other refused publish is
//     (answerRefusal);
//   - a QoS 2 PUBLISH re-sent while its PUBREC is outstanding is answered
//     with PUBREC 0x00 and not delivered again (MQTT-4.3.3-10; mochi
//     answers 0x91, which fails the message at the client);
//   - a client that reconnects right after a session that ended with its
//     connection gets a new session, not that one (awaitSessionEnd);
//   - the client's packet identifiers and the server's are kept apart
//     (see idState): mochi shares one map between them;
//   - a PUBLISH that names its topic by alias only has it resolved before
//     mochi's ACL check (which judged the empty name), and one with an
//     alias never set is a protocol error (DISCONNECT 0x82);
//   - CONNACK announces the Maximum Packet Size and the Topic Alias Maximum
//     the server enforces (mochi enforces both but announces neither, so a
//     client could not know them);
//   - a QoS 1 or 2 message larger than a client's Maximum Packet Size is
//     dropped for that client as if it had been delivered (MQTT-3.1.2-25);
//     mochi does not send it either, but keeps it in flight for ever, so
//     it took one of the client's Receive Maximum slots each time;
//   - a QoS 1 or 2 message that waited for flow-control credit (the
//     client's Receive Maximum) stays in flight once sent: mochi removes it
//     from the session when it sends it, so the client's PUBACK returned
//     no credit (after Receive Maximum such messages the client got
//     nothing more, MQTT 5 4.9) and a reconnect would not resend it
//     (MQTT-4.4.0-1); the hook puts it back (OnPacketSent, then the
//     client's next packet or its disconnect);
//   - messages waiting in a session go out in the order they were
//     published (MQTT-4.6.0-6), after waiting for credit and on a
//     reconnect: mochi orders them by uint16(Created), Created being a
//     time in seconds, so within a second in any order; the hook renumbers
//     Created in packet identifier order (identifiers are handed out in
//     publish order) before mochi picks the next one (orderInflight);
//   - PUBLISH packets keep their user properties for clients that asked for
//     no problem information: MQTT 5 (3.1.2.11.7) restricts that flag to
//     other packet types, but mochi strips user properties from every
//     packet, which would lose the "quiot-time" send stamp.
//
// mochi runs OnPacketEncode for every packet written (each delivery), so
// the hook provides it only while a CONNACK is due or once a client has
// asked for no problem information or announced a Maximum Packet Size
// (sticky: most clients never do; quiot's does neither).
type compatHook struct {
	mqtt.HookBase
	mq                *mqtt.Server
	maxPacketSize     uint32
	topicAliasMaximum uint16

	needed     atomic.Bool  // a client asked for no problem information or has a maximum packet size
	flowed     atomic.Bool  // a client announced a Receive Maximum
	sentHeld   sync.Map     // *mqtt.Client -> *[]packets.Packet: held messages sent, to put back in flight
	connacking atomic.Int32 // CONNACKs due (entries in pending)
	pending    sync.Map     // *mqtt.Client -> struct{}: CONNACK due
	ending     sync.Map     // *mqtt.Client -> struct{}: sent DISCONNECT, its session ends with the connection
	ids        sync.Map     // *mqtt.Client -> *idState: packet identifiers used by both sides
	idClients  atomic.Int32 // entries in ids
	conns      sync.Map     // net.Conn -> *connTrack: connections mochi is handling (sessionEnds)
	latest     sync.Map     // client id -> *connTrack: its latest connection with a session

	// Session takeovers (takeover.go).
	takeovers  sync.Map      // old *mqtt.Client -> *takeover
	successors sync.Map      // new *mqtt.Client -> *takeover, until completed
	qosHooks   []qosNotifier // told of messages adopted after a resend
	adopted    atomic.Int64  // late messages handed to the session's new client
	lateLost   atomic.Int64  // late messages that could not be handed on
}

// connTrack follows one connection through mochi's handling of it.
type connTrack struct {
	cl   *mqtt.Client  // set when its session is established (the connection's own goroutine)
	done chan struct{} // closed once mochi is done with the connection
}

// sessionEndWait bounds awaitSessionEnd; it only guards against a clean-up
// that hangs.
const sessionEndWait = 30 * time.Second

// sessionEnds wraps a listener so that the compat hook learns when mochi
// is done with each connection: attachClient has returned, so a session
// that ended with the connection is forgotten by then (awaitSessionEnd).
type sessionEnds struct {
	listeners.Listener
	h *compatHook
}

// Serve serves the wrapped listener, tracking each connection.
func (l sessionEnds) Serve(establish listeners.EstablishFn) {
	l.Listener.Serve(func(id string, c net.Conn) error {
		t := &connTrack{done: make(chan struct{})}
		l.h.conns.Store(c, t)
		defer func() {
			l.h.conns.Delete(c)
			if t.cl != nil {
				l.h.completeTakeover(t.cl) // if its CONNACK never went out
				l.h.latest.CompareAndDelete(t.cl.ID, t)
			}
			close(t.done)
		}()
		return establish(id, c)
	})
}

// ID names the hook.
func (h *compatHook) ID() string { return "quiot-compat" }

// Provides reports the events the hook handles.
func (h *compatHook) Provides(b byte) bool {
	switch b {
	case mqtt.OnConnect, mqtt.OnSessionEstablish, mqtt.OnSessionEstablished, mqtt.OnPacketRead, mqtt.OnDisconnect,
		mqtt.OnQosPublish:
		return true
	case mqtt.OnPacketEncode:
		return h.needed.Load() || h.connacking.Load() > 0
	case mqtt.OnPacketSent:
		return h.flowed.Load()
	case mqtt.OnPacketProcessed:
		return h.idClients.Load() > 0
	}
	return false
}

// OnConnect turns server-to-client topic aliases off for sessions that
// may outlive the connection, the encoding hook on when a client asks for
// no problem information or announces a Maximum Packet Size, and the
// sent-message hook when it announces a Receive Maximum (before anything
// is written to it).
func (h *compatHook) OnConnect(cl *mqtt.Client, _ packets.Packet) error {
	if cl.Properties.ProtocolVersion == 5 && cl.Properties.Props.SessionExpiryInterval > 0 {
		// A session that may outlive its connection gets no topic
		// aliases from the server: mochi queues a delivery as sent (with
		// the alias and no topic name) and resends it so on the next
		// connection, where the alias means nothing (aliases last for
		// one connection, MQTT 5 3.3.2.3.4): the client closes for the
		// protocol error and meets the same message at every reconnect.
		// The server need not use aliases at all; sessions that end
		// with their connection keep them.
		cl.Properties.Props.TopicAliasMaximum = 0
	}
	if p := cl.Properties.Props; p.RequestProblemInfoFlag && p.RequestProblemInfo == 0 || p.MaximumPacketSize > 0 {
		h.needed.Store(true)
	}
	if cl.Properties.Props.ReceiveMaximum > 0 {
		h.flowed.Store(true)
	}
	return nil
}

// OnPacketSent notes a QoS 1 or 2 message that had waited for credit
// (mochi marks it with Expiry -1, sends it from the client's reading
// goroutine and then deletes it from the session).
func (h *compatHook) OnPacketSent(cl *mqtt.Client, pk packets.Packet, _ []byte) {
	if pk.FixedHeader.Type != packets.Publish || pk.FixedHeader.Qos == 0 || pk.Expiry >= 0 {
		return
	}
	v, _ := h.sentHeld.LoadOrStore(cl, new([]packets.Packet))
	l := v.(*[]packets.Packet)
	*l = append(*l, pk)
}

// restoreHeld puts the held messages sent to cl back in flight.
func (h *compatHook) restoreHeld(cl *mqtt.Client) {
	v, ok := h.sentHeld.LoadAndDelete(cl)
	if !ok {
		return
	}
	for _, pk := range *v.(*[]packets.Packet) {
		pk.Expiry = 0
		if cl.State.Inflight.Set(pk) {
			atomic.AddInt64(&h.mq.Info.Inflight, 1)
		}
	}
}

// OnDisconnect keeps held messages sent, and deliveries and QoS 2 states
// set aside, in the session (resent when the client returns), and forgets
// the client's marks.
func (h *compatHook) OnDisconnect(cl *mqtt.Client, _ error, _ bool) {
	h.restoreHeld(cl)
	h.unmark(cl)
	h.ending.Delete(cl) // Closed() holds from here on
	if v, ok := h.ids.Load(cl); ok {
		h.dropIDState(cl, v.(*idState), true)
	}
}

// OnSessionEstablish (authenticated, CONNACK next) waits for the end of a
// session that ended with its connection, notes a session takeover
// (takeover.go) and marks the client's CONNACK (limits' properties for
// MQTT 5, the session's order for all).
func (h *compatHook) OnSessionEstablish(cl *mqtt.Client, pk packets.Packet) {
	h.awaitSessionEnd(cl)
	h.noteTakeover(cl, pk)
	if _, loaded := h.pending.LoadOrStore(cl, struct{}{}); !loaded {
		h.connacking.Add(1)
	}
}

// awaitSessionEnd waits, before cl's session is established, until mochi
// is done with the previous connection of cl's client id if that
// connection's session ended with it (MQTT 5 Session Expiry 0, 3.1.1
// Clean Session 1). mochi closes the connection first and forgets the
// session a moment later, by client id: its subscriptions and its entry in
// the client table. A client reconnecting in between got that session back
// (Session Present 1, its subscriptions) instead of a new one
// (MQTT-3.1.2-23), or, once mochi's expiry sweep had already dropped the
// old client from the table, a new session that the end of the clean-up
// then forgot (no longer held, subscriptions gone). The wait is for the
// event (sessionEnds), bounded only in case the clean-up hangs.
func (h *compatHook) awaitSessionEnd(cl *mqtt.Client) {
	var cur *connTrack
	if v, ok := h.conns.Load(cl.Net.Conn); ok {
		cur = v.(*connTrack)
		cur.cl = cl
	}
	if v, ok := h.latest.Load(cl.ID); ok {
		prev := v.(*connTrack)
		old := prev.cl
		if _, disconnecting := h.ending.Load(old); disconnecting || old.Closed() && endsWithConnection(old) {
			t := time.NewTimer(sessionEndWait)
			select {
			case <-prev.done:
			case <-t.C:
			}
			t.Stop()
		}
	}
	if cur != nil {
		h.latest.Store(cl.ID, cur)
	}
}

// endsWithConnection reports whether cl's session ends when its connection
// does (mochi's rule in attachClient).
func endsWithConnection(cl *mqtt.Client) bool {
	if cl.Properties.ProtocolVersion == 5 {
		return cl.Properties.Props.SessionExpiryInterval == 0
	}
	return cl.Properties.Clean
}

// OnSessionEstablished (CONNACK written) forgets a mark its CONNACK did not
// consume.
//
// It also takes the messages mochi has just resent (a resumed session)
// from the client's flow-control credit: mochi resets the credit to the
// client's Receive Maximum at a reconnect and resends without counting, so
// it would then send Receive Maximum new messages on top (MQTT 5 4.9).
func (h *compatHook) OnSessionEstablished(cl *mqtt.Client, _ packets.Packet) {
	h.unmark(cl)
	rm := int(cl.Properties.Props.ReceiveMaximum)
	if rm == 0 || cl.State.Inflight.Len() == 0 {
		return
	}
	h.restoreHeld(cl) // those resent are in flight like the others
	n := 0
	for _, pk := range cl.State.Inflight.GetAll(false) {
		if isOutbound(pk) && pk.Expiry >= 0 {
			n++
		}
	}
	for i := 0; i < n && i < rm; i++ {
		cl.State.Inflight.DecreaseSendQuota()
	}
}

func (h *compatHook) unmark(cl *mqtt.Client) bool {
	if _, ok := h.pending.LoadAndDelete(cl); ok {
		h.connacking.Add(-1)
		return true
	}
	return false
}

// OnPacketEncode adds the limits to a marked CONNACK and re-allows
// properties on outgoing PUBLISH packets.
func (h *compatHook) OnPacketEncode(cl *mqtt.Client, pk packets.Packet) packets.Packet {
	switch pk.FixedHeader.Type {
	case packets.Publish:
		pk.Mods.DisallowProblemInfo = false
		if pk.FixedHeader.Qos > 0 && pk.Mods.MaxSize > 0 && publishSizeBound(pk) > pk.Mods.MaxSize && tooLarge(pk) {
			// mochi will not write it (WritePacket checks the size after
			// this hook) and would keep it in flight: complete it here.
			if cl.State.Inflight.Delete(pk.PacketID) {
				atomic.AddInt64(&h.mq.Info.Inflight, -1)
				cl.State.Inflight.IncreaseSendQuota()
			}
			atomic.AddInt64(&h.mq.Info.MessagesDropped, 1)
		}
	case packets.Connack:
		if h.unmark(cl) && pk.ReasonCode == packets.CodeSuccess.Code {
			if cl.Properties.ProtocolVersion == 5 {
				pk.Properties.MaximumPacketSize = h.maxPacketSize
				pk.Properties.TopicAliasMaximum = h.topicAliasMaximum
			}
			// mochi has handed cl the session: messages queued on the
			// old client after the copy join the queue (takeover.go),
			// which is resent right after CONNACK.
			h.completeTakeover(cl)
			orderInflight(cl, false)
		}
	}
	return pk
}

// orderInflight renumbers the Created field of cl's QoS 1 and 2 messages in
// flight (only those waiting for credit if held) so that mochi's order,
// uint16(Created), is the order they were published in. That is packet
// identifier order, read on the circle of identifiers: mochi hands them out
// increasing and wrapping, and those in flight span less than half of it
// (at most Capabilities.MaximumInflight), so the first one follows the
// widest gap. With MaximumMessageExpiryInterval 0 (New) mochi uses Created
// for nothing else.
func orderInflight(cl *mqtt.Client, held bool) {
	all := cl.State.Inflight.GetAll(held)
	pubs := all[:0]
	for _, pk := range all {
		if pk.FixedHeader.Type == packets.Publish {
			pubs = append(pubs, pk)
		}
	}
	if len(pubs) < 2 {
		return
	}
	sort.Slice(pubs, func(i, j int) bool { return pubs[i].PacketID < pubs[j].PacketID })
	start, gap := 0, int(pubs[0].PacketID)+65536-int(pubs[len(pubs)-1].PacketID)
	for i := 1; i < len(pubs); i++ {
		if g := int(pubs[i].PacketID) - int(pubs[i-1].PacketID); g > gap {
			start, gap = i, g
		}
	}
	for i := range pubs {
		pk := pubs[(start+i)%len(pubs)]
		if want := int64(i + 1); pk.Created != want {
			pk.Created = want
			cl.State.Inflight.Set(pk)
		}
	}
}

// publishSizeBound is at least the encoded size of pk (cheap: no
// encoding).
func publishSizeBound(pk packets.Packet) uint32 {
	n := 5 + 2 + len(pk.TopicName) + 2 + len(pk.Payload) + 64 // fixed header, topic, id, payload, fixed-size properties
	p := pk.Properties
	n += len(p.ContentType) + len(p.ResponseTopic) + len(p.CorrelationData) + 5*len(p.SubscriptionIdentifier) + 12
	for _, u := range p.User {
		n += 5 + len(u.Key) + len(u.Val)
	}
	return uint32(n)
}

// tooLarge reports whether pk, encoded as mochi will encode it, exceeds
// pk.Mods.MaxSize.
func tooLarge(pk packets.Packet) bool {
	var buf bytes.Buffer
	if err := pk.PublishEncode(&buf); err != nil {
		return false
	}
	return uint32(buf.Len()) > pk.Mods.MaxSize
}

// OnPacketRead answers the PUBLISH packets mochi would leave unanswered.
// It never refuses a packet itself (a refusal here would close the
// connection): mochi then processes it as usual.
func (h *compatHook) OnPacketRead(cl *mqtt.Client, pk packets.Packet) (packets.Packet, error) {
	if h.flowed.Load() {
		h.restoreHeld(cl) // before this packet (perhaps their PUBACK) is processed
		if t := pk.FixedHeader.Type; cl.Properties.Props.ReceiveMaximum > 0 && (t == packets.Puback || t == packets.Pubcomp) {
			orderInflight(cl, true) // mochi may send the next held message after this one
		}
	}
	if pk.FixedHeader.Type == packets.Pubrel {
		h.unparkForPubrel(cl, pk.PacketID)
		return pk, nil
	}
	if pk.FixedHeader.Type == packets.Disconnect {
		// mochi closes the connection before it forgets the session;
		// awaitSessionEnd needs to know from the start.
		ends := cl.Properties.Clean
		if cl.Properties.ProtocolVersion == 5 {
			ends = cl.Properties.Props.SessionExpiryInterval == 0
			if pk.Properties.SessionExpiryIntervalFlag {
				ends = pk.Properties.SessionExpiryInterval == 0
			}
		}
		if ends {
			h.ending.Store(cl, struct{}{})
		}
		return pk, nil
	}
	if t := pk.FixedHeader.Type; (t == packets.Subscribe || t == packets.Unsubscribe) && !cl.Net.Inline {
		// mochi refuses a SUBSCRIBE or UNSUBSCRIBE whose identifier a
		// delivery to the client holds (0x91 in every SUBACK/UNSUBACK
		// code), though the two are separate spaces: a client resuming
		// a session with queued messages had its first SUBSCRIBE refused.
		// The delivery is set aside while mochi processes the packet
		// (OnPacketProcessed puts it back).
		if out, ok := cl.State.Inflight.Get(pk.PacketID); ok && isOutbound(out) {
			h.idState(cl).saved = &out
			h.deleteInflight(cl, pk.PacketID)
		}
		return pk, nil
	}
	if pk.FixedHeader.Type != packets.Publish || cl.Net.Inline {
		return pk, nil
	}
	if pk.PublishValidate(h.topicAliasMaximum) != packets.CodeSuccess {
		return pk, nil // mochi disconnects for the protocol error
	}
	if pk.Properties.TopicAliasFlag && pk.TopicName == "" {
		// mochi resolves the alias only after its ACL check, which then
		// judged the empty topic name; an alias never set gave an empty
		// topic name instead of a protocol error (MQTT 5 3.3.2.3.4).
		pk.TopicName = cl.State.TopicAliases.Inbound.Set(pk.Properties.TopicAlias, "")
		if pk.TopicName == "" {
			_ = cl.WritePacket(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Disconnect},
				ReasonCode: packets.ErrProtocolViolation.Code, Properties: packets.Properties{ReasonString: "topic alias not set"}})
			return pk, packets.ErrRejectPacket
		}
	}
	if pk.FixedHeader.Qos == 0 {
		return pk, nil
	}
	if !mqtt.IsValidFilter(pk.TopicName, true) {
		// mochi ignores the packet (processPublish returns before any
		// acknowledgement); answer it here.
		answerRefusal(cl, pk, packets.Code{Code: packets.ErrNotAuthorized.Code, Reason: "topic name reserved for the broker"})
		return pk, nil
	}
	if pk.FixedHeader.Qos == 2 {
		in, ok := cl.State.Inflight.Get(pk.PacketID)
		if ok && in.FixedHeader.Type == packets.Pubrec && in.ReasonCode < packets.ErrUnspecifiedError.Code || h.parkedHas(cl, pk.PacketID) {
			// A re-sent QoS 2 PUBLISH (its PUBREC was lost): acknowledge
			// again and let mochi ignore it (a $SYS topic name is the one
			// thing processPublish drops before any acknowledgement).
			_ = cl.WritePacket(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pubrec}, PacketID: pk.PacketID})
			pk.TopicName = mqtt.SysPrefix + "/quiot/duplicate"
			pk.Properties.TopicAlias, pk.Properties.TopicAliasFlag = 0, false
			return pk, nil
		}
	}
	if out, ok := cl.State.Inflight.Get(pk.PacketID); ok && isOutbound(out) {
		// mochi will delete this delivery from the session (it takes the
		// identifier for the client's own); OnPacketProcessed puts it back.
		h.idState(cl).saved = &out
	}
	return pk, nil
}

// Packet identifiers: the client's (its publishes) and the server's (its
// deliveries) are separate spaces, but mochi keeps both in one map per
// session (Inflight). The hook keeps them apart: a delivery whose
// identifier a client's publish reuses is put back after mochi processed
// the publish, and the client's QoS 2 state (PUBREC awaiting PUBREL) that
// would then share the slot is parked beside the map until its PUBREL
// comes. All of it runs in the client's reading goroutine (OnPacketRead,
// OnPacketProcessed, OnDisconnect), so idState needs no lock. Known gap: a
// session taken over by a new connection while a QoS 2 state is parked
// loses that state (a re-sent duplicate would then be delivered twice).
type idState struct {
	saved  *packets.Packet           // delivery to restore after this packet
	parked map[uint16]packets.Packet // client's PUBREC states displaced by deliveries
}

// isOutbound reports whether an Inflight entry belongs to a delivery from
// the server (PUBLISH awaiting PUBACK/PUBREC, PUBREL awaiting PUBCOMP)
// rather than to the client's QoS 2 publish (PUBREC awaiting PUBREL).
func isOutbound(pk packets.Packet) bool {
	return pk.FixedHeader.Type == packets.Publish || pk.FixedHeader.Type == packets.Pubrel
}

func (h *compatHook) idState(cl *mqtt.Client) *idState {
	if v, ok := h.ids.Load(cl); ok {
		return v.(*idState)
	}
	st := &idState{parked: map[uint16]packets.Packet{}}
	h.ids.Store(cl, st)
	h.idClients.Add(1)
	return st
}

func (h *compatHook) parkedHas(cl *mqtt.Client, id uint16) bool {
	if h.idClients.Load() == 0 {
		return false
	}
	v, ok := h.ids.Load(cl)
	if !ok {
		return false
	}
	_, ok = v.(*idState).parked[id]
	return ok
}

// setInflight puts pk in cl's session, counted as mochi counts.
func (h *compatHook) setInflight(cl *mqtt.Client, pk packets.Packet) {
	if cl.State.Inflight.Set(pk) {
		atomic.AddInt64(&h.mq.Info.Inflight, 1)
	}
}

// deleteInflight removes id from cl's session, counted as mochi counts.
func (h *compatHook) deleteInflight(cl *mqtt.Client, id uint16) {
	if cl.State.Inflight.Delete(id) {
		atomic.AddInt64(&h.mq.Info.Inflight, -1)
	}
}

// unparkForPubrel brings a parked QoS 2 state back into the session for
// the client's PUBREL, saving the delivery that holds the slot.
func (h *compatHook) unparkForPubrel(cl *mqtt.Client, id uint16) {
	if !h.parkedHas(cl, id) {
		return
	}
	st := h.idState(cl)
	if out, ok := cl.State.Inflight.Get(id); ok && isOutbound(out) {
		st.saved = &out
		h.deleteInflight(cl, id)
	}
	h.setInflight(cl, st.parked[id])
	delete(st.parked, id)
}

// OnPacketProcessed puts back a delivery saved for this packet, parking the
// client's QoS 2 state that took its slot.
func (h *compatHook) OnPacketProcessed(cl *mqtt.Client, pk packets.Packet, _ error) {
	v, ok := h.ids.Load(cl)
	if !ok {
		return
	}
	st := v.(*idState)
	if st.saved != nil && st.saved.PacketID == pk.PacketID {
		restore := true
		if cur, ok := cl.State.Inflight.Get(pk.PacketID); ok {
			if cur.FixedHeader.Type == packets.Pubrec && !isOutbound(cur) {
				st.parked[pk.PacketID] = cur
				h.deleteInflight(cl, pk.PacketID)
			} else {
				restore = false // a new delivery got the identifier meanwhile
			}
		}
		if restore {
			h.setInflight(cl, *st.saved)
		} else if id, err := cl.NextPacketID(); err == nil {
			// Kept under another identifier: sent again at the next
			// reconnect (a duplicate, not a loss).
			saved := *st.saved
			saved.PacketID = uint16(id)
			h.setInflight(cl, saved)
		} else {
			atomic.AddInt64(&h.mq.Info.InflightDropped, 1)
		}
		st.saved = nil
	}
	h.dropIDState(cl, st, false)
}

// dropIDState forgets st once empty, or (at the session's end) puts what
// it holds back into the session where the slot is free.
func (h *compatHook) dropIDState(cl *mqtt.Client, st *idState, end bool) {
	if end {
		if st.saved != nil {
			if _, ok := cl.State.Inflight.Get(st.saved.PacketID); !ok {
				h.setInflight(cl, *st.saved)
			}
		}
		for id, pk := range st.parked {
			if _, ok := cl.State.Inflight.Get(id); !ok {
				h.setInflight(cl, pk)
			}
		}
		st.saved, st.parked = nil, nil
	}
	if st.saved == nil && len(st.parked) == 0 {
		if _, ok := h.ids.LoadAndDelete(cl); ok {
			h.idClients.Add(-1)
		}
	}
}

// answerRefusal tells the publisher of pk that it was not accepted, as the
// protocol version allows:
//
//   - MQTT 5, QoS 1: PUBACK with code; QoS 2: PUBREC with code (MQTT 5
//     3.4.2.1 and 3.5.2.1: a reason of 0x80 or above ends the exchange);
//   - MQTT 3.1.1, QoS 1 or 2: it has no way to say no, and the server must
//     either acknowledge or close the network connection (MQTT-3.3.5-2).
//     The connection is closed: a positive acknowledgement would lose the
//     message without the publisher ever knowing (mochi does the same
//     for a publish the ACL denies);
//   - QoS 0: nothing (there is no acknowledgement to carry a refusal).
func answerRefusal(cl *mqtt.Client, pk packets.Packet, code packets.Code) {
	switch {
	case pk.FixedHeader.Qos == 0:
	case cl.Properties.ProtocolVersion == 5:
		_ = cl.WritePacket(refusalAck(pk, code))
	default:
		cl.Stop(code)
	}
}

// refusalAck is the MQTT 5 PUBACK (QoS 1) or PUBREC (QoS 2) refusing pk
// with code, its reason string the code's reason and no other property.
func refusalAck(pk packets.Packet, code packets.Code) packets.Packet {
	t := packets.Puback
	if pk.FixedHeader.Qos == 2 {
		t = packets.Pubrec
	}
	ack := packets.Packet{FixedHeader: packets.FixedHeader{Type: t}, PacketID: pk.PacketID, ReasonCode: code.Code}
	ack.Properties.ReasonString = code.Reason
	return ack
}

// quietHandler fits mochi's log records to quiot's levels: what a client
// does (connecting, leaving, a malformed packet, a refused publish) is
// Debug or Info, never a warning or an error, and every record has a
// message. mochi's Info records (hooks added, listeners attached, every
// client connecting) become Debug; packet attributes become a one-line
// summary instead of the whole packet with its payload.
type quietHandler struct{ slog.Handler }

// Enabled reports whether records at level l might be logged (the level
// of a rewritten record is decided in Handle).
func (h quietHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.Handler.Enabled(ctx, slog.LevelDebug) || h.Handler.Enabled(ctx, l)
}

// Handle logs r with its level and message rewritten.
func (h quietHandler) Handle(ctx context.Context, r slog.Record) error {
	r = rewriteRecord(r)
	if !h.Handler.Enabled(ctx, r.Level) {
		return nil
	}
	return h.Handler.Handle(ctx, r)
}

// WithAttrs keeps the rewriting on derived handlers.
func (h quietHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return quietHandler{h.Handler.WithAttrs(as)}
}

// WithGroup keeps the rewriting on derived handlers.
func (h quietHandler) WithGroup(name string) slog.Handler {
	return quietHandler{h.Handler.WithGroup(name)}
}

// mochiClientRecords are mochi's records about a client's doing, with the
// message and level quiot logs them at.
var mochiClientRecords = map[string]struct {
	msg   string
	level slog.Level
}{
	// processPacket failed: the client sent a packet MQTT does not allow.
	"error processing packet": {"mqtt client sent a packet that breaks the protocol", slog.LevelInfo},
	// A hook returned an error for a publish (quiot's hooks answer
	// refusals themselves, see answerRefusal).
	"publish packet error":    {"mqtt publish refused", slog.LevelInfo},
	"publish packet rejected": {"mqtt publish refused", slog.LevelDebug},
	"packet rejected":         {"mqtt packet refused", slog.LevelDebug},
	// A client chose a keep-alive mochi finds short (it is allowed).
	mqtt.ErrMinimumKeepalive.Error(): {"mqtt client keep-alive is short", slog.LevelDebug},
}

// rewriteRecord returns r with quiot's level and message and without
// whole packets.
func rewriteRecord(r slog.Record) slog.Record {
	level, msg := r.Level, r.Message
	if level == slog.LevelInfo {
		level = slog.LevelDebug
	}
	var errv error
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "error" {
			errv, _ = a.Value.Any().(error)
		}
		return true
	})
	var code packets.Code
	if m, ok := mochiClientRecords[msg]; ok {
		level, msg = m.level, m.msg
		if errors.As(errv, &code) && code.Code == packets.ErrNotAuthorized.Code {
			// An MQTT 3.1.1 client is disconnected for a publish the ACL
			// denies: a refusal the auth hook logged ("mqtt publish
			// refused"), not a broken protocol.
			level, msg = slog.LevelDebug, "mqtt client disconnected after a refusal"
		}
	} else if msg == "" {
		// mochi's TCP listener logs the end of every connection as a
		// warning without a message.
		level, msg = connEndLevel(errv), "mqtt connection ended"
	}
	out := slog.NewRecord(r.Time, level, msg, r.PC)
	r.Attrs(func(a slog.Attr) bool {
		if pk, ok := a.Value.Any().(packets.Packet); ok {
			a = slog.String(a.Key, packetSummary(pk))
		}
		out.AddAttrs(a)
		return true
	})
	return out
}

// connEndLevel is Debug for a connection that ended as connections do (the
// client left, the server closed it), Info for one that ended in an error
// the client caused (a malformed packet, refused credentials, keep-alive
// expired).
func connEndLevel(err error) slog.Level {
	switch {
	case err == nil, errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed),
		errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE), errors.Is(err, mqtt.ErrConnectionClosed):
		return slog.LevelDebug
	}
	return slog.LevelInfo
}

// packetSummary describes pk in one line without its payload.
func packetSummary(pk packets.Packet) string {
	s := fmt.Sprintf("type=%d qos=%d id=%d", pk.FixedHeader.Type, pk.FixedHeader.Qos, pk.PacketID)
	if pk.FixedHeader.Type == packets.Publish {
		s += fmt.Sprintf(" topic=%q payload_bytes=%d", pk.TopicName, len(pk.Payload))
	}
	return s
}
