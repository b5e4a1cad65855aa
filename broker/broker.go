// Package broker is quiot's HTTP/3 publish-subscribe broker, as a library.
//
// A Broker is the HTTP/3 front end of one topic space (broker/space:
// per-topic bounded history, retained messages, sequence numbers, live
// subscriptions), which it creates and owns. It serves the HTTP/3 pub-sub
// protocol v1 (see internal/wire for the frame format) on UDP, and the same
// handlers over HTTP/1.1 and HTTP/2 on TCP+TLS at the same port number, with
// Alt-Svc, with its limits, authentication and counters. Other protocols
// (MQTT over QUIC in broker/mqttquic) share the topic space through Publish,
// AddTap, Auth and the counters; the cluster link (broker/cluster) and the
// MQTT session store work on the space itself (Space). Message, Store,
// Federation and the space's errors are aliases of broker/space's names.
//
//	b, err := broker.New(&broker.Options{CertFile: "c.pem", KeyFile: "k.pem"})
//	...
//	go b.Serve()
//	...
//	b.Shutdown(ctx)
//
// # HTTP API
//
//	POST /v1/topics/{topic}?qos=0|1&retain=1   body = payload
//	     [Quiot-Time: <unix ns>]                -> 204, Quiot-Seq: N
//	POST /v1/publish   (application/vnd.quiot.frames: publish frames;
//	                    the response carries ack frames)
//	GET  /v1/topics/{filter}[?since=SEQ[&epoch=E]]  (Accept: text/event-stream -> SSE,
//	     [Last-Event-ID: SEQ or E-SEQ]               otherwise binary frames)
//	     [Quiot-Heartbeat: 1]                        -> 200, Quiot-Epoch: E
//	     (since=0: all the history; SSE: [&payload=base64], docs/pubsub.md)
//	GET  /healthz
//
// A topic or filter travels as one percent-encoded path segment
// ("/v1/topics/a%2F..%2Fb"); a raw '/' between levels means the same. A raw
// "." or ".." segment (or its %2E forms) is refused with 400: URL
// normalisation would have removed it. The topics "." and ".." themselves
// go as /v1/topics?topic=.. (docs/pubsub.md).
//
// Each broker run has a random epoch E. A subscriber resuming with the
// epoch of another run (the broker restarted: sequence numbers began again)
// is told so by a restart gap, then gets all the history there is; without
// an epoch, a restart is only recognised when SEQ is beyond the broker's
// last sequence number. A silent subscription gets heartbeats
// (Options.Heartbeat): SSE comments, or heartbeat frames when the request
// asked for them.
//
// Errors are answered with a one-line text/plain reason: 400 bad topic,
// filter or parameter; 401 missing or bad credentials; 403 denied by the
// ACL; 404/405 unknown path or method; 413 payload too large; 415 wrong
// content type; 429 a per-connection or per-identity limit reached
// (subscriptions, connections of the identity); 431 header section too
// large; 503 shutting down, or a broker-wide limit reached (connections on
// TCP, subscriptions); 507 retained-message store full
// (Limits.RetainedBytes); 425 a publish sent in 0-RTT data (only when the
// tuning allows 0-RTT). Limits and their refusals: limits.go.
//
// # Authentication
//
// Once per connection. A verified client certificate's CN is the identity. An
// Authorization header (Bearer token, or Basic user:password) on a request
// authenticates the connection it arrives on: later requests on the same
// connection need no header. A connection with neither is anonymous, which
// the ACL may allow or not (401).
package broker

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/quiot/quiot/broker/auth"
	"github.com/quiot/quiot/broker/space"
	"github.com/quiot/quiot/broker/web"
	"github.com/quiot/quiot/internal/certs"
	"github.com/quiot/quiot/internal/lograte"
	"github.com/quiot/quiot/internal/quicgov"
	"github.com/quiot/quiot/internal/srcvalid"
)

// Broker is an HTTP/3 pub-sub broker. Create it with New.
type Broker struct {
	opts  Options
	log   *slog.Logger
	stats *counters
	space *space.Space

	tlsH3  *tls.Config
	tlsTCP *tls.Config

	h3  *http3.Server
	tcp *http.Server

	mu       sync.Mutex
	started  bool
	ownPC    net.PacketConn
	tr       *quic.Transport
	udpAddr  net.Addr
	tcpLn    net.Listener
	serveErr chan error
	done     chan struct{} // closed when Shutdown/Close begins
	closed   chan struct{} // closed when everything has stopped
	stopOnce sync.Once
	closeErr error

	active tracker    // running request handlers
	lim    *limiters  // connection and subscription bounds (limits.go)
	idem   idemWindow // message ids' answers: idempotent and 0-RTT publishing (idem.go)
	// refusalLog bounds the log lines of refused requests (refuse.go).
	refusalLog lograte.Limiter
	// srcValid asks for QUIC address validation (Retry) when many
	// handshakes from unvalidated addresses are in progress (limits.go).
	srcValid *srcvalid.Validator
}

// Epoch returns the identifier of the topic space's run of sequence numbers
// (random, the store's saved one, or the cluster's: space.Space.Epoch),
// sent to subscribers in the Quiot-Epoch header (see internal/wire): a
// subscriber's resume point from another run is announced as a restart.
func (b *Broker) Epoch() uint64 { return b.space.Epoch() }

// New makes a broker from opts (nil means all defaults). It loads the
// certificates but does not listen yet.
func New(opts *Options) (*Broker, error) {
	o := opts.ensureDefaults()
	b := &Broker{opts: o, log: o.Logger, stats: &counters{}, done: make(chan struct{}), closed: make(chan struct{})}
	// The HTTP protocols' counters exist from the start, so their series
	// (quiot_broker_refused_total among them) are scraped before the first
	// connection.
	b.stats.proto(ProtoH3)
	if !o.DisableTCP {
		b.stats.proto(ProtoTCP)
	}
	b.space = space.New(space.Config{
		Limits:     spaceLimits(o.Limits),
		Federation: o.Cluster,
		CountIn:    func(origin string) { b.stats.proto(origin).in.Add(1) },
	})
	b.lim = newLimiters(o.Limits)
	b.srcValid = srcvalid.New(o.Limits.QUICRetryAbove)

	certsList := o.Certificates
	if len(certsList) == 0 {
		if o.CertFile == "" || o.KeyFile == "" {
			return nil, errors.New("no server certificate: set Certificates or CertFile and KeyFile")
		}
		c, err := tls.LoadX509KeyPair(o.CertFile, o.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("couldn't load server certificate: %w", err)
		}
		certsList = []tls.Certificate{c}
	}
	base := &tls.Config{Certificates: certsList}
	pool := o.ClientCAs
	if pool == nil && o.ClientCAFile != "" {
		p, err := certs.LoadPool(o.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("couldn't load client CA: %w", err)
		}
		pool = p
	}
	if pool != nil {
		base.ClientCAs = pool
		base.ClientAuth = tls.VerifyClientCertIfGiven
	}
	o.Tuning.ApplyServerTLS(base)
	// TLS 1.3 only, on every listener: QUIC requires it, and the TCP
	// fallback must not offer clients a weaker handshake than HTTP/3.
	base.MinVersion = tls.VersionTLS13
	b.tlsH3 = base.Clone()
	b.tlsH3.NextProtos = []string{http3.NextProtoH3}
	b.tlsTCP = base.Clone()
	b.tlsTCP.NextProtos = []string{"h2", "http/1.1"}

	handler, err := b.webHandler(http.HandlerFunc(b.serveHTTP)) // broker/web: CORS, sessions, dashboard
	if err != nil {
		return nil, err
	}
	handler = b.guard(handler) // 503 for TCP connections beyond the limits (limits.go)
	b.h3 = &http3.Server{
		Handler:     handler,
		TLSConfig:   b.tlsH3,
		QUICConfig:  b.quicConfig(),
		ConnContext: b.quicConnContext,
		Logger:      web.RedactTokens(o.Logger), // no session token from a URL in its request log
		// MaxHeaderBytes bounds a request's header section (Limits).
		MaxHeaderBytes: o.Limits.MaxHeaderBytes,
	}
	b.tcp = &http.Server{
		Handler:           handler,
		TLSConfig:         b.tlsTCP,
		ConnContext:       b.tcpConnContext,
		ConnState:         b.tcpConnState,
		ReadHeaderTimeout: o.Limits.ReadHeaderTimeout,
		IdleTimeout:       o.Limits.IdleTimeout,
		MaxHeaderBytes:    o.Limits.MaxHeaderBytes,
		HTTP2:             &http.HTTP2Config{MaxConcurrentStreams: o.Limits.MaxStreamsPerConn},
		ErrorLog:          slog.NewLogLogger(o.Logger.Handler(), slog.LevelDebug),
	}
	if o.Store != nil {
		if err := b.openStore(); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// openStore restores the saved state and keeps the saved epoch, so that
// subscribers resume across the restart without a gap.
func (b *Broker) openStore() error {
	st, err := b.space.OpenStore(b.opts.Store)
	if err != nil {
		return fmt.Errorf("couldn't load broker state: %w", err)
	}
	epoch := b.space.Epoch()
	switch {
	case st.Fresh:
		b.log.Info("no saved broker state: new epoch", "epoch", epoch)
	default:
		if st.Unclean {
			b.log.Warn("the previous broker run did not shut down cleanly: keeping the state it had committed")
		}
		s := b.Stats()
		b.log.Info("broker state restored: same epoch, subscribers resume without a gap", "epoch", epoch, "seq", s.LastSeq, "history", s.HistoryMessages, "retained", s.Retained)
	}
	return nil
}

// Auth returns the identities and ACL shared by every protocol.
func (b *Broker) Auth() *auth.Authenticator { return b.opts.Auth }

// Limits returns the effective limits (defaults applied).
func (b *Broker) Limits() Limits { return b.opts.Limits }

// Logger returns the broker's logger.
func (b *Broker) Logger() *slog.Logger { return b.log }

// Publish accepts a message into the topic space: it validates the topic,
// payload size and QoS, assigns the sequence number, stores history and the
// retained message, queues it for every matching subscriber (never
// blocking), and runs the taps. Authorisation is the caller's job (Auth).
// Errors wrap ErrBadTopic, ErrTooLarge, ErrBadQoS or ErrShuttingDown.
func (b *Broker) Publish(ctx context.Context, m Message) (seq uint64, err error) {
	return b.space.Publish(ctx, m)
}

// AddTap registers fn to run synchronously, under the topic space's lock,
// for every accepted message in acceptance order (space.Space.AddTap). fn
// must not block, must not modify the message, and must not call Publish
// (it would deadlock); it may hand the message to a goroutine.
func (b *Broker) AddTap(fn func(m *Message)) { b.space.AddTap(fn) }

// AddHoldTap registers fn as a tap that may hold the acknowledgement of a
// QoS 1 or 2 publisher until each Commit it passes to hold is done, and
// fail the publish with its error (space.Space.AddHoldTap): a bridge's
// store (docs/bridge.md).
func (b *Broker) AddHoldTap(fn func(m *Message, hold func(Commit))) { b.space.AddHoldTap(fn) }

// Start listens (UDP, and TCP unless disabled) and serves in the background.
// It returns once the broker is ready for connections.
func (b *Broker) Start() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.started {
		return errors.New("broker already started")
	}
	select {
	case <-b.done:
		return ErrShuttingDown
	default:
	}
	pc := b.opts.PacketConn
	var tln net.Listener
	if pc == nil {
		udp, t, err := b.listenPair()
		if err != nil {
			return err
		}
		b.ownPC, pc, tln = udp, udp, t
	}
	b.tr = &quic.Transport{Conn: quicgov.WrapWith(pc, b.opts.Tuning.ProbeGovernor, quicgov.Options{Logger: b.log, FirstFlightCopies: b.opts.Tuning.FirstFlightCopies}), ConnContext: b.quicAdmit, StatelessResetKey: b.opts.StatelessResetKey,
		VerifySourceAddress: b.srcValid.VerifySourceAddress}
	var ln http3.QUICListener
	var err error
	if qc := b.h3.QUICConfig; qc.Allow0RTT {
		ln, err = b.tr.ListenEarly(http3.ConfigureTLSConfig(b.tlsH3), qc)
	} else {
		var l *quic.Listener
		l, err = b.tr.Listen(http3.ConfigureTLSConfig(b.tlsH3), qc)
		ln = l
	}
	if err != nil {
		if tln != nil {
			_ = tln.Close()
		}
		b.closeSockets()
		return fmt.Errorf("couldn't start quic listener: %w", err)
	}
	b.udpAddr = ln.Addr()
	b.serveErr = make(chan error, 2)
	if !b.opts.DisableTCP {
		if b.opts.TCPListener != nil {
			tln = b.opts.TCPListener
		}
		if tln == nil {
			port := 0
			if ua, ok := b.udpAddr.(*net.UDPAddr); ok {
				port = ua.Port
			}
			host, _, err := net.SplitHostPort(b.opts.Listen)
			if err != nil || b.opts.PacketConn != nil {
				host = ""
				if ua, ok := b.udpAddr.(*net.UDPAddr); ok && !ua.IP.IsUnspecified() {
					host = ua.IP.String()
				}
			}
			tln, err = net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
			if err != nil {
				_ = ln.Close()
				b.closeSockets()
				return fmt.Errorf("couldn't listen on tcp port %d (same as udp): %w", port, err)
			}
		}
		b.tcpLn = tln
		go func() {
			err := b.tcp.Serve(tls.NewListener(limitListener{Listener: tln, b: b}, b.tlsTCP))
			if errors.Is(err, http.ErrServerClosed) {
				err = nil
			}
			b.serveErr <- err
		}()
	}
	go func() {
		err := b.h3.ServeListener(validatedListener{ln})
		if errors.Is(err, http.ErrServerClosed) || errors.Is(err, quic.ErrServerClosed) {
			err = nil
		}
		b.serveErr <- err
	}()
	b.started = true
	b.log.Info("broker listening", "udp", b.udpAddr.String(), "tcp", b.tcpAddr(), "auth_open", b.opts.Auth.IsOpen(), "anonymous", b.opts.Auth.Anonymous())
	return nil
}

// quicConfig is the broker's quic.Config: its tuning profile's, with the
// tracer of Options.
func (b *Broker) quicConfig() *quic.Config {
	qc := b.opts.Tuning.QUICConfig()
	qc.Tracer = b.opts.Tracer
	return qc
}

// listenPair opens the UDP socket at Options.Listen and, when the TCP
// listener is the broker's own, TCP on the same port. With port 0 it retries
// when the kernel's UDP port is taken on TCP.
func (b *Broker) listenPair() (net.PacketConn, net.Listener, error) {
	return ListenPair(b.opts.Listen, !b.opts.DisableTCP && b.opts.TCPListener == nil)
}

// listenPacket is net.ListenPacket; a test makes it return a port whose
// TCP twin is taken.
var listenPacket = net.ListenPacket

// ListenPair opens the UDP socket for HTTP/3 on listen and, when withTCP is
// set, a TCP listener on the same port for HTTP/1.1 and HTTP/2. With port 0
// the UDP port is the kernel's choice, and when that number is taken on TCP
// (by any other socket of the host) it tries another pair, up to ten times.
// A caller that wraps the UDP socket (Options.PacketConn) passes the TCP
// listener as Options.TCPListener.
func ListenPair(listen string, withTCP bool) (net.PacketConn, net.Listener, error) {
	_, port, _ := net.SplitHostPort(listen)
	for attempt := 0; ; attempt++ {
		udp, err := listenPacket("udp", listen)
		if err != nil {
			return nil, nil, fmt.Errorf("couldn't listen on udp %s: %w", listen, err)
		}
		if !withTCP {
			return udp, nil, nil
		}
		ua := udp.LocalAddr().(*net.UDPAddr)
		host := ""
		if !ua.IP.IsUnspecified() {
			host = ua.IP.String()
		}
		tln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(ua.Port)))
		if err == nil {
			return udp, tln, nil
		}
		_ = udp.Close()
		if port != "0" || attempt == 9 {
			return nil, nil, fmt.Errorf("couldn't listen on tcp port %d (same as udp): %w", ua.Port, err)
		}
	}
}

// Serve starts the broker (see Start) and blocks until Shutdown or Close has
// finished, returning the first serving error.
func (b *Broker) Serve() error {
	if err := b.Start(); err != nil {
		return err
	}
	<-b.closed
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.closeErr
}

// ListenAndServe is Serve, named as net/http names it.
func (b *Broker) ListenAndServe() error { return b.Serve() }

// Addr is the UDP (HTTP/3) address, or nil before Start.
func (b *Broker) Addr() net.Addr {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.udpAddr
}

// TCPAddr is the TCP (HTTP/1.1, HTTP/2) address, or nil.
func (b *Broker) TCPAddr() net.Addr {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.tcpAddr()
}

// tcpAddr is TCPAddr with b.mu held.
func (b *Broker) tcpAddr() net.Addr {
	if b.tcpLn == nil {
		return nil
	}
	return b.tcpLn.Addr()
}

// Shutdown stops gracefully: new requests get 503, publishes fail with
// ErrShuttingDown, subscribers receive what is queued for them and their
// responses end, streamed publishers are stopped; then the broker sends
// GOAWAY and waits for clients to close their connections once they have
// read their responses. It waits for this until ctx ends (or
// Options.ShutdownGrace if ctx has no deadline), then closes everything.
// It returns an error only when handlers were still running at the end.
func (b *Broker) Shutdown(ctx context.Context) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, b.opts.ShutdownGrace)
		defer cancel()
	}
	first := false
	b.stopOnce.Do(func() { first = true; close(b.done) })
	if !first {
		<-b.closed
		return nil
	}
	b.space.Shutdown()
	drained := b.active.idle()
	var err error
	select {
	case <-drained:
		// The handlers have written their last bytes, which may still sit
		// in send buffers: closing the connections now would discard them.
		// Send GOAWAY and let the clients close their connections once they
		// have read their responses (within the same grace).
		b.drainConns(ctx)
	case <-ctx.Done():
		err = fmt.Errorf("shutdown grace ended with requests running: %w", ctx.Err())
	}
	b.finish()
	return err
}

// drainConns shuts the HTTP/3 and TCP servers down gracefully: no new
// requests, and connections end once their clients are done with them, or
// when ctx ends (then finish closes what is left).
func (b *Broker) drainConns(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() { _ = b.h3.Shutdown(ctx) })
	wg.Go(func() { _ = b.tcp.Shutdown(ctx) })
	wg.Wait()
}

// Close stops at once: connections are closed without draining.
func (b *Broker) Close() error {
	first := false
	b.stopOnce.Do(func() { first = true; close(b.done) })
	if !first {
		<-b.closed
		return nil
	}
	b.space.Shutdown()
	b.finish()
	return nil
}

// finish closes servers and sockets and records the serving errors.
func (b *Broker) finish() {
	_ = b.h3.Close()
	_ = b.tcp.Close()
	b.mu.Lock()
	started := b.started
	b.mu.Unlock()
	var errs []error
	if started {
		n := 1
		if !b.opts.DisableTCP {
			n = 2
		}
		for range n {
			if err := <-b.serveErr; err != nil {
				errs = append(errs, err)
			}
		}
	}
	if b.opts.Store != nil {
		// Every handler has returned: nothing is appended any more.
		if err := b.opts.Store.Close(); err != nil {
			errs = append(errs, fmt.Errorf("couldn't close broker state: %w", err))
		}
	}
	b.mu.Lock()
	b.closeSockets()
	b.closeErr = errors.Join(errs...)
	b.mu.Unlock()
	close(b.closed)
}

// closeSockets closes the transport and the sockets the broker opened. b.mu held.
func (b *Broker) closeSockets() {
	if b.tr != nil {
		_ = b.tr.Close()
	}
	if b.ownPC != nil {
		_ = b.ownPC.Close()
	}
}

// Done is closed when Shutdown or Close begins.
func (b *Broker) Done() <-chan struct{} { return b.done }

// tracker counts running handlers; idle() is closed when none run.
type tracker struct {
	mu   sync.Mutex
	n    int
	wait chan struct{}
}

func (t *tracker) add() {
	t.mu.Lock()
	t.n++
	t.mu.Unlock()
}

func (t *tracker) done() {
	t.mu.Lock()
	t.n--
	if t.n == 0 && t.wait != nil {
		close(t.wait)
		t.wait = nil
	}
	t.mu.Unlock()
}

// running is the number of running handlers.
func (t *tracker) running() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.n
}

func (t *tracker) idle() <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := make(chan struct{})
	if t.n == 0 {
		close(c)
		return c
	}
	if t.wait == nil {
		t.wait = c
	}
	return t.wait
}
