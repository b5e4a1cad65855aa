// Package bridge joins the broker's topic space to an upstream MQTT broker
// (mosquitto, EMQX, HiveMQ, another quiot) over mqtt://, mqtts:// or
// mqtt-quic:// (MQTT over QUIC, single stream, with a QUIC tuning
// profile), MQTT 5 or 3.1.1, or to another quiot over https:// (HTTP/3,
// the pub-sub protocol of docs/pubsub.md: h3.go).
//
// Messages the broker accepts on a topic matching one of the bridge's out
// filters are forwarded up under RemotePrefix+topic; messages the upstream
// delivers on RemotePrefix+in filter come down with the prefix stripped
// and are published locally with Origin "bridge:NAME" under the bridge's
// Identity, through the broker's one authorization check (auth.Allow).
// A message that came in over a bridge is never forwarded back over it (by
// origin, and the remote subscriptions ask for MQTT 5 No Local, or, where
// there is none (MQTT 3.1.1, HTTP/3), the upstream's copies of the
// bridge's own publishes are dropped: echo.go); topics starting with $
// never cross.
//
// Going up, messages wait in a bounded in-memory queue (Config.QueueMessages
// and QueueBytes; beyond them the oldest is dropped and counted) while the
// upstream is away, and are published in order with up to
// Config.MaxInflight QoS 1 publishes awaiting their PUBACK (window.go): a
// message is removed from the queue only once the upstream has it and
// every message before it. Publishes cut by a lost connection are sent
// again on the next one, in order (at least once). The queue is not on
// disk unless Config.StoreDir is set: a restart of this broker loses what
// it held. With a store, a QoS 1 or 2 publisher is acknowledged only once
// the store has its message (tap, spoolIn; docs/bridge.md).
//
// The keys of a [[bridge]] table are in docs/bridge.md.
package bridge

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/eclipse/paho.golang/paho"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/auth"
	"github.com/quiot/quiot/internal/backoff"
	"github.com/quiot/quiot/internal/quictune"
	"github.com/quiot/quiot/internal/spool"
	"github.com/quiot/quiot/internal/tlssession"
	"github.com/quiot/quiot/internal/topic"
	"github.com/quiot/quiot/internal/wire"
)

// OriginPrefix starts the Message.Origin of messages a bridge brought in:
// "bridge:NAME". They are not forwarded back over that bridge.
const OriginPrefix = "bridge:"

// Origin returns the Message.Origin of messages bridge name brings in.
func Origin(name string) string { return OriginPrefix + name }

// Stats are a bridge's counters.
type Stats struct {
	// Connected reports a live upstream connection, since ConnectedSince.
	Connected      bool
	ConnectedSince time.Time
	// Queued is the number of messages waiting to go up (in memory and in
	// the store); QueuedBytes the bytes of those in memory.
	Queued      int
	QueuedBytes int64
	// Sent counts messages the upstream accepted (PUBACK for QoS 1).
	Sent uint64
	// Dropped counts messages dropped from a full queue (and, with a
	// store, dropped from the full store or expired in it).
	Dropped uint64
	// Stored is the number of messages in the on-disk store (Queued
	// includes them), StoreBytes the size of its files (delivered
	// messages included until their segment file is deleted).
	Stored     uint64
	StoreBytes int64
	// Refused counts messages the upstream refused (PUBACK reason >= 0x80):
	// they are not sent again.
	Refused uint64
	// In counts messages brought down and accepted locally; InRefused
	// those the local ACL or the broker refused, or that were outside the
	// bridge's prefix and in filters.
	In, InRefused uint64
	// Echoes counts messages from the upstream dropped as copies of the
	// bridge's own publishes (MQTT 3.1.1 and https:// upstreams, which
	// cannot be asked for MQTT 5's No Local).
	Echoes uint64
	// Connects counts upstream connections made, ConnectFailures the
	// attempts that failed; Subscribed the SUBACKs of the in filters
	// received (one a connection; https://: one a subscription of an in
	// filter the upstream accepted).
	Connects, ConnectFailures, Subscribed uint64
	// LastError is the last connection or publish error ("" if none).
	LastError string
}

// item is a message waiting to go up.
type item struct {
	id    uint64
	topic string // remote topic
	msg   *broker.Message
	cost  int64
	// held is set for a QoS 1 or 2 message of a bridge with a store: its
	// publisher's acknowledgement waits until spoolIn has stored it.
	held *held
}

// held is the hold of a message on its way into the store (a
// broker.Commit): done once the store has it, or with the error that kept
// it out (the publish then fails instead of being acknowledged).
type held struct {
	done chan struct{}
	once sync.Once
	err  error
}

func newHeld() *held { return &held{done: make(chan struct{})} }

// Done is closed once the message is stored or given up.
func (h *held) Done() <-chan struct{} { return h.done }

// Err is nil once the message is stored; read it after Done.
func (h *held) Err() error { return h.err }

// finish ends the hold with err (nil: stored); later calls do nothing.
func (h *held) finish(err error) {
	h.once.Do(func() {
		h.err = err
		close(h.done)
	})
}

// heldErr is the error a held publisher gets (nil: stored): it names the
// bridge.
func (br *Bridge) heldErr(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("bridge %s: store: %w", br.cfg.Name, err)
}

// Errors a held publish fails with: its message was not stored.
var (
	// errQueueFull: the memory queue was full (the store is slow or
	// stalled) and dropped the message before it was stored.
	errQueueFull = errors.New("bridge queue full: the message was dropped before its store had it")
	// errClosing: the bridge closed before the message was stored.
	errClosing = errors.New("bridge closed before its store had the message")
)

// Bridge is one running bridge.
type Bridge struct {
	cfg Config
	// given is the table as New got it (Manager.Reload compares it).
	given Config
	// managed: a Manager's tap hands the bridge its messages.
	managed bool
	b       *broker.Broker
	log     *slog.Logger
	origin  string
	tlsCfg  *tls.Config
	u       *url.URL
	// quic is set for an mqtt-quic:// or https:// upstream: its tuning
	// profile.
	quic *quictune.Profile
	// h3 is set for an https:// upstream (another quiot over HTTP/3).
	h3 *h3Link
	// v311 speaks MQTT 3.1.1 (mqtt_version = "3.1.1") under paho's MQTT 5.
	v311 bool
	// echo drops inbound copies of the bridge's own publishes where the
	// upstream cannot be asked for No Local (MQTT 3.1.1, HTTP/3).
	echo *echoGuard
	// echoIn are the remote in filters: only a message going up on a
	// topic they match can come back.
	echoIn []string

	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	closed atomic.Bool
	// unreport removes the bridge from the broker's /v1/stats and /healthz.
	unreport func()

	// sp is the on-disk queue (Config.StoreDir; nil: memory only):
	// spoolIn moves the memory queue's messages into it and closes
	// spooled once drained after drain is closed (Close).
	sp      *spool.Spool
	spooled chan struct{}
	drain   chan struct{}
	// storeHook, set by tests only, runs in spoolIn before each append; an
	// error it returns stands for the append's.
	storeHook func(it *item) error

	mu       sync.Mutex
	q        []*item // oldest first
	qBytes   int64
	nextID   uint64
	wake     chan struct{} // cap 1: the queue grew
	dropping bool          // a drop was logged since the queue last had room
	cm       *autopaho.ConnectionManager
	connCtx  context.Context // ends when the current connection is lost
	connLost context.CancelFunc
	// dialedPubs counts the PUBLISH packets of the connection dialed last
	// (packetConn), upPubs those of the current one (nil: not counted,
	// https://).
	dialedPubs, upPubs *written
	// quicRTT is the smoothed RTT of the last MQTT over QUIC connection
	// (ns; 0: none yet): the next dial's handshake hold (quic.go).
	quicRTT atomic.Int64
	// tokens keeps the upstream's QUIC address-validation tokens for the
	// next dial (the RTT in one lets the upstream pace its handshake
	// probes); resumed counts dials that resumed a TLS session (quic.go).
	tokens  quic.TokenStore
	resumed atomic.Uint64
	// aliases are the topic aliases of the current connection (nil:
	// none; alias.go).
	aliases *topicAliases

	up      bool
	upSince time.Time
	downAt  time.Time
	lastErr string
	changed chan struct{} // closed and replaced on every change of Stats

	sent, dropped, refused, in, inRefused, echoes, connects, connFailures, subscribed atomic.Uint64
}

// New checks cfg against the broker (inbound messages need an ACL or an
// open broker: deny by default) and loads the TLS files; Start runs it.
func New(b *broker.Broker, cfg Config, log *slog.Logger) (*Bridge, error) {
	if log == nil {
		log = slog.Default()
	}
	fail := func(key string, err error) error {
		return &Error{Bridge: fmt.Sprintf("%q", cfg.Name), Key: key, Err: err}
	}
	if err := CheckAuth(cfg, b.Auth()); err != nil {
		return nil, err
	}
	// The filters are the broker's too: bounded by its topic limits
	// (--max-topic-bytes, --max-topic-levels; Parse checks the defaults).
	tl := b.Space().TopicLimits()
	for _, k := range []struct {
		key string
		fs  []string
	}{{"out", cfg.Out}, {"in", cfg.In}} {
		for _, f := range k.fs {
			if err := tl.ValidateFilter(f); err != nil {
				return nil, fail(k.key, fmt.Errorf("filter %q: %w", f, err))
			}
		}
	}
	given := cfg
	if cfg.DownAlert <= 0 {
		cfg.DownAlert = DefaultDownAlert
	}
	if cfg.MaxInflight <= 0 {
		cfg.MaxInflight = DefaultMaxInflight
	}
	u, err := url.Parse(cfg.URL)
	if err != nil {
		return nil, fail("url", err)
	}
	br := &Bridge{cfg: cfg, b: b, log: log.With("bridge", cfg.Name), origin: Origin(cfg.Name), given: given, u: u, wake: make(chan struct{}, 1), done: make(chan struct{}), changed: make(chan struct{})}
	https := strings.EqualFold(u.Scheme, "https")
	if strings.EqualFold(u.Scheme, "mqtt-quic") || https {
		if br.quic, err = quictune.Load(cfg.Tuning); err != nil {
			return nil, fail("tuning", err)
		}
	}
	br.v311 = cfg.MQTTVersion == "3.1.1" && !https
	if (br.v311 || https) && len(cfg.In) > 0 {
		br.echo = newEchoGuard()
		for _, f := range cfg.In {
			br.echoIn = append(br.echoIn, cfg.RemotePrefix+f)
		}
	}
	if strings.EqualFold(u.Scheme, "mqtts") || br.quic != nil {
		tc := &tls.Config{ServerName: u.Hostname(), MinVersion: tls.VersionTLS12, ClientSessionCache: tls.NewLRUClientSessionCache(4)}
		if cfg.StoreDir != "" {
			// Resumed after a restart of the broker too (a shorter
			// handshake: no certificate chain down a slow link), and the
			// last connection's RTT sets the first dial's probe hold.
			if err := os.MkdirAll(cfg.StoreDir, 0o700); err != nil {
				return nil, fail("store_dir", err)
			}
			tc.ClientSessionCache = tlssession.NewFile(filepath.Join(cfg.StoreDir, sessionFileName), br.log)
		}
		if cfg.CAFile != "" {
			pem, err := os.ReadFile(cfg.CAFile)
			if err != nil {
				return nil, fail("ca_file", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fail("ca_file", fmt.Errorf("%s holds no PEM certificate", cfg.CAFile))
			}
			tc.RootCAs = pool
		}
		if cfg.CertFile != "" {
			cert, err := tls.LoadX509KeyPair(cfg.CertFile, cfg.KeyFile)
			if err != nil {
				return nil, fail("cert_file", err)
			}
			tc.Certificates = []tls.Certificate{cert}
		}
		if br.quic != nil {
			tc.NextProtos = []string{mqttALPN}
			if https {
				tc.NextProtos, tc.MinVersion = []string{http3.NextProtoH3}, tls.VersionTLS13
			}
			br.quic.ApplyClientTLS(tc)
		}
		br.tlsCfg = tc
		if m, ok := tc.ClientSessionCache.(tlssession.RTTMemory); ok && br.quic != nil {
			br.quicRTT.Store(int64(m.LastRTT(quicAddr(u))))
		}
		br.tokens = quic.NewLRUTokenStore(4, 4)
	}
	if https {
		br.h3 = br.newH3Link()
	}
	br.connCtx, br.connLost = context.WithCancel(context.Background())
	br.connLost() // not connected yet
	if cfg.StoreDir != "" {
		sp, err := spool.Open(spool.Options{Dir: cfg.StoreDir, MaxBytes: cfg.StoreMaxBytes, MaxAge: cfg.StoreMaxAge, Logger: br.log})
		if err != nil {
			return nil, fail("store_dir", err)
		}
		br.sp = sp
		br.spooled, br.drain = make(chan struct{}), make(chan struct{})
		if n := sp.Pending(); n > 0 {
			br.log.Info("bridge store holds messages from an earlier run: sending them first", "store_dir", cfg.StoreDir, "pending", n)
		}
	}
	return br, nil
}

// CheckAuth reports whether a broker with authenticator a may run the
// bridge: inbound messages (in filters) are refused by default, so they
// need an ACL (or an open broker); a broker without one (loopback only)
// does not start such a bridge.
func CheckAuth(cfg Config, a *auth.Authenticator) error {
	if len(cfg.In) > 0 && a.LoopbackOnlyMode() {
		return &Error{Bridge: fmt.Sprintf("%q", cfg.Name), Key: "in", Err: errors.New("the broker has no ACL (--auth), so nothing may publish from outside: inbound messages are refused by default; give an ACL that lets the bridge's identity publish the in topics, or --allow-anonymous")}
	}
	return nil
}

// Name returns the bridge's name.
func (br *Bridge) Name() string { return br.cfg.Name }

// Start hooks the bridge into the broker (a tap on accepted messages) and
// connects in the background; it does not wait for the upstream.
func (br *Bridge) Start() error {
	br.ctx, br.cancel = context.WithCancel(context.Background())
	br.mu.Lock()
	br.downAt = time.Now() // down until the first connection
	br.mu.Unlock()
	br.unreport = br.b.AddBridge(br)
	if len(br.cfg.Out) > 0 && !br.managed {
		br.b.AddHoldTap(br.tap)
	}
	if br.h3 != nil {
		br.startH3()
		br.startSending()
		return nil
	}
	back := backoff.Backoff{Base: br.cfg.ReconnectMin, Max: br.cfg.ReconnectMax}
	var password []byte
	if br.cfg.Password != "" {
		password = []byte(br.cfg.Password)
	}
	cc := autopaho.ClientConfig{
		ServerUrls:                    []*url.URL{br.u},
		TlsCfg:                        br.tlsCfg,
		KeepAlive:                     uint16(br.cfg.KeepAlive / time.Second),
		CleanStartOnInitialConnection: br.cfg.CleanStart,
		SessionExpiryInterval:         uint32(br.cfg.SessionExpiry / time.Second),
		ReconnectBackoff: func(attempt int) time.Duration {
			if attempt == 0 {
				return 0
			}
			return back.Delay(attempt - 1)
		},
		ConnectTimeout:   30 * time.Second,
		ConnectUsername:  br.cfg.Username,
		ConnectPassword:  password,
		OnConnectionUp:   br.onUp,
		OnConnectionDown: br.onDown,
		OnConnectError:   br.onConnectError,
		ClientConfig: paho.ClientConfig{
			ClientID:      br.cfg.ClientID,
			PacketTimeout: time.Hour, // each publish is bounded by the connection's life
			OnPublishReceived: []func(paho.PublishReceived) (bool, error){
				func(pr paho.PublishReceived) (bool, error) { br.inbound(pr.Packet); return true, nil },
			},
		},
	}
	// Each MQTT packet in one write (packetConn): paho's several writes
	// a packet would be several TLS records and TCP segments.
	cc.TlsCfg = nil
	cc.AttemptConnection = br.attempt5
	if br.quic != nil {
		if ka := time.Duration(br.quic.MaxIdleTimeout); ka > 0 && br.cfg.KeepAlive >= ka {
			// PINGREQs must come before QUIC's idle timer closes a
			// quiet connection (the profile's keep-alive usually does).
			cc.KeepAlive = uint16(max(ka*2/3/time.Second, 1))
		}
	}
	if br.v311 {
		cc.TlsCfg = nil
		cc.AttemptConnection = br.attempt311
	}
	cm, err := autopaho.NewConnection(br.ctx, cc)
	if err != nil {
		br.cancel()
		return fmt.Errorf("bridge %s: %w", br.cfg.Name, err)
	}
	br.mu.Lock()
	br.cm = cm
	br.mu.Unlock()
	br.startSending()
	return nil
}

// startSending logs the start and runs the goroutines that send the queue
// up.
func (br *Bridge) startSending() {
	br.log.Info("bridge starting", "url", br.cfg.URL, "out", br.cfg.Out, "in", br.cfg.In, "remote_prefix", br.cfg.RemotePrefix,
		"qos", br.cfg.QoS, "mqtt_version", br.cfg.MQTTVersion, "queue_messages", br.cfg.QueueMessages, "queue_bytes", br.cfg.QueueBytes,
		"max_inflight", br.cfg.MaxInflight)
	if br.sp != nil {
		go br.spoolIn()
		go br.sendUp(spoolSource{br})
	} else {
		go br.sendUp(queueSource{br})
	}
}

// Close disconnects from the upstream. Without a store, messages still
// queued are lost (logged with their count); with one, the memory queue is
// written to it first (until ctx ends) and the store keeps them for the
// next start.
func (br *Bridge) Close(ctx context.Context) error {
	if br.closed.Swap(true) {
		return nil
	}
	if br.unreport != nil {
		br.unreport()
	}
	if br.cancel == nil { // never started
		if br.sp != nil {
			return br.sp.Close()
		}
		return nil
	}
	var serr error
	if br.sp != nil {
		// Store what is still in memory, then stop.
		close(br.drain)
		select {
		case <-br.spooled:
		case <-ctx.Done():
		}
		// Publishers still waiting for the store are answered with an
		// error (their messages may still reach it).
		br.mu.Lock()
		for _, it := range br.q {
			if it.held != nil {
				it.held.finish(br.heldErr(errClosing))
			}
		}
		br.mu.Unlock()
	}
	br.mu.Lock()
	cm := br.cm
	n := len(br.q)
	br.mu.Unlock()
	if cm != nil {
		_ = cm.Disconnect(ctx)
	}
	br.cancel()
	if br.h3 != nil {
		br.h3.close()
	}
	br.mu.Lock()
	br.up = false // a disconnect we asked for calls no OnConnectionDown
	br.connLost()
	br.notifyLocked()
	br.mu.Unlock()
	select {
	case <-br.done:
	case <-ctx.Done():
	}
	if br.sp != nil {
		pending := br.sp.Pending()
		serr = br.sp.Close()
		br.log.Info("bridge closed; its store keeps the messages not sent yet", "pending", pending, "store_dir", br.cfg.StoreDir)
		return serr
	}
	if n > 0 {
		br.log.Warn("bridge closed with messages still queued: they are lost (the queue is in memory)", "queued", n)
	} else {
		br.log.Info("bridge closed")
	}
	return nil
}

// Stats returns the bridge's counters.
func (br *Bridge) Stats() Stats {
	br.mu.Lock()
	s := Stats{Connected: br.up, Queued: len(br.q), QueuedBytes: br.qBytes, LastError: br.lastErr}
	if br.up {
		s.ConnectedSince = br.upSince
	}
	br.mu.Unlock()
	s.Sent, s.Dropped, s.Refused = br.sent.Load(), br.dropped.Load(), br.refused.Load()
	s.In, s.InRefused, s.Connects, s.Subscribed = br.in.Load(), br.inRefused.Load(), br.connects.Load(), br.subscribed.Load()
	s.Echoes = br.echoes.Load()
	s.ConnectFailures = br.connFailures.Load()
	if br.sp != nil {
		st := br.sp.Stats()
		s.Queued += int(st.Pending)
		s.Dropped += st.Dropped + st.Expired
		s.Stored, s.StoreBytes = st.Pending, st.Bytes
	}
	return s
}

// BridgeStatus is the bridge's state for the broker's /v1/stats and
// /healthz (broker.BridgeReporter): degraded once it has been without an
// upstream connection for Config.DownAlert.
func (br *Bridge) BridgeStatus() broker.BridgeStatus {
	s := br.Stats()
	br.mu.Lock()
	downAt := br.downAt
	br.mu.Unlock()
	bs := broker.BridgeStatus{Name: br.cfg.Name, URL: br.cfg.URL, Connected: s.Connected, ConnectedSince: s.ConnectedSince,
		Queued: s.Queued, QueuedBytes: s.QueuedBytes, Sent: s.Sent, Dropped: s.Dropped, LastError: s.LastError}
	if !s.Connected && !downAt.IsZero() {
		bs.DownSince = downAt
		if d := time.Since(downAt); d >= br.cfg.DownAlert {
			bs.Degraded = fmt.Sprintf("no upstream connection for %s (down_alert %s)", d.Round(time.Second), br.cfg.DownAlert)
			if s.LastError != "" {
				bs.Degraded += "; last error: " + s.LastError
			}
		}
	}
	return bs
}

// WaitFor returns once cond holds for the bridge's Stats, re-checking on
// every change, or with ctx's error.
func (br *Bridge) WaitFor(ctx context.Context, cond func(Stats) bool) error {
	for {
		br.mu.Lock()
		ch := br.changed
		br.mu.Unlock()
		if cond(br.Stats()) {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// notifyLocked wakes WaitFor. br.mu held.
func (br *Bridge) notifyLocked() {
	close(br.changed)
	br.changed = make(chan struct{})
}

func (br *Bridge) notify() {
	br.mu.Lock()
	br.notifyLocked()
	br.mu.Unlock()
}

// tap runs under the broker's lock for every accepted message: it queues
// the ones to forward and never blocks. With a store, a QoS 1 or 2
// message is held (hold): its publisher is acknowledged only once spoolIn
// has stored it, and gets an error if it is dropped first (a full queue,
// the store failing) or the bridge closes (docs/bridge.md, "Going up: QoS,
// order, the queue").
func (br *Bridge) tap(m *broker.Message, hold func(broker.Commit)) {
	if br.closed.Load() || m.Origin == br.origin || strings.HasPrefix(m.Topic, "$") || !matchAny(br.cfg.Out, m.Topic) {
		return
	}
	remote := br.cfg.RemotePrefix + m.Topic
	it := &item{topic: remote, msg: m, cost: int64(len(m.Payload) + len(remote) + 64)}
	if br.sp != nil && m.QoS > 0 && hold != nil {
		it.held = newHeld()
		hold(it.held)
	}
	br.mu.Lock()
	br.nextID++
	it.id = br.nextID
	br.q = append(br.q, it)
	br.qBytes += it.cost
	var dropped int
	for len(br.q) > 1 && (len(br.q) > br.cfg.QueueMessages || br.qBytes > br.cfg.QueueBytes) {
		br.qBytes -= br.q[0].cost
		if h := br.q[0].held; h != nil {
			h.finish(br.heldErr(errQueueFull))
		}
		br.q[0] = nil
		br.q = br.q[1:]
		dropped++
	}
	logDrop := dropped > 0 && !br.dropping
	if dropped > 0 {
		br.dropping = true
	}
	queued := len(br.q) + br.stored()
	br.notifyLocked()
	br.mu.Unlock()
	if dropped > 0 {
		total := br.dropped.Add(uint64(dropped))
		if logDrop {
			br.log.Warn("bridge queue full: dropping the oldest messages (counted in dropped)", "queued", queued,
				"queue_messages", br.cfg.QueueMessages, "queue_bytes", br.cfg.QueueBytes, "dropped_total", total)
		}
	}
	select {
	case br.wake <- struct{}{}:
	default:
	}
}

func matchAny(filters []string, t string) bool {
	for _, f := range filters {
		if topic.Match(f, t) {
			return true
		}
	}
	return false
}

// cut records publishes cut by err (the first on topic) and waits for
// the connection's end (or a pause) before they are sent again: upRetry,
// or upStopped.
func (br *Bridge) cut(conn context.Context, topic string, err error) int {
	br.setErr(err.Error())
	br.log.Debug("bridge publishes cut; sending them again on the next connection", "topic", topic, "error", err)
	select {
	case <-conn.Done():
	case <-br.ctx.Done():
		return upStopped
	case <-time.After(br.cfg.ReconnectMin):
		// The connection still looks up (e.g. the session was full): try
		// again after a pause.
	}
	return upRetry
}

// storeBatch bounds the messages spoolIn appends in one group commit.
const storeBatch = 256

// spoolIn moves the queue's messages into the spool, in order, until the
// bridge closes and the queue is empty: the messages queued meanwhile (up
// to storeBatch) in one group commit of the store (one write), each held
// publisher answered once it returned.
func (br *Bridge) spoolIn() {
	defer close(br.spooled)
	var msgs []spool.Message
	for {
		its := br.batchOrDrained()
		if its == nil {
			return
		}
		msgs = msgs[:0]
		for _, it := range its {
			msgs = append(msgs, spool.Message{Topic: it.topic, Payload: it.msg.Payload, QoS: br.cfg.QoS, Retain: it.msg.Retain})
		}
		var errs []error
		if br.storeHook != nil {
			if err := br.storeHook(its[0]); err != nil {
				errs = make([]error, len(its))
				for i := range errs {
					errs[i] = err
				}
			}
		}
		if errs == nil {
			errs = br.sp.AppendBatch(context.Background(), msgs)
		}
		var failed int
		var first error
		for i, it := range its {
			var err error
			if errs != nil {
				err = errs[i]
			}
			if it.held != nil {
				it.held.finish(br.heldErr(err)) // the publisher's acknowledgement (tap)
			}
			if err != nil {
				failed++
				first = cmp.Or(first, err)
			}
		}
		if failed > 0 {
			br.dropped.Add(uint64(failed))
			br.setErr("store: " + first.Error())
			br.log.Warn("bridge: could not store messages; dropped (counted in dropped)", "messages", failed, "topic", its[0].topic, "error", first)
		}
		br.popThrough(its[len(its)-1].id)
	}
}

// batchOrDrained returns the oldest queued messages (up to storeBatch)
// for spoolIn, waiting for one: once the bridge is closing it returns nil
// only when the queue is empty, so that Close stores what was queued.
func (br *Bridge) batchOrDrained() []*item {
	for {
		br.mu.Lock()
		if len(br.q) > 0 {
			its := slices.Clone(br.q[:min(len(br.q), storeBatch)])
			br.mu.Unlock()
			return its
		}
		br.dropping = false
		br.mu.Unlock()
		if br.closed.Load() {
			return nil
		}
		select {
		case <-br.wake:
		case <-br.drain:
		}
	}
}

// connection waits until a connection is up and its OnConnectionUp has
// run, and returns the context that ends when that connection is lost (nil
// once the bridge is closed) and the count of its PUBLISH packets (nil:
// not counted). autopaho's AwaitConnection may return before
// OnConnectionUp ran, when the last connection's context is still the one
// at hand.
func (br *Bridge) connection() (context.Context, *written) {
	for {
		br.mu.Lock()
		up, conn, pubs, ch := br.up, br.connCtx, br.upPubs, br.changed
		br.mu.Unlock()
		if up {
			return conn, pubs
		}
		select {
		case <-ch:
		case <-br.ctx.Done():
			return nil, nil
		}
	}
}

// stored is the number of messages in the store (0 without one); safe
// under br.mu (the spool has its own lock).
func (br *Bridge) stored() int {
	if br.sp == nil {
		return 0
	}
	return int(br.sp.Pending())
}

func (br *Bridge) setErr(s string) {
	br.mu.Lock()
	br.lastErr = s
	br.mu.Unlock()
}

// onUp runs when a connection is made: log, mark the connection, and
// subscribe to the in filters.
func (br *Bridge) onUp(cm *autopaho.ConnectionManager, ca *paho.Connack) {
	var aliases *topicAliases
	if !br.v311 && br.cfg.SessionExpiry == 0 && ca.Properties != nil && ca.Properties.TopicAliasMaximum != nil {
		aliases = newTopicAliases(*ca.Properties.TopicAliasMaximum)
	}
	br.mu.Lock()
	br.aliases = aliases
	br.mu.Unlock()
	br.markUp(ca.SessionPresent)
	if len(br.cfg.In) == 0 {
		return
	}
	subs := make([]paho.SubscribeOptions, 0, len(br.cfg.In))
	for _, f := range br.cfg.In {
		// RetainHandling 1: retained messages only for a subscription the
		// session did not hold yet, so a persistent session's reconnect does
		// not bring them down again. MQTT 3.1.1 has none of these options.
		o := paho.SubscribeOptions{Topic: br.cfg.RemotePrefix + f, QoS: br.cfg.QoS}
		if !br.v311 {
			o.NoLocal, o.RetainAsPublished, o.RetainHandling = true, true, 1
		}
		subs = append(subs, o)
	}
	go br.subscribeMQTT(cm, subs)
}

// markUp records a new upstream connection and logs it.
func (br *Bridge) markUp(sessionPresent bool) {
	n := br.connects.Add(1)
	br.mu.Lock()
	br.connCtx, br.connLost = context.WithCancel(context.Background())
	br.up, br.upSince = true, time.Now()
	// autopaho dials one connection at a time: the last dialed is up.
	br.upPubs, br.dialedPubs = br.dialedPubs, nil
	down := time.Duration(0)
	if !br.downAt.IsZero() {
		down = time.Since(br.downAt)
	}
	queued := len(br.q) + br.stored()
	br.notifyLocked()
	br.mu.Unlock()
	if n == 1 {
		br.log.Info("bridge connected", "url", br.cfg.URL, "session_present", sessionPresent, "queued", queued)
	} else {
		br.log.Info("bridge reconnected: resuming", "url", br.cfg.URL, "down_for", down.Round(time.Millisecond), "session_present", sessionPresent, "queued", queued, "dropped_total", br.dropped.Load())
	}
}

// subscribeMQTT subscribes upstream to the in filters.
func (br *Bridge) subscribeMQTT(cm *autopaho.ConnectionManager, subs []paho.SubscribeOptions) {
	ctx, cancel := context.WithTimeout(br.ctx, 30*time.Second)
	defer cancel()
	sa, err := cm.Subscribe(ctx, &paho.Subscribe{Subscriptions: subs})
	if err != nil {
		br.setErr("subscribe: " + err.Error())
		br.log.Warn("bridge: subscribing upstream failed; retried on the next connection", "error", err)
		return
	}
	for i, r := range sa.Reasons {
		if r >= 0x80 && i < len(subs) {
			br.setErr(fmt.Sprintf("upstream refused subscription %q (reason 0x%02x)", subs[i].Topic, r))
			br.log.Warn("bridge: upstream refused a subscription", "filter", subs[i].Topic, "reason", fmt.Sprintf("0x%02x", r))
		}
	}
	br.subscribed.Add(1)
	br.notify()
	br.log.Debug("bridge subscribed upstream", "filters", len(subs))
}

// onDown runs when the connection is lost; autopaho reconnects.
func (br *Bridge) onDown() bool {
	br.mu.Lock()
	br.connLost()
	br.up = false
	br.downAt = time.Now()
	queued := len(br.q) + br.stored()
	br.notifyLocked()
	br.mu.Unlock()
	if !br.closed.Load() {
		br.log.Warn("bridge connection lost; reconnecting with backoff", "url", br.cfg.URL, "queued", queued)
	}
	return true
}

// onConnectError runs (in a goroutine) for each failed attempt.
func (br *Bridge) onConnectError(err error) {
	if br.closed.Load() {
		return
	}
	var ce *autopaho.ConnackError
	msg := err.Error()
	if errors.As(err, &ce) {
		msg = fmt.Sprintf("upstream refused the connection: %s (CONNACK reason 0x%02x)", wire.MQTTConnackReason(ce.ReasonCode), ce.ReasonCode)
	}
	n := br.connFailures.Add(1)
	br.mu.Lock()
	br.lastErr = msg
	queued := len(br.q) + br.stored()
	br.notifyLocked()
	br.mu.Unlock()
	br.log.Warn("bridge connect attempt failed; retrying with backoff", "url", br.cfg.URL, "error", msg, "failures", n, "queued", queued, "reconnect_max", br.cfg.ReconnectMax)
}

// inbound handles a message from the upstream: strip the prefix, check
// the in filters, $ and the ACL, then publish it locally. The PUBACK goes
// up once this returns, so once the broker accepted it (or refused it for
// good).
func (br *Bridge) inbound(p *paho.Publish) {
	sent := int64(0)
	if p.Properties != nil {
		sent = wire.ParseStamp(p.Properties.User.Get)
	}
	br.bringDown(p.Topic, p.Payload, p.QoS, p.Retain, sent)
}

// bringDown handles a message from the upstream on remote topic t (see
// inbound); sent is the publisher's send time (0: unknown, now).
func (br *Bridge) bringDown(t string, payload []byte, qos byte, retain bool, sent int64) {
	local, ok := strings.CutPrefix(t, br.cfg.RemotePrefix)
	refuse := func(why string, args ...any) {
		br.inRefused.Add(1)
		br.log.Debug("bridge: inbound message refused", append([]any{"topic", t, "why", why}, args...)...)
	}
	defer br.notify()
	if br.echo != nil && br.echo.echoed(t, payload) {
		br.echoes.Add(1)
		br.log.Debug("bridge: dropped the upstream's copy of a message it published", "topic", t)
		return
	}
	switch {
	case !ok || local == "":
		refuse("outside remote_prefix")
		return
	case strings.HasPrefix(local, "$"):
		refuse("$ topics never cross a bridge")
		return
	case !matchAny(br.cfg.In, local):
		refuse("matches no in filter")
		return
	}
	if err := br.b.Auth().Check(br.cfg.Identity, auth.Publish, local); err != nil {
		br.inRefused.Add(1)
		br.log.Warn("bridge: inbound message refused by the ACL", "topic", local, "identity", br.cfg.Identity, "error", err)
		return
	}
	if qos > 1 {
		qos = 1
	}
	if sent <= 0 {
		sent = time.Now().UnixNano()
	}
	_, err := br.b.Publish(br.ctx, broker.Message{
		Topic: local, Payload: payload, QoS: qos, Retain: retain,
		Time: sent, Origin: br.origin, Identity: br.cfg.Identity,
	})
	if err != nil {
		refuse("broker refused", "error", err)
		return
	}
	br.in.Add(1)
}
