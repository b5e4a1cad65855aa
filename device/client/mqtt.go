package client

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/eclipse/paho.golang/packets"
	"github.com/eclipse/paho.golang/paho"
	"github.com/eclipse/paho.golang/paho/session"
	"github.com/quic-go/quic-go"

	"github.com/quiot/quiot/internal/probehold"
	"github.com/quiot/quiot/internal/streamconn"
	"github.com/quiot/quiot/internal/topic"
	"github.com/quiot/quiot/internal/wire"
)

// MQTT over QUIC (mqtt-quic://, single-stream mode as EMQX and NanoMQ
// speak it), MQTT over TCP (mqtt://) and MQTT over TLS (mqtts://, TLS 1.3),
// all MQTT 5 through eclipse/paho.golang's autopaho.

const (
	// mqttALPN is the TLS application protocol of MQTT over QUIC.
	mqttALPN = "mqtt"
	// mqttSessionExpiry keeps the broker-side session (subscriptions,
	// unacknowledged QoS 1 messages) across short disconnects.
	mqttSessionExpiry   = 600 // seconds
	defaultMQTTQUICPort = "14567"
	defaultMQTTTCPPort  = "1883"
	defaultMQTTTLSPort  = "8883"
)

func init() {
	registerScheme("mqtt-quic", newMQTT)
	registerScheme("mqtt", newMQTT)
	registerScheme("mqtts", newMQTT)
}

// ErrMQTTRefused wraps a broker's refusal (CONNACK, SUBACK or PUBACK with a
// failure reason code).
var ErrMQTTRefused = errors.New("mqtt broker refused")

type mqttSub struct {
	filter string
	h      func(Message)
	active bool            // the broker acknowledged the subscription
	ctx    context.Context // the Subscribe call's (WithSubscribed)
}

type mqttClient struct {
	opts   *Options
	u      *url.URL
	quic   bool
	tls    bool // mqtts://: MQTT over TLS on TCP
	addr   string
	id     string
	ctx    context.Context
	cancel context.CancelFunc

	mu      sync.Mutex
	cm      *autopaho.ConnectionManager
	tr      *quic.Transport // every QUIC connection of the client runs on it
	gate    zeroRTTGate     // orders a 0-RTT stream before the broker's parameters (zerortt_gate.go)
	ownPC   net.PacketConn  // the socket we created; nil when Options.PacketConn is used
	outage  *outageUDP      // the socket as quic-go sees it (netdown.go); nil for a wrapped Options.PacketConn
	qc      *quic.Conn      // the last QUIC connection dialled (migrate.go)
	mig     *migrator       // nil without an address watch
	subs    map[int]*mqttSub
	nextSub int
	fatal   error // a refusal that ends all attempts
	closed  bool
	// connCtx ends when the current connection is lost (connLost).
	connCtx  context.Context
	connLost context.CancelFunc

	report *connReport

	// early is a publish offered for the first connection's first flight,
	// behind the CONNECT (in 0-RTT data when resumed; mqtt0rtt.go); the
	// dial that takes it clears it.
	early *mqttEarly
	// hold is the RTT the handshake probe hold uses (0: none);
	// holdFromSession says it came from the session cache (h3probe.go).
	hold            time.Duration
	holdFromSession bool

	connects  atomic.Int64
	handshake atomic.Int64 // ns, first connection
	dialStart atomic.Int64 // unix ns of the current TCP attempt
}

func newMQTT(u *url.URL, opts *Options) (Client, error) {
	c := &mqttClient{opts: opts, u: u, quic: strings.EqualFold(u.Scheme, "mqtt-quic"), tls: strings.EqualFold(u.Scheme, "mqtts"), subs: map[int]*mqttSub{}}
	c.connCtx, c.connLost = context.WithCancel(context.Background())
	port := u.Port()
	if port == "" {
		switch {
		case c.quic:
			port = defaultMQTTQUICPort
		case c.tls:
			port = defaultMQTTTLSPort
		default:
			port = defaultMQTTTCPPort
		}
	}
	c.addr = net.JoinHostPort(u.Hostname(), port)
	c.report = &connReport{log: opts.Logger, addr: strings.ToLower(u.Scheme) + "://" + c.addr, timeout: opts.ConnectTimeout}
	c.id = opts.ClientID
	if c.id == "" {
		var b [6]byte
		_, _ = rand.Read(b[:])
		c.id = "quiot-" + hex.EncodeToString(b[:])
	}
	if len(c.id) > 23 {
		opts.Logger.Debug("mqtt client id longer than 23 bytes; some brokers refuse it", "client_id", c.id)
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	return c, nil
}

// mqttMinKeepAlive is the shortest MQTT keep-alive of an MQTT over QUIC
// connection whose QUIC keep-alive is on (keepAlive).
const mqttMinKeepAlive = 60 * time.Second

// keepAlive is the MQTT keep-alive in seconds (docs/TUNING.md, "MQTT
// keep-alive").
//
// Over QUIC with a QUIC keep-alive, QUIC's PINGs keep the NAT mapping and
// the idle timer alive and its idle timeout finds a dead path, so the MQTT
// keep-alive only checks that the broker's MQTT side still answers: the
// idle timeout, at least 60 s. It must not follow the QUIC keep-alive: paho
// ends the connection when a PINGRESP comes later than one keep-alive
// period, which a short period turns into a reconnect whenever a path
// change delays an answer by a second or two.
//
// Without a QUIC keep-alive (and over TCP, where the profile's keep-alive
// period stands for the transport's) the PINGREQs are what keeps a quiet
// connection open: the profile's keep-alive when set, else two thirds of
// the idle timeout, so they always arrive before the idle timer fires.
func (c *mqttClient) keepAlive() uint16 {
	p := c.opts.Tuning
	idle := time.Duration(p.MaxIdleTimeout)
	if idle == 0 {
		idle = 30 * time.Second
	}
	ka := time.Duration(p.KeepAlivePeriod)
	switch {
	case c.quic && ka > 0 && ka < idle:
		ka = max(idle, mqttMinKeepAlive)
	case ka == 0 || ka >= idle:
		ka = idle * 2 / 3
	}
	s := int(ka / time.Second)
	if s < 1 {
		s = 1
	}
	if s > 65535 {
		s = 65535
	}
	return uint16(s)
}

func (c *mqttClient) tlsConfig() *tls.Config {
	tc := &tls.Config{
		ServerName:         c.u.Hostname(),
		RootCAs:            c.opts.RootCAs,
		InsecureSkipVerify: c.opts.Insecure, //nolint:gosec // development flag, documented
		NextProtos:         []string{mqttALPN},
	}
	if c.opts.Certificate != nil {
		tc.Certificates = []tls.Certificate{*c.opts.Certificate}
	}
	pinTLS(tc, c.opts.PinSHA256)
	tc.ClientSessionCache = c.opts.SessionCache // shared across clients when set
	c.opts.Tuning.ApplyClientTLS(tc)
	return tc
}

// dial opens the network connection for one MQTT session, read through a
// buffer (mqttconn.go).
func (c *mqttClient) dial(ctx context.Context, _ autopaho.ClientConfig, _ *url.URL) (net.Conn, error) {
	nc, err := c.dialConn(ctx)
	if err != nil {
		return nil, err
	}
	return bufferReads(nc), nil
}

// dialConn opens the network connection for one MQTT session.
func (c *mqttClient) dialConn(ctx context.Context) (net.Conn, error) {
	start := time.Now()
	c.dialStart.Store(start.UnixNano())
	if !c.quic {
		var d net.Dialer
		nc, err := d.DialContext(ctx, "tcp", c.addr)
		if err != nil {
			return nil, &dialError{addr: c.addr, err: err}
		}
		if c.tls {
			tc := c.tlsConfig()
			tc.NextProtos = nil // MQTT over TLS names no ALPN protocol
			tlc := tls.Client(nc, tc)
			if err := tlc.HandshakeContext(ctx); err != nil {
				_ = nc.Close()
				return nil, &dialError{addr: c.addr, err: fmt.Errorf("mqtts handshake: %w", err)}
			}
			if c.handshake.Load() == 0 {
				c.handshake.CompareAndSwap(0, int64(time.Since(start)))
			}
			nc = tlc
		}
		return packets.NewThreadSafeConn(nc), nil
	}
	qconf := c.opts.Tuning.QUICConfig()
	qconf.TokenStore = c.opts.TokenStore // the token's RTT on reconnects (h3.go)
	if c.opts.Tracer != nil {
		qconf.Tracer = c.opts.Tracer
	}
	hctx := ctx
	if t := c.opts.ConnectTimeout; t > 0 || qconf.HandshakeIdleTimeout == 0 {
		if t <= 0 {
			t = 15 * time.Second
		}
		var cancel context.CancelFunc
		hctx, cancel = context.WithTimeout(ctx, t)
		defer cancel()
	}
	ua, err := net.ResolveUDPAddr("udp", c.addr)
	if err != nil {
		return nil, &dialError{addr: c.addr, err: fmt.Errorf("mqtt-quic resolve: %w", err)}
	}
	tr, err := c.transport()
	if err != nil {
		return nil, err
	}
	dialQUIC := tr.Dial
	tc := c.tlsConfig()
	if qconf.Allow0RTT {
		// With a session ticket the connection comes back at once, and
		// CONNECT (and an early PUBLISH) go in 0-RTT data (mqtt0rtt.go).
		dialQUIC = tr.DialEarly
		gateSessions(tc, &c.gate)
		defer c.gate.release() // the dial failed or opened no early stream
	}
	c.mu.Lock()
	early := c.early
	c.early = nil
	c.mu.Unlock()
	handed := false
	defer func() {
		if early != nil && !handed {
			early.finish(0, nil, errEarlyLost) // it did not go out: publish the ordinary way
		}
	}()
	qc, err := dialQUIC(hctx, ua, tc, qconf)
	if err != nil {
		if ctx.Err() == nil && hctx.Err() != nil {
			err = errors.New("no answer over UDP in time")
		}
		return nil, &dialError{addr: c.addr, err: fmt.Errorf("mqtt-quic: %w", err)}
	}
	select {
	case <-qc.HandshakeComplete():
		c.handshake.CompareAndSwap(0, int64(time.Since(start)))
	default: // 0-RTT: the handshake completes with the broker's answer
		if testHookEarlyDialed != nil {
			testHookEarlyDialed()
		}
		early0 := early
		go func() {
			select {
			case <-qc.HandshakeComplete():
				c.handshake.CompareAndSwap(0, int64(time.Since(start)))
			case <-qc.Context().Done():
			}
		}()
		if early0 != nil {
			// 0-RTT: within the limits the ticket remembered, opened
			// before the broker's transport parameters are read.
			var s *quic.Stream
			err := errEarlyLost
			c.gate.openEarly(func() { s, err = qc.OpenStream() })
			if err == nil {
				c.mu.Lock()
				if c.outage != nil {
					c.outage.arm()
				}
				c.qc = qc
				mig := c.mig
				c.mu.Unlock()
				mig.connected(qc)
				handed = true
				return newEarlyConn(streamconn.New(qc, s, true), early0), nil
			}
		}
	}
	c.mu.Lock()
	if c.outage != nil {
		c.outage.arm()
	}
	c.qc = qc
	mig := c.mig
	c.mu.Unlock()
	mig.connected(qc)
	s, err := c.openStream(ctx, qc)
	if err != nil {
		_ = qc.CloseWithError(streamconn.CodeNoError, "")
		return nil, fmt.Errorf("mqtt-quic open stream: %w", err)
	}
	if early != nil {
		// A full handshake: the PUBLISH still follows the CONNECT in one
		// flight (MQTT lets a client send before its CONNACK), so the
		// publish costs no CONNECT/CONNACK round trip (mqtt0rtt.go).
		handed = true
		return newEarlyConn(streamconn.New(qc, s, true), early), nil
	}
	return streamconn.New(qc, s, true), nil
}

// openStream opens the MQTT stream of qc: in 0-RTT while the gate holds
// the broker's datagrams back, otherwise once the handshake is done
// (zerortt_gate.go).
func (c *mqttClient) openStream(ctx context.Context, qc *quic.Conn) (*quic.Stream, error) {
	var s *quic.Stream
	var err error
	if c.gate.openEarly(func() { s, err = qc.OpenStream() }) && err == nil {
		return s, nil
	}
	select {
	case <-qc.HandshakeComplete():
	case <-qc.Context().Done():
		return nil, context.Cause(qc.Context())
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return qc.OpenStreamSync(ctx)
}

// transport returns the quic.Transport of the client's MQTT over QUIC
// connections, creating it (and the socket, unless Options.PacketConn is
// set) once: reconnects keep the socket, as HTTP/3's do.
func (c *mqttClient) transport() (*quic.Transport, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.tr != nil {
		return c.tr, nil
	}
	sock, err := openClientSocket(c.opts.PacketConn, c.opts.Logger) // netdown.go
	if err != nil {
		return nil, &dialError{addr: c.addr, err: err}
	}
	if sock.own != nil {
		c.ownPC = sock.own
	}
	pc, u := sock.pc, sock.udp
	c.outage = sock.outage
	c.hold, c.holdFromSession = handshakeHold(c.opts, c.addr)
	pc = probehold.NewWithOptions(pc, probeHold(c.hold), probeHoldOptions(c.opts, c.hold)) // h3probe.go
	c.tr = &quic.Transport{Conn: newGateConn(pc, &c.gate)}
	if u != nil {
		c.mig = startMigrator(c.ctx, c.opts.Logger, u, c.tr, c.currentQUIC)
	}
	return c.tr, nil
}

// currentQUIC returns the QUIC connection of the last MQTT over QUIC dial
// while it is alive, nil otherwise.
func (c *mqttClient) currentQUIC() *quic.Conn {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.qc
}

// fatalConnectError reports errors that retrying cannot cure.
func mqttFatalConnectError(err error) bool {
	var ce *autopaho.ConnackError
	if errors.As(err, &ce) {
		return true
	}
	var cv *tls.CertificateVerificationError
	return errors.As(err, &cv) || errors.Is(err, ErrPinMismatch)
}

// start launches the connection manager once.
func (c *mqttClient) start() (*autopaho.ConnectionManager, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	if c.fatal != nil {
		return nil, c.fatal
	}
	if c.cm != nil {
		return c.cm, nil
	}
	log := c.opts.Logger
	back := Backoff{Max: c.opts.MaxBackoff}
	cfg := autopaho.ClientConfig{
		ServerUrls:                    []*url.URL{c.u},
		KeepAlive:                     c.keepAlive(),
		CleanStartOnInitialConnection: false,
		SessionExpiryInterval:         mqttSessionExpiry,
		ReconnectBackoff: func(attempt int) time.Duration {
			if attempt == 0 {
				return 0
			}
			return back.Delay(attempt - 1)
		},
		ConnectTimeout:    c.connectTimeout(),
		AttemptConnection: c.dial,
		ConnectPacketBuilder: func(cp *paho.Connect, _ *url.URL) (*paho.Connect, error) {
			// paho otherwise sends Request Problem Information = 0, and
			// some brokers (mochi) then strip user properties, our
			// send-time stamp included, from every PUBLISH.
			if cp.Properties == nil {
				cp.Properties = &paho.ConnectProperties{}
			}
			cp.Properties.RequestProblemInfo = true
			return cp, nil
		},
		OnConnectionUp: func(cm *autopaho.ConnectionManager, ca *paho.Connack) {
			n := c.connects.Add(1)
			if !c.quic && n == 1 {
				c.handshake.CompareAndSwap(0, time.Now().UnixNano()-c.dialStart.Load())
			}
			c.report.ok()
			log.Debug("mqtt connected", "broker", c.addr, "session_present", ca.SessionPresent, "connection", n)
			if n > 1 && !ca.SessionPresent {
				go c.resubscribe(cm)
			}
		},
		OnConnectionDown: func() bool {
			log.Debug("mqtt connection lost", "broker", c.addr, "reconnect", c.opts.Reconnect)
			if !c.opts.Reconnect {
				c.setFatal(errors.New("mqtt connection lost (reconnect disabled)"))
			}
			c.mu.Lock() // after setFatal: a SUBSCRIBE cut short finds the reason
			c.connLost()
			c.connCtx, c.connLost = context.WithCancel(context.Background())
			c.mu.Unlock()
			return c.opts.Reconnect
		},
		OnConnectError: func(err error) {
			log.Debug("mqtt connect failed", "broker", c.addr, "error", err)
			if mqttFatalConnectError(err) || !c.opts.Reconnect {
				c.setFatal(err)
				return
			}
			began := time.Now()
			if ns := c.dialStart.Load(); ns != 0 {
				began = time.Unix(0, ns)
			}
			c.report.failed(err, began, true)
		},
		ClientConfig: paho.ClientConfig{
			ClientID:      c.id,
			PacketTimeout: time.Hour, // the caller's context bounds each operation
			OnPublishReceived: []func(paho.PublishReceived) (bool, error){
				func(pr paho.PublishReceived) (bool, error) { c.deliver(pr.Packet); return true, nil },
			},
		},
	}
	if c.opts.Token != "" {
		cfg.ConnectUsername = c.opts.Username
		if cfg.ConnectUsername == "" {
			cfg.ConnectUsername = c.id
		}
		cfg.ConnectPassword = []byte(c.opts.Token)
	} else if c.opts.Username != "" {
		cfg.ConnectUsername = c.opts.Username
	}
	cm, err := autopaho.NewConnection(c.ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("mqtt client: %w", err)
	}
	c.cm = cm
	return cm, nil
}

// setFatal records an unrecoverable error and stops the connection manager.
func (c *mqttClient) setFatal(err error) {
	c.mu.Lock()
	if c.fatal == nil {
		var ce *autopaho.ConnackError
		if errors.As(err, &ce) {
			err = fmt.Errorf("%w: connect: %s (reason 0x%02x)", ErrMQTTRefused, wire.MQTTConnackReason(ce.ReasonCode), ce.ReasonCode)
		}
		c.fatal = err
	}
	c.mu.Unlock()
	c.cancel()
}

func (c *mqttClient) fatalErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.fatal
}

// connectTimeout bounds one connection attempt (dial, handshake, CONNACK):
// Options.ConnectTimeout when set, else 30 s.
func (c *mqttClient) connectTimeout() time.Duration {
	if t := c.opts.ConnectTimeout; t > 0 {
		return t
	}
	return 30 * time.Second
}

// connected starts the client if needed and waits for a live connection,
// at most Options.ConnectTimeout when set.
func (c *mqttClient) connected(ctx context.Context) (*autopaho.ConnectionManager, error) {
	cm, err := c.start()
	if err != nil {
		return nil, err
	}
	actx := ctx
	if t := c.opts.ConnectTimeout; t > 0 {
		var cancel context.CancelFunc
		actx, cancel = context.WithTimeout(ctx, t)
		defer cancel()
	}
	if err := cm.AwaitConnection(actx); err != nil {
		if ferr := c.fatalErr(); ferr != nil {
			return nil, ferr
		}
		if ctx.Err() == nil && actx.Err() != nil {
			return nil, c.report.unreachable(c.report.lastErr())
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("mqtt connect to %s: %w", c.addr, ctx.Err())
		}
		return nil, fmt.Errorf("mqtt connect to %s: %w", c.addr, err)
	}
	return cm, nil
}

// retryable reports publish/subscribe errors after which nothing reached
// the session, so the call may be repeated on the next connection.
func mqttRetryable(err error) bool {
	return errors.Is(err, autopaho.ConnectionDownError) || errors.Is(err, session.ErrNoConnection)
}

// Publish sends one message; QoS 1 waits for PUBACK, across reconnects
// when Options.Reconnect is set (the session resends it).
func (c *mqttClient) Publish(ctx context.Context, topic string, payload []byte, opts PublishOptions) (Ack, error) {
	if opts.QoS > 1 {
		return Ack{}, fmt.Errorf("mqtt publish: qos %d not supported (want 0 or 1)", opts.QoS)
	}
	sent := opts.Sent
	early := c.offerEarly(topic, payload, opts)
	msgID := ""
	for {
		cm, err := c.connected(ctx)
		if err != nil {
			return Ack{}, err
		}
		if early != nil {
			if ack, done, err := c.awaitEarly(ctx, early, topic); done {
				return ack, err
			}
			if early.wasWritten() {
				msgID, sent = early.id, early.sent // perhaps published: the same id again
			}
			early = nil
		}
		if opts.Sent.IsZero() && msgID == "" {
			sent = time.Now()
		}
		user := paho.UserProperties{{Key: wire.MQTTStampProperty, Value: wire.FormatStamp(sent.UnixNano())}}
		if msgID != "" {
			user = append(user, paho.UserProperty{Key: wire.MQTTMsgIDProperty, Value: msgID})
		}
		p := &paho.Publish{
			QoS:        opts.QoS,
			Retain:     opts.Retain,
			Topic:      topic,
			Payload:    payload,
			Properties: &paho.PublishProperties{User: user},
		}
		pr, err := cm.Publish(ctx, p)
		if err == nil {
			return Ack{Sent: sent}, nil
		}
		if pr != nil && pr.ReasonCode >= 0x80 {
			return Ack{}, &mqttRefusal{code: pr.ReasonCode, err: fmt.Errorf("%w: publish to %q: %s (reason 0x%02x)", ErrMQTTRefused, topic, mqttPubackReason(pr.ReasonCode, pr.Properties), pr.ReasonCode)}
		}
		if mqttRetryable(err) && c.opts.Reconnect && ctx.Err() == nil {
			continue
		}
		if ferr := c.fatalErr(); ferr != nil {
			return Ack{}, ferr
		}
		return Ack{}, fmt.Errorf("mqtt publish to %q: %w", topic, err)
	}
}

func mqttPubackReason(code byte, props *paho.PublishResponseProperties) string {
	if props != nil && props.ReasonString != "" {
		return props.ReasonString
	}
	switch code {
	case 0x87:
		return "not authorized"
	case 0x90:
		return "topic name invalid"
	case 0x97:
		return "quota exceeded"
	case 0x99:
		return "payload format invalid"
	}
	return "refused"
}

// Subscribe subscribes with QoS 1 (the broker delivers min(publish QoS,
// 1)) and calls h for each message until ctx ends; it then unsubscribes and
// returns nil. since is not supported over MQTT.
func (c *mqttClient) Subscribe(ctx context.Context, filter string, since uint64, h func(Message)) error {
	if since > 0 {
		return errors.New("mqtt subscribe: resuming from a sequence number (since) is HTTP/3 only")
	}
	if filter == "" {
		return errors.New("mqtt subscribe: empty topic filter")
	}
	c.mu.Lock()
	c.nextSub++
	id := c.nextSub
	sub := &mqttSub{filter: filter, h: h, ctx: ctx}
	c.subs[id] = sub
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.subs, id)
		c.mu.Unlock()
	}()
	for {
		cm, err := c.connected(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		sa, lost, err := c.subscribeOnce(ctx, cm, filter)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if (lost || mqttRetryable(err)) && c.opts.Reconnect {
				continue
			}
			if ferr := c.fatalErr(); lost && ferr != nil {
				return ferr
			}
			if sa != nil && len(sa.Reasons) > 0 && sa.Reasons[0] >= 0x80 {
				return fmt.Errorf("%w: subscribe to %q: %s (reason 0x%02x)", ErrMQTTRefused, filter, mqttSubackReason(sa.Reasons[0]), sa.Reasons[0])
			}
			return fmt.Errorf("mqtt subscribe to %q: %w", filter, err)
		}
		if len(sa.Reasons) > 0 && sa.Reasons[0] >= 0x80 {
			return fmt.Errorf("%w: subscribe to %q: %s (reason 0x%02x)", ErrMQTTRefused, filter, mqttSubackReason(sa.Reasons[0]), sa.Reasons[0])
		}
		c.mu.Lock()
		sub.active = true
		c.mu.Unlock()
		notifySubscribed(ctx)
		break
	}
	select {
	case <-ctx.Done():
	case <-c.ctx.Done():
	}
	c.mu.Lock()
	cm := c.cm
	ferr := c.fatal
	closed := c.closed
	c.mu.Unlock()
	if ctx.Err() == nil && !closed && ferr != nil {
		return ferr
	}
	if cm != nil && ctx.Err() != nil && !closed {
		uctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, _ = cm.Unsubscribe(uctx, &paho.Unsubscribe{Topics: []string{filter}})
		cancel()
	}
	return nil
}

// subscribeOnce sends one SUBSCRIBE on the current connection and waits for
// its SUBACK, or for that connection to be lost (lost is then true). paho
// keeps the request of a persistent session across a reconnect but never
// sends it again (MQTT resends only PUBLISH and PUBREL), so without the
// second bound a SUBSCRIBE whose connection broke waited for ever.
func (c *mqttClient) subscribeOnce(ctx context.Context, cm *autopaho.ConnectionManager, filter string) (sa *paho.Suback, lost bool, err error) {
	c.mu.Lock()
	conn := c.connCtx
	c.mu.Unlock()
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(conn, cancel)()
	sa, err = cm.Subscribe(actx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: filter, QoS: 1}}})
	return sa, err != nil && conn.Err() != nil, err
}

func mqttSubackReason(code byte) string {
	switch code {
	case 0x87:
		return "not authorized"
	case 0x8F:
		return "topic filter invalid"
	case 0x97:
		return "quota exceeded"
	case 0xA1:
		return "subscription identifiers not supported"
	case 0xA2:
		return "wildcard subscriptions not supported"
	}
	return "refused"
}

// resubscribe restores the subscriptions after a reconnect that found no
// session on the broker (it expired or the broker restarted).
func (c *mqttClient) resubscribe(cm *autopaho.ConnectionManager) {
	c.mu.Lock()
	var opts []paho.SubscribeOptions
	var ctxs []context.Context
	for _, s := range c.subs {
		if s.active {
			opts = append(opts, paho.SubscribeOptions{Topic: s.filter, QoS: 1})
			ctxs = append(ctxs, s.ctx)
		}
	}
	c.mu.Unlock()
	if len(opts) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(c.ctx, 30*time.Second)
	defer cancel()
	if _, err := cm.Subscribe(ctx, &paho.Subscribe{Subscriptions: opts}); err != nil {
		c.opts.Logger.Warn("mqtt resubscribe failed", "error", err)
		return
	}
	for _, sc := range ctxs {
		notifySubscribed(sc)
	}
}

// deliver hands a received PUBLISH to every subscription whose filter
// matches its topic.
func (c *mqttClient) deliver(p *paho.Publish) {
	now := time.Now()
	m := Message{Topic: p.Topic, Payload: p.Payload, QoS: p.QoS, Retained: p.Retain, Received: now}
	if p.Properties != nil {
		if ns := wire.ParseStamp(p.Properties.User.Get); ns > 0 {
			m.Sent = time.Unix(0, ns)
		}
	}
	c.mu.Lock()
	var hs []func(Message)
	for _, s := range c.subs {
		if topic.Match(mqttShareStrip(s.filter), p.Topic) {
			hs = append(hs, s.h)
		}
	}
	c.mu.Unlock()
	for _, h := range hs {
		h(m)
	}
}

// Stats reports the first handshake's duration (QUIC: dial -> handshake
// complete; TCP: dial -> CONNACK) and the number of reconnects.
func (c *mqttClient) Stats() Stats {
	n := int(c.connects.Load())
	r := 0
	if n > 1 {
		r = n - 1
	}
	return Stats{Handshake: time.Duration(c.handshake.Load()), Reconnects: r}
}

// Close sends DISCONNECT and closes the connection.
func (c *mqttClient) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	cm := c.cm
	tr, own := c.tr, c.ownPC
	c.mu.Unlock()
	if qc := c.currentQUIC(); qc != nil {
		// The next client of this broker starts its probe hold from
		// this connection's RTT (h3probe.go).
		if m, ok := c.opts.SessionCache.(RTTMemory); ok {
			m.SetLastRTT(c.addr, qc.ConnectionStats().SmoothedRTT)
		}
	}
	if cm != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		_ = cm.Disconnect(ctx)
		cancel()
	}
	c.cancel()
	if tr != nil {
		_ = tr.Close() // does not close Options.PacketConn
	}
	if own != nil {
		_ = own.Close()
	}
	return nil
}

// mqttShareStrip removes a shared-subscription prefix ($share/group/).
func mqttShareStrip(filter string) string {
	if rest, ok := strings.CutPrefix(filter, "$share/"); ok {
		if _, f, ok := strings.Cut(rest, "/"); ok {
			return f
		}
	}
	return filter
}
