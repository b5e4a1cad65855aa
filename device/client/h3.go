package client

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/quiot/quiot/internal/probehold"
	"github.com/quiot/quiot/internal/wire"
)

// The HTTP/3 pub-sub client (scheme https) of the protocol docs/pubsub.md
// describes. One QUIC connection at a time over one quic.Transport (so a
// counting Options.PacketConn sees every datagram of every reconnection);
// connected lazily on the first Publish or Subscribe and redialled when it
// dies. Requests of Publish and Subscribe share the connection.

func init() { registerScheme("https", newH3) }

const (
	// h3DefaultPort is used when the broker URL names no port.
	h3DefaultPort = "4433"
	// maxReasonBytes bounds how much of an error answer is read as its reason.
	maxReasonBytes = 512
)

// ErrClosed is returned by a client's methods after Close.
var ErrClosed = errors.New("client closed")

// errSubscriptionEnded is returned when the broker ends a subscription
// cleanly (e.g. it is shutting down); with Reconnect the client resubscribes.
var errSubscriptionEnded = errors.New("broker ended the subscription")

// StatusError is a broker's non-success HTTP answer to a request.
type StatusError struct {
	// Op names what was attempted, e.g. `publish to "a/b"`.
	Op string
	// Code is the HTTP status code.
	Code int
	// Reason is the broker's one-line plain-text reason, if any.
	Reason string
}

// Error implements error.
func (e *StatusError) Error() string {
	s := fmt.Sprintf("%s: broker answered %d %s", e.Op, e.Code, http.StatusText(e.Code))
	if e.Reason != "" {
		s += ": " + e.Reason
	}
	return s
}

// Temporary reports whether retrying may succeed: 5xx (503 shutting down)
// and 429 (too many subscriptions or streams). Other 4xx answers (400 bad
// topic, 401/403 authentication and ACL, 413 payload too large) are final.
func (e *StatusError) Temporary() bool {
	return e.Code >= 500 || e.Code == http.StatusTooManyRequests
}

// retryable reports whether err may go away on a retry or a new connection.
// Context errors, final broker answers, closed clients and TLS verification
// failures are not.
func retryable(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrClosed) {
		return false
	}
	if se, ok := errors.AsType[*StatusError](err); ok {
		return se.Temporary()
	}
	if _, ok := errors.AsType[*tls.CertificateVerificationError](err); ok {
		return false
	}
	if _, ok := errors.AsType[x509.UnknownAuthorityError](err); ok {
		return false
	}
	if errors.Is(err, ErrPinMismatch) || errors.Is(err, ErrUnreachable) {
		return false
	}
	if te, ok := errors.AsType[*quic.TransportError](err); ok && te.ErrorCode.IsCryptoError() {
		// A TLS alert: bad certificate on either side, no common ALPN.
		return false
	}
	return true
}

// h3Client implements Client for the HTTP/3 pub-sub protocol.
type h3Client struct {
	opts     *Options
	log      *slog.Logger
	hostport string // host:port to dial
	tlsConf  *tls.Config
	qconf    *quic.Config
	h3       *http3.Transport
	backoff  Backoff
	report   *connReport

	// dialSem serializes dialling (a 1-slot semaphore, so waiters can give
	// up with their context).
	dialSem chan struct{}

	mu        sync.Mutex
	tr        *quic.Transport
	gate      zeroRTTGate    // orders streams opened in 0-RTT before the broker's parameters (zerortt_gate.go)
	ownPC     net.PacketConn // the socket we created; nil when Options.PacketConn is used
	outage    *outageUDP     // the socket as quic-go sees it (netdown.go); nil for a wrapped Options.PacketConn
	stopWatch func()         // ends the address watch (migrate.go); nil without one
	mig       *migrator      // nil without an address watch
	cur       *h3Conn
	conns     int
	handshake time.Duration
	closed    bool
	sp        *streamPub // the current streamed-publish request (PublishMode "stream")
	// hold is the RTT the handshake probe hold uses (0: none);
	// holdFromSession says it came from the session cache (RTTMemory).
	hold            time.Duration
	holdFromSession bool

	spMu sync.Mutex // serializes opening a streamed-publish request
}

// h3Conn is one QUIC connection with its HTTP/3 client.
type h3Conn struct {
	qc *quic.Conn
	cc *http3.ClientConn

	// Token authentication, once per connection: the first request carries
	// the Authorization header; requests that start while it is in flight
	// wait for its answer, so the broker has bound the identity to the
	// connection before they arrive.
	authMu   sync.Mutex
	authDone bool
	authWait chan struct{} // non-nil while the authenticating request is in flight
}

func (hc *h3Conn) alive() bool { return hc.qc.Context().Err() == nil }

func newH3(u *url.URL, opts *Options) (Client, error) {
	if u.Path != "" && u.Path != "/" {
		return nil, fmt.Errorf("bad broker URL %q: want no path (e.g. https://host:4433)", opts.Broker)
	}
	switch opts.PublishMode {
	case "request", "stream":
	default:
		return nil, fmt.Errorf("unknown publish mode %q (want request or stream)", opts.PublishMode)
	}
	host := u.Hostname()
	port := u.Port()
	if port == "" {
		port = h3DefaultPort
	}
	tc := &tls.Config{
		ServerName:         host,
		NextProtos:         []string{http3.NextProtoH3},
		RootCAs:            opts.RootCAs,
		InsecureSkipVerify: opts.Insecure, //nolint:gosec // --insecure is the user's explicit choice (development)
	}
	if opts.Certificate != nil {
		tc.Certificates = []tls.Certificate{*opts.Certificate}
	}
	pinTLS(tc, opts.PinSHA256)
	tc.ClientSessionCache = opts.SessionCache
	opts.Tuning.ApplyClientTLS(tc)
	qc := opts.Tuning.QUICConfig()
	// The broker's NEW_TOKEN of one connection is presented on the next:
	// it skips address validation and both sides restore the RTT measured
	// before (connection.go token.rtt, server.go token.RTT). In quic-go
	// v0.65 that does not change the handshake PTO (2 x 100 ms until an own
	// RTT sample): Options.HandshakeRTT does (h3probe.go). In memory:
	// quic.ClientToken cannot be serialized outside quic-go, so it lasts as
	// long as the process.
	qc.TokenStore = opts.TokenStore
	if qc.TokenStore == nil {
		qc.TokenStore = quic.NewLRUTokenStore(4, 2)
	}
	if opts.Tracer != nil {
		qc.Tracer = opts.Tracer
	}
	if qc.Allow0RTT {
		// Streams opened in 0-RTT, the control stream included, come
		// before the broker's parameters are read (zerortt_gate.go).
		qc.Tracer = watchControlStream(qc.Tracer)
	}
	c := &h3Client{
		opts:     opts,
		log:      opts.Logger,
		hostport: net.JoinHostPort(host, port),
		tlsConf:  tc,
		qconf:    qc,
		h3:       &http3.Transport{DisableCompression: true, Logger: nil},
		backoff:  Backoff{Max: opts.MaxBackoff},
		report:   &connReport{log: opts.Logger, addr: "https://" + net.JoinHostPort(host, port), timeout: opts.ConnectTimeout},
		dialSem:  make(chan struct{}, 1),
	}
	if qc.Allow0RTT {
		gateSessions(tc, &c.gate)
	}
	return c, nil
}

// transport returns the quic.Transport, creating it (and the socket) once.
func (c *h3Client) transport() (*quic.Transport, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.tr != nil {
		return c.tr, nil
	}
	sock, err := openClientSocket(c.opts.PacketConn, c.opts.Logger) // netdown.go
	if err != nil {
		return nil, err
	}
	if sock.own != nil {
		c.ownPC = sock.own
	}
	pc, u := sock.pc, sock.udp
	c.outage = sock.outage
	hold, fromSession := handshakeHold(c.opts, c.hostport)
	c.hold, c.holdFromSession = hold, fromSession
	pc = probehold.NewWithOptions(pc, probeHold(hold), probeHoldOptions(c.opts, hold)) // h3probe.go
	c.tr = &quic.Transport{Conn: newGateConn(pc, &c.gate)}
	if u != nil {
		var ctx context.Context
		ctx, c.stopWatch = context.WithCancel(context.Background())
		c.mig = startMigrator(ctx, c.opts.Logger, u, c.tr, c.currentQUIC)
	}
	return c.tr, nil
}

// currentQUIC returns the live QUIC connection, nil if none.
func (c *h3Client) currentQUIC() *quic.Conn {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cur == nil {
		return nil
	}
	return c.cur.qc
}

// conn returns the live connection, dialling a new one if there is none.
func (c *h3Client) conn(ctx context.Context) (*h3Conn, error) {
	return c.connFor(ctx, false)
}

// connFor is conn; with early, a new connection in 0-RTT keeps the broker's
// datagrams held back for the caller's request stream (publishEarly).
func (c *h3Client) connFor(ctx context.Context, early bool) (*h3Conn, error) {
	select {
	case c.dialSem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-c.dialSem }()

	c.mu.Lock()
	closed, cur := c.closed, c.cur
	c.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	if cur != nil && cur.alive() {
		return cur, nil
	}
	tr, err := c.transport()
	if err != nil {
		return nil, err
	}
	addr, err := net.ResolveUDPAddr("udp", c.hostport)
	if err != nil {
		return nil, &dialError{addr: c.hostport, err: err}
	}
	start := time.Now()
	dial := tr.Dial
	if c.qconf.Allow0RTT {
		// With a session ticket the connection is returned at once and
		// a publish with a message id goes in 0-RTT data (publishEarly).
		dial = tr.DialEarly
	}
	dctx := ctx
	if t := c.opts.ConnectTimeout; t > 0 {
		var cancel context.CancelFunc
		dctx, cancel = context.WithTimeout(ctx, t)
		defer cancel()
	}
	keep := false // the broker's datagrams stay held for publishEarly
	defer func() {
		if !keep {
			c.gate.release()
		}
	}()
	qc, err := dial(dctx, addr, c.tlsConf, c.qconf)
	if err != nil {
		if ctx.Err() == nil && dctx.Err() != nil {
			err = fmt.Errorf("no answer over UDP within %s", c.opts.ConnectTimeout)
		}
		return nil, &dialError{addr: c.hostport, err: err}
	}
	hs := time.Since(start)
	if c.outage != nil {
		c.outage.arm()
	}
	c.mig.connected(qc)
	hc := &h3Conn{qc: qc, cc: c.h3.NewClientConn(qc)}
	if !handshakeDone(qc) {
		if early {
			keep = true // publishEarly lets them through (awaitControl)
		} else {
			awaitControl(ctx, qc)
		}
	}
	if !handshakeDone(qc) {
		c.mu.Lock()
		first := c.conns == 0
		c.mu.Unlock()
		go func() {
			select {
			case <-qc.HandshakeComplete():
				if first {
					c.mu.Lock()
					c.handshake = time.Since(start)
					c.mu.Unlock()
				}
			case <-qc.Context().Done():
			}
		}()
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		_ = qc.CloseWithError(0, "client closed")
		return nil, ErrClosed
	}
	c.conns++
	if c.conns == 1 && handshakeDone(qc) {
		c.handshake = hs
	}
	c.cur = hc
	c.log.Debug("connected", "broker", c.hostport, "handshake", hs, "connection", c.conns)
	return hc, nil
}

// authorize adds the Authorization header to req if it is the first request
// of hc, or waits until the first one has been answered; with
// Options.AuthEveryRequest it adds it to every request. done must be called
// with whether the broker accepted the credentials once the answer (or a
// failure) is known.
func (c *h3Client) authorize(ctx context.Context, hc *h3Conn, req *http.Request) (done func(accepted bool), err error) {
	noop := func(bool) {}
	if c.opts.Token == "" {
		return noop, nil
	}
	if c.opts.AuthEveryRequest {
		req.Header.Set("Authorization", c.authHeader())
		return noop, nil
	}
	for {
		hc.authMu.Lock()
		if hc.authDone {
			hc.authMu.Unlock()
			return noop, nil
		}
		if w := hc.authWait; w != nil {
			hc.authMu.Unlock()
			select {
			case <-w:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		w := make(chan struct{})
		hc.authWait = w
		hc.authMu.Unlock()
		req.Header.Set("Authorization", c.authHeader())
		return func(accepted bool) {
			hc.authMu.Lock()
			hc.authDone = accepted
			hc.authWait = nil
			hc.authMu.Unlock()
			close(w)
		}, nil
	}
}

// authBound reports whether an answer with this status shows that the broker
// bound the token to the connection. Only a success does: a broker may
// reject a request (bad topic, payload too large, shutting down) before it
// looks at the credentials, so after any other answer the next request
// carries the token again.
func authBound(status int) bool { return status/100 == 2 }

func (c *h3Client) authHeader() string {
	if c.opts.Username != "" {
		return "Basic " + base64.StdEncoding.EncodeToString([]byte(c.opts.Username+":"+c.opts.Token))
	}
	return "Bearer " + c.opts.Token
}

// do sends one request on the current connection (dialling if needed) and
// returns the response with its headers; the caller closes the body.
// newReq builds the request for ctx; it is called once.
func (c *h3Client) do(ctx context.Context, newReq func(ctx context.Context) (*http.Request, error)) (*http.Response, *h3Conn, error) {
	hc, err := c.conn(ctx)
	if err != nil {
		return nil, nil, err
	}
	req, err := newReq(ctx)
	if err != nil {
		return nil, nil, err
	}
	done, err := c.authorize(ctx, hc, req)
	if err != nil {
		return nil, nil, err
	}
	resp, err := hc.cc.RoundTrip(req)
	if err != nil {
		done(false)
		return nil, hc, err
	}
	done(authBound(resp.StatusCode))
	return resp, hc, nil
}

// statusError turns a non-2xx answer into a *StatusError, reading the
// reason from the body, which it closes.
func statusError(op string, resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxReasonBytes))
	_ = resp.Body.Close()
	reason := strings.TrimSpace(string(b))
	if i := strings.IndexByte(reason, '\n'); i >= 0 {
		reason = strings.TrimSpace(reason[:i])
	}
	return &StatusError{Op: op, Code: resp.StatusCode, Reason: reason}
}

// retry runs op until it succeeds, fails for good, or ctx is done; with
// Options.Reconnect false it runs op once.
func (c *h3Client) retry(ctx context.Context, what string, op func(ctx context.Context) error) error {
	for attempt := 0; ; attempt++ {
		began := time.Now()
		err := op(ctx)
		if err == nil {
			c.report.ok()
			return nil
		}
		if !c.opts.Reconnect || !retryable(err) || ctx.Err() != nil {
			return err
		}
		down := c.report.failed(err, began, true)
		d := c.backoff.Delay(attempt)
		if t := c.opts.ConnectTimeout; t > 0 && isDialError(err) {
			if down >= t {
				return c.report.unreachable(err)
			}
			d = min(d, t-down)
		}
		c.log.Debug("retrying", "op", what, "error", err, "after", d.Round(time.Millisecond))
		if sleep(ctx, d) != nil {
			return err
		}
	}
}

// pathFor returns the URL of /v1/topics/{topic-or-filter} on the broker,
// with the query q: the whole topic as one percent-encoded path segment,
// the broker's one encoding rule (docs/pubsub.md; wire.TopicURL).
func (c *h3Client) pathFor(name string, q url.Values) *url.URL {
	return wire.TopicURL(c.baseURL(), name, q)
}

// publishPathFor is pathFor for a publish: raw '/' between the levels of a
// topic whose levels are all safe path segments, which is shorter on the
// wire (wire.PublishTopicURL).
func (c *h3Client) publishPathFor(name string, q url.Values) *url.URL {
	return wire.PublishTopicURL(c.baseURL(), name, q)
}

// baseURL is the broker's scheme and host, the base of every request URL.
func (c *h3Client) baseURL() *url.URL {
	return &url.URL{Scheme: "https", Host: c.hostport}
}

// Publish implements Client.
func (c *h3Client) Publish(ctx context.Context, topicName string, payload []byte, po PublishOptions) (Ack, error) {
	if topicName == "" {
		return Ack{}, errors.New("publish: empty topic")
	}
	if po.QoS > 1 {
		return Ack{}, fmt.Errorf("publish to %q: qos %d not supported (want 0 or 1)", topicName, po.QoS)
	}
	var ack Ack
	msg := &msgID{id: newMsgID()} // the same for every retry of this message
	op := func(ctx context.Context, t string, p []byte, po PublishOptions) (Ack, error) {
		return c.publishRequest(ctx, t, p, po, msg)
	}
	if c.opts.PublishMode == "stream" {
		op = c.publishStream
	}
	err := c.retry(ctx, "publish", func(ctx context.Context) error {
		var err error
		ack, err = op(ctx, topicName, payload, po)
		return err
	})
	return ack, err
}

// sendTime is the send-time stamp of a message: the caller's, or now, taken
// once the connection is up (connection setup belongs to time to first
// data, not to the message's latency).
func sendTime(t time.Time) time.Time {
	if t.IsZero() {
		return time.Now()
	}
	return t
}

// msgID is a message's id and whether its requests carry it.
type msgID struct {
	id   string
	sent bool // set once a request went in 0-RTT data; then every retry carries it
}

// publishRequest publishes with one POST /v1/topics/{topic}. On a
// connection still in its handshake (0-RTT allowed, a session ticket at
// hand) the request goes in 0-RTT data with the message id (header
// Quiot-Msg-Id), which makes a replay harmless: the broker answers a repeat
// with the first answer (broker/idem.go); a 425 or a rejected 0-RTT sends it
// again once the handshake is done, with the same id. Other requests go
// without the id: on a 20 kbit/s uplink its ~30 header bytes (quic-go's
// QPACK sends the name literally every time) cost 12 ms per message.
func (c *h3Client) publishRequest(ctx context.Context, topicName string, payload []byte, po PublishOptions, msg *msgID) (Ack, error) {
	op := fmt.Sprintf("publish to %q", topicName)
	q := url.Values{}
	if po.QoS != 1 { // 1 is the broker's default: no "?qos=1" on every request
		q.Set(wire.QueryQoS, strconv.Itoa(int(po.QoS)))
	}
	if po.Retain {
		q.Set(wire.QueryRetain, "1")
	}
	u := c.publishPathFor(topicName, q)
	var stamp time.Time
	newReq := func(ctx context.Context) (*http.Request, error) {
		var body io.Reader = http.NoBody
		if len(payload) > 0 {
			body = bytes.NewReader(payload)
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), body)
		if err != nil {
			return nil, err
		}
		// No content-length (4 bytes after QPACK on every request): the
		// payload is one DATA frame ended by the stream's FIN, which is
		// all HTTP/3 needs; the broker bounds what it reads either way.
		// An empty payload keeps quic-go's "content-length: 0" for a POST.
		req.ContentLength = int64(len(payload))
		if len(payload) > 0 {
			req.ContentLength = -1
		}
		stamp = sendTime(po.Sent)
		req.Header.Set(wire.HeaderTime, strconv.FormatInt(stamp.UnixNano(), 10))
		// No User-Agent: quic-go's default ("Go-http-client/3", ~25
		// bytes, sent literally every time) is 10 ms per message on a
		// 20 kbit/s uplink.
		req.Header["User-Agent"] = []string{""}
		if msg.sent {
			req.Header.Set(wire.HeaderMsgID, msg.id)
		}
		return req, nil
	}
	resp, err := c.publishEarly(ctx, func(ctx context.Context) (*http.Request, error) {
		msg.sent = true
		return newReq(ctx)
	}, payload)
	if resp == nil && err == nil {
		resp, _, err = c.do(ctx, newReq)
	}
	if err != nil {
		return Ack{}, fmt.Errorf("%s: %w", op, err)
	}
	if resp.StatusCode/100 != 2 {
		return Ack{}, statusError(op, resp)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxReasonBytes))
	_ = resp.Body.Close()
	ack := Ack{Sent: stamp}
	if s := resp.Header.Get(wire.HeaderSeq); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return Ack{}, fmt.Errorf("%s: bad %s header %q from broker", op, wire.HeaderSeq, s)
		}
		ack.Seq = n
	}
	return ack, nil
}

// handshakeDone reports whether qc's handshake has completed.
func handshakeDone(qc *quic.Conn) bool {
	select {
	case <-qc.HandshakeComplete():
		return true
	default:
		return false
	}
}

// publishEarly sends a publish in 0-RTT data when the connection is still
// in its handshake. It returns (nil, nil) when the request is to go the
// ordinary way (no 0-RTT, handshake done, the broker answered 425, or the
// broker rejected 0-RTT).
func (c *h3Client) publishEarly(ctx context.Context, newReq func(ctx context.Context) (*http.Request, error), payload []byte) (*http.Response, error) {
	if !c.qconf.Allow0RTT {
		return nil, nil
	}
	hc, err := c.connFor(ctx, true)
	defer c.gate.release() // no early request stream after all
	if err != nil {
		return nil, err
	}
	if handshakeDone(hc.qc) {
		return nil, nil
	}
	req, err := newReq(ctx)
	if err != nil {
		return nil, err
	}
	done, err := c.authorize(ctx, hc, req)
	if err != nil {
		return nil, err
	}
	// http3's RoundTrip waits for the handshake unless the method is
	// GET_0RTT/HEAD_0RTT; a request stream does not: the header, the
	// payload as a DATA frame and the FIN go in the first flight.
	if testHookEarlyDialed != nil {
		testHookEarlyDialed()
	}
	var str *http3.RequestStream
	if !c.gate.openHeld(func() { str, err = hc.cc.OpenRequestStream(ctx) }) {
		// Another request took the 0-RTT window: after the handshake.
		done(false)
		return nil, nil
	}
	if err != nil {
		done(false)
		return c.earlyFailed(hc, err)
	}
	// quic-go's request writer declares "content-length: 0" for a POST
	// sent with SendRequestHeader, so the payload travels in the
	// Quiot-Payload header (base64url) instead of a body.
	hdr := req.Clone(ctx)
	hdr.Body, hdr.ContentLength = nil, 0
	if len(payload) > 0 {
		hdr.Header.Set(wire.HeaderPayload, base64.RawURLEncoding.EncodeToString(payload))
	}
	if err := str.SendRequestHeader(hdr); err != nil {
		done(false)
		return c.earlyFailed(hc, err)
	}
	_ = str.Close()
	// Only now wait for http3's control stream: waiting before the
	// request let its SETTINGS go in a 0-RTT datagram of its own.
	awaitControl(ctx, hc.qc)
	c.gate.release()
	resp, err := str.ReadResponse()
	if err != nil {
		done(false)
		return c.earlyFailed(hc, err)
	}
	done(authBound(resp.StatusCode))
	if resp.StatusCode == http.StatusTooEarly {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxReasonBytes))
		_ = resp.Body.Close()
		c.log.Debug("broker answered 425 to a 0-RTT publish; sending it after the handshake")
		return nil, nil
	}
	return resp, nil
}

// earlyFailed handles a failed 0-RTT request: a rejected 0-RTT (the broker
// forgot the ticket or does not take early data) ends the connection and
// the request goes again on a new one.
func (c *h3Client) earlyFailed(hc *h3Conn, err error) (*http.Response, error) {
	if errors.Is(err, quic.Err0RTTRejected) {
		c.log.Debug("0-RTT rejected by the broker; publishing after a full handshake")
		_ = hc.qc.CloseWithError(0, "0-RTT rejected")
		<-hc.qc.Context().Done()
		return nil, nil
	}
	return nil, err
}

// newMsgID returns a random message id (16 hex digits).
func newMsgID() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go >= 1.24)
	return hex.EncodeToString(b[:])
}

// Subscribe implements Client. It returns nil when ctx is done, and an
// error when the subscription fails for good (a final broker answer such as
// 400 or 403, or any failure when Options.Reconnect is off).
func (c *h3Client) Subscribe(ctx context.Context, filter string, since uint64, h func(Message)) error {
	if filter == "" {
		return errors.New("subscribe: empty filter")
	}
	st := &resumeState{filter: filter, since: since, last: map[string]uint64{}}
	if since == SinceStart {
		st.since, st.fromStart = 0, true
	}
	attempt := 0
	for {
		began := time.Now()
		err := c.subscribeOnce(ctx, st, h, func() { attempt = 0; c.report.ok() })
		if ctx.Err() != nil {
			return nil
		}
		if !c.opts.Reconnect || !retryable(err) {
			return err
		}
		down := c.report.failed(err, began, true)
		d := c.backoff.Delay(attempt)
		attempt++
		if t := c.opts.ConnectTimeout; t > 0 && isDialError(err) {
			if down >= t {
				return c.report.unreachable(err)
			}
			d = min(d, t-down)
		}
		c.log.Debug("resubscribing", "filter", filter, "error", err, "after", d.Round(time.Millisecond), "since", st.resumePoint())
		if sleep(ctx, d) != nil {
			return nil
		}
	}
}

// resumeState tracks what a subscription has seen, so a resubscription
// resumes after it and drops what it already delivered. The broker's
// sequence numbers come from one broker-wide counter (internal/wire), so
// the highest one seen is a resume point for any filter; retained messages
// replayed first carry older numbers, hence the per-topic duplicate check.
// The broker run's epoch goes with the resume point, so that a broker that
// restarted in between recognises a resume point of its previous run (and
// announces the restart) even after it has numbered more messages.
type resumeState struct {
	filter string
	since  uint64            // the caller's since, then the highest sequence seen
	epoch  uint64            // the broker run since belongs to; 0: unknown
	last   map[string]uint64 // topic -> last sequence delivered
	// fromStart: the caller asked for all history (SinceStart), so a
	// resume point of 0 is sent as since=0, not left out.
	fromStart bool
	// resumed: a subscription was accepted before; history replayed now
	// is what the client missed while reconnecting, not Message.Replayed.
	resumed bool
}

// resumePoint is the ?since= of the next subscription (0: none).
func (s *resumeState) resumePoint() uint64 { return s.since }

// query returns the resume parameters of the next subscription: since
// and, when known, the epoch it belongs to.
func (s *resumeState) query() url.Values {
	q := url.Values{}
	if s.since > 0 || s.fromStart {
		q.Set(wire.QuerySince, strconv.FormatUint(s.since, 10))
		if s.epoch != 0 {
			q.Set(wire.QueryEpoch, wire.FormatEpoch(s.epoch))
		}
	}
	return q
}

// reset forgets what was seen (the broker restarted). The epoch is the
// response's, set apart.
func (s *resumeState) reset() {
	s.since = 0
	clear(s.last)
}

// accept reports whether m is new, recording it. live says whether the
// subscription delivers live messages yet: while the broker replays its
// history, a gap on one topic can end above messages of other topics
// still to be replayed (the topic's history cut by --history-per-topic),
// so a gap moves the resume point only once the replay is over.
func (s *resumeState) accept(m *Message, live bool) bool {
	if m.Gap {
		// m.Seq is the first sequence after the gap (see Message.Gap).
		if live && m.Seq > 0 && m.Seq-1 > s.since {
			s.since = m.Seq - 1
		}
		return true
	}
	if m.Seq == 0 {
		return true
	}
	if last, seen := s.last[m.Topic]; seen && m.Seq <= last {
		return false
	}
	s.last[m.Topic] = m.Seq
	if m.Seq > s.since {
		s.since = m.Seq
	}
	return true
}

// subscribeOnce runs one GET /v1/topics/{filter} until it ends; connected
// is called once the broker accepted the subscription.
func (c *h3Client) subscribeOnce(ctx context.Context, st *resumeState, h func(Message), connected func()) error {
	op := fmt.Sprintf("subscribe to %q", st.filter)
	q := st.query()
	u := c.pathFor(st.filter, q)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	resp, _, err := c.do(ctx, func(ctx context.Context) (*http.Request, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
		if err != nil {
			return nil, err
		}
		req.Header.Set("Accept", wire.ContentType)
		// Heartbeat frames keep a quiet subscription from the QUIC idle
		// timeout; readMessages skips them.
		req.Header.Set(wire.HeaderHeartbeat, "1")
		return req, nil
	})
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	if resp.StatusCode != http.StatusOK {
		return statusError(op, resp)
	}
	defer resp.Body.Close()
	connected()
	// The broker's epoch; a broker without one leaves resumes as they were.
	// A resume point of another epoch is answered with the restart gap,
	// which resets the resume state below.
	epoch := uint64(0)
	if v := resp.Header.Get(wire.HeaderEpoch); v != "" {
		e, err := wire.ParseEpoch(v)
		if err != nil {
			c.log.Warn("ignoring a bad broker epoch", "filter", st.filter, "error", err)
		}
		epoch = e
	}
	if st.epoch != 0 && epoch != st.epoch {
		c.log.Info("broker epoch changed (the broker restarted)", "filter", st.filter, "was", wire.FormatEpoch(st.epoch), "now", wire.FormatEpoch(epoch))
	}
	st.epoch = epoch
	c.log.Debug("subscribed", "filter", st.filter, "since", q.Get(wire.QuerySince), "epoch", q.Get(wire.QueryEpoch))
	notifySubscribed(ctx)
	asked := st.since
	restarted := func() {
		c.log.Info("broker restarted: sequence numbers began again", "filter", st.filter, "resume", asked)
		st.reset()
		asked = 0
	}
	resumed := st.resumed
	st.resumed = true
	// live: the history replay (asked with since) is over, a message
	// neither replayed nor retained has come.
	live := !st.fromStart && asked == 0
	err = readMessages(resp.Body, restarted, func(m Message) {
		if !m.Gap && !m.Replayed && !m.Retained && m.Seq > 0 {
			live = true
		}
		if resumed {
			m.Replayed = false
		}
		if asked > 0 && !m.Gap && !m.Retained && m.Seq > 0 && m.Seq <= asked {
			// A message numbered at or below the resume point we asked for
			// (a broker that does not announce its restart): the numbering
			// began again.
			restarted()
		}
		if st.accept(&m, live) {
			h(m)
		}
	})
	if err == nil {
		err = errSubscriptionEnded
	}
	return fmt.Errorf("%s: %w", op, err)
}

// Stats implements Client.
func (c *h3Client) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := Stats{Handshake: c.handshake}
	if c.conns > 1 {
		s.Reconnects = c.conns - 1
	}
	return s
}

// Close implements Client: it ends a streamed publish, closes the
// connection with CONNECTION_CLOSE, and closes the socket the client
// opened (an Options.PacketConn stays open: it belongs to the caller).
func (c *h3Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	cur, tr, own, sp := c.cur, c.tr, c.ownPC, c.sp
	c.cur, c.sp = nil, nil
	if c.stopWatch != nil {
		c.stopWatch()
	}
	c.mu.Unlock()
	if sp != nil {
		sp.finish()
	}
	if cur != nil {
		// The next client of this broker starts its probe hold from
		// this connection's RTT (handshakeHold).
		if m, ok := c.opts.SessionCache.(RTTMemory); ok {
			m.SetLastRTT(c.hostport, cur.qc.ConnectionStats().SmoothedRTT)
		}
		_ = cur.qc.CloseWithError(0, "")
	}
	var err error
	if tr != nil {
		err = tr.Close()
	}
	if own != nil {
		if cerr := own.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}
	return err
}

// Used0RTT reports whether c is an HTTP/3 or MQTT over QUIC client whose
// current connection sent application data in 0-RTT (resumed session,
// allow_0rtt); false for other clients and without a connection.
func Used0RTT(c Client) bool {
	if m, ok := c.(*mqttClient); ok {
		qc := m.currentQUIC()
		return qc != nil && qc.ConnectionState().Used0RTT
	}
	h, ok := c.(*h3Client)
	if !ok {
		return false
	}
	h.mu.Lock()
	cur := h.cur
	h.mu.Unlock()
	return cur != nil && cur.qc.ConnectionState().Used0RTT
}
