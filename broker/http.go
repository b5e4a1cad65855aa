package broker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/quiot/quiot/broker/auth"
	"github.com/quiot/quiot/broker/space"
	"github.com/quiot/quiot/broker/web"
	"github.com/quiot/quiot/internal/wire"
)

// Header names of the protocol, defined in internal/wire.
const (
	// HeaderSeq, on the response to a publish, is the message's sequence
	// number.
	HeaderSeq = wire.HeaderSeq
	// HeaderTime, on a publish request, is the send time in Unix ns.
	HeaderTime = wire.HeaderTime
	// HeaderEpoch, on a subscribe response, is the broker run's epoch.
	HeaderEpoch = wire.HeaderEpoch
	// HeaderHeartbeat, "1" on a binary subscribe request, asks for heartbeat
	// frames; the response then carries the interval in milliseconds.
	HeaderHeartbeat = wire.HeaderHeartbeat
)

// connState is what the broker knows about one connection: its identity,
// once authenticated, and its live subscriptions.
type connState struct {
	proto string
	qc    *quic.Conn // nil on TCP
	b     *Broker
	// refused, when set, is why every request of this TCP connection is
	// answered 503 (limits.go).
	refused error

	mu       sync.Mutex
	authed   bool
	identity string
	gen      uint64 // the authenticator's generation when identity was bound
	counted  bool   // holds a MaxConnsPerIdentity slot
	ended    bool   // the connection has ended (its slot is free)
	// session: identity was bound by a browser session token
	// (sessionOnConn); requests without one are not authenticated by it.
	session bool

	subs atomic.Int32
}

type connKey struct{}

func (b *Broker) quicConnContext(ctx context.Context, c *quic.Conn) context.Context {
	cs := &connState{proto: ProtoH3, qc: c, b: b}
	b.ConnOpened(ProtoH3)
	context.AfterFunc(c.Context(), func() {
		cs.closed()
		b.ConnClosed(ProtoH3)
	})
	return context.WithValue(ctx, connKey{}, cs)
}

func (b *Broker) tcpConnContext(ctx context.Context, c net.Conn) context.Context {
	cs := &connState{proto: ProtoTCP, b: b}
	if lc := limitedOf(c); lc != nil {
		cs.refused = lc.refused
		lc.onClose.Store(cs)
	}
	return context.WithValue(ctx, connKey{}, cs)
}

// guard answers 503 to every request of a TCP connection admitted beyond
// the connection limits, then closes it (limits.go).
func (b *Broker) guard(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if cs, _ := r.Context().Value(connKey{}).(*connState); cs != nil && cs.refused != nil {
			w.Header().Set("Connection", "close")
			fail(w, http.StatusServiceUnavailable, "%v", cs.refused)
			return
		}
		h.ServeHTTP(w, r)
	})
}

func (b *Broker) tcpConnState(_ net.Conn, s http.ConnState) {
	switch s {
	case http.StateNew:
		b.ConnOpened(ProtoTCP)
	case http.StateClosed, http.StateHijacked:
		b.ConnClosed(ProtoTCP)
	}
}

// Protocol names of the HTTP listeners in Stats and Message.Origin.
const (
	// ProtoH3 is HTTP/3 over QUIC.
	ProtoH3 = "h3"
	// ProtoTCP is HTTP/1.1 and HTTP/2 over TCP+TLS (the fallback listener).
	ProtoTCP = "tcp"
)

// protoOf names the listener r came in by: ProtoH3 or ProtoTCP.
func protoOf(r *http.Request) string {
	if r.ProtoMajor == 3 {
		return ProtoH3
	}
	return ProtoTCP
}

// earlyData reports whether r arrived before the QUIC handshake completed
// (0-RTT).
func earlyData(r *http.Request) bool {
	cs, _ := r.Context().Value(connKey{}).(*connState)
	if cs == nil || cs.qc == nil {
		return false
	}
	select {
	case <-cs.qc.HandshakeComplete():
		return false
	default:
		return true
	}
}

// fail answers with status and a one-line plain-text reason.
func fail(w http.ResponseWriter, status int, format string, args ...any) {
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	msg := fmt.Sprintf(format, args...)
	msg = strings.ReplaceAll(msg, "\n", " ")
	_, _ = io.WriteString(w, msg+"\n")
}

// errStatus maps a Publish/subscribe error to its HTTP status.
func errStatus(err error) int {
	switch {
	case errors.Is(err, ErrBadTopic), errors.Is(err, ErrBadFilter), errors.Is(err, ErrBadQoS), errors.Is(err, errBadMsgID):
		return http.StatusBadRequest
	case errors.Is(err, ErrTooLarge):
		return http.StatusRequestEntityTooLarge
	case errors.Is(err, ErrShuttingDown):
		return http.StatusServiceUnavailable
	case errors.Is(err, ErrRetainedFull):
		return http.StatusInsufficientStorage
	case errors.Is(err, ErrTooManySubscriptions):
		return http.StatusTooManyRequests
	case errors.Is(err, auth.ErrDenied):
		return http.StatusForbidden
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

func (b *Broker) serveHTTP(w http.ResponseWriter, r *http.Request) {
	b.active.add()
	defer b.active.done()
	if r.ProtoMajor < 3 {
		_ = b.h3.SetQUICHeaders(w.Header())
	}
	if b.space.Closing() {
		w.Header().Set("Connection", "close")
		b.refuse(w, r, "", ReasonShuttingDown, http.StatusServiceUnavailable, "broker shutting down")
		return
	}
	path := r.URL.Path
	if r.Method != http.MethodGet && r.Method != http.MethodHead && earlyData(r) && !earlyPublishOK(r, time.Now()) {
		// A publish in 0-RTT data could be replayed by an attacker: ask
		// the client to send it again after the handshake (RFC 8470),
		// unless its message id makes a replay harmless (idem.go).
		fail(w, http.StatusTooEarly, "not accepted in 0-RTT data without a %s and a current %s; retry after the handshake", HeaderMsgID, HeaderTime)
		return
	}
	switch {
	case path == wire.PathHealth:
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			fail(w, http.StatusMethodNotAllowed, "use GET")
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		// A bridge down too long makes the first line "degraded" (still
		// 200: restarting the edge broker cures no upstream outage), with
		// one line per such bridge (bridgestatus.go).
		var degraded []string
		for _, bs := range b.bridgeStatuses() {
			if bs.Degraded != "" {
				degraded = append(degraded, "bridge "+bs.Name+": "+bs.Degraded+"\n")
			}
		}
		if len(degraded) > 0 {
			_, _ = io.WriteString(w, "degraded\n"+strings.Join(degraded, ""))
		} else {
			_, _ = io.WriteString(w, "ok\n")
		}
		if st := b.clusterStatus(); st != "" { // space.go
			_, _ = io.WriteString(w, "cluster: "+st+"\n")
		}
	case path == wire.PathPublish:
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", "POST")
			fail(w, http.StatusMethodNotAllowed, "use POST for a publish stream")
			return
		}
		b.handleStream(w, r)
	case path == wire.PathTopics || strings.HasPrefix(path, wire.PathTopics+"/"):
		t, err := wire.TopicFromURL(r.URL)
		if err != nil {
			b.refuse(w, r, "", ReasonBadTopic, http.StatusBadRequest, "%v", err)
			return
		}
		switch r.Method {
		case http.MethodPost, http.MethodPut:
			b.handlePublish(w, r, t)
		case http.MethodGet:
			b.handleSubscribe(w, r, t)
		default:
			w.Header().Set("Allow", "GET, POST")
			fail(w, http.StatusMethodNotAllowed, "use POST to publish or GET to subscribe")
		}
	case path == MQTTWebSocketPath:
		b.serveMQTTWebSocket(w, r) // mqttws.go
	default:
		fail(w, http.StatusNotFound, "no such resource %q", path)
	}
}

// identify authenticates the connection of r once and returns its identity.
// It answers 401 itself and returns ok=false when the client must
// authenticate.
//
// Credentials (Authorization: Bearer or Basic) are checked on every request
// that carries them, not only the first of a connection: clients may send
// them once per connection (the default) or on every request
// (client.Options.AuthEveryRequest). Bad credentials are answered 401 even
// on an authenticated connection (the binding stays). Good credentials on a
// connection already bound to an identity (by an earlier request or a
// client certificate) must name that same identity, otherwise the request
// is answered 403: one connection, one identity.
func (b *Broker) identify(w http.ResponseWriter, r *http.Request) (id string, ok bool) {
	if !b.admitted(w, r) {
		return "", false
	}
	if id, ok := web.IdentityFrom(r.Context()); ok {
		// A browser's session token, verified by broker/web: it binds the
		// connection as credentials do (authgate.go).
		return id, b.sessionOnConn(w, r, id)
	}
	cs, _ := r.Context().Value(connKey{}).(*connState)
	if cs == nil {
		cs = &connState{}
	}
	a := b.opts.Auth
	gen := a.Generation() // before authenticating: a reload after it is noticed
	if h := r.Header.Get("Authorization"); h != "" {
		var ok bool
		scheme, cred, _ := strings.Cut(h, " ")
		switch strings.ToLower(scheme) {
		case "bearer":
			id, ok = a.Token(strings.TrimSpace(cred))
		case "basic":
			if u, p, has := r.BasicAuth(); has {
				var err error
				id, err = a.BasicFrom(r.RemoteAddr, u, p)
				if errors.Is(err, auth.ErrThrottled) {
					// Refused before the password is checked.
					b.refuse(w, r, "", ReasonThrottled, http.StatusTooManyRequests, "%v", err)
					return "", false
				}
				ok = err == nil
			}
		}
		switch {
		case ok:
			cs.mu.Lock()
			defer cs.mu.Unlock()
			bound, was, err := cs.boundLocked(r)
			if err != nil {
				b.refuseErr(w, r, id, bindStatus(err), err)
				return "", false
			}
			if bound && was != id {
				b.refuse(w, r, was, ReasonForbidden, http.StatusForbidden, "credentials name %q but this connection is authenticated as %q (open a new connection to change identity)", id, was)
				return "", false
			}
			if !bound {
				if err := cs.bindLocked(id); err != nil {
					b.refuseErr(w, r, id, http.StatusTooManyRequests, err)
					return "", false
				}
				cs.gen = gen
			} else if b.revoked(w, r, id, cs.gen) {
				return "", false
			}
			cs.session = false // credentials bind it from now on
			return id, true
		case !a.IsOpen():
			w.Header().Set("WWW-Authenticate", `Bearer realm="quiot"`)
			b.refuse(w, r, "", ReasonUnauthenticated, http.StatusUnauthorized, "bad credentials")
			return "", false
		}
		// An open broker ignores credentials it does not know.
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	wasBound := cs.authed
	bound, id, err := cs.boundLocked(r)
	if err != nil {
		b.refuseErr(w, r, id, bindStatus(err), err)
		return "", false
	}
	if bound && !cs.session {
		if !wasBound {
			cs.gen = gen
		} else if b.revoked(w, r, id, cs.gen) {
			return "", false
		}
		return id, true
	}
	if a.Anonymous() {
		return "", true
	}
	w.Header().Set("WWW-Authenticate", `Bearer realm="quiot"`)
	b.refuse(w, r, "", ReasonUnauthenticated, http.StatusUnauthorized, "authentication required (client certificate, Bearer token or Basic)")
	return "", false
}

// boundLocked reports the identity the connection is bound to: by an
// earlier request's credentials or, binding it now, by a verified client
// certificate (an error when the identity has its limit of connections).
// cs.mu is held.
func (cs *connState) boundLocked(r *http.Request) (bound bool, id string, err error) {
	if cs.authed {
		return true, cs.identity, nil
	}
	if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 && len(r.TLS.VerifiedChains) > 0 {
		var a *auth.Authenticator
		if cs.b != nil {
			a = cs.b.opts.Auth
		}
		cn, err := a.CertificateIdentity(r.TLS.PeerCertificates[0].Subject.CommonName)
		if err != nil {
			// A CN that could act as a wildcard in %u patterns, or one
			// without a [[user]] entry in the ACL (revoked), is refused,
			// never bound (issue 9 finding 4, issue 27 finding 7).
			return false, "", err
		}
		if err := cs.bindLocked(cn); err != nil {
			return false, "", err
		}
		return true, cs.identity, nil
	}
	return false, "", nil
}

func (b *Broker) handlePublish(w http.ResponseWriter, r *http.Request, t string) {
	if err := b.space.TopicLimits().ValidateName(t); err != nil {
		b.refuse(w, r, "", ReasonBadTopic, http.StatusBadRequest, "bad topic: %v", err)
		return
	}
	id, ok := b.identify(w, r)
	if !ok {
		return
	}
	if err := b.opts.Auth.Check(id, auth.Publish, t); err != nil {
		b.refuse(w, r, id, ReasonForbidden, http.StatusForbidden, "%v", err)
		return
	}
	q := r.URL.Query()
	m := Message{Topic: t, QoS: 1, Origin: protoOf(r), Identity: id}
	switch q.Get(wire.QueryQoS) {
	case "", "1":
	case "0":
		m.QoS = 0
	default:
		fail(w, http.StatusBadRequest, "bad qos %q (want 0 or 1)", q.Get(wire.QueryQoS))
		return
	}
	switch q.Get(wire.QueryRetain) {
	case "", "0", "false":
	case "1", "true":
		m.Retain = true
	default:
		fail(w, http.StatusBadRequest, "bad retain %q (want 0 or 1)", q.Get(wire.QueryRetain))
		return
	}
	if v := r.Header.Get(HeaderTime); v != "" {
		ts, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			fail(w, http.StatusBadRequest, "bad %s header %q (want unix nanoseconds)", HeaderTime, v)
			return
		}
		m.Time = ts
	}
	max := b.opts.Limits.MaxPayload
	if r.ContentLength > int64(max) {
		b.refuse(w, r, id, ReasonPayloadTooLarge, http.StatusRequestEntityTooLarge, "payload of %d bytes exceeds the limit of %d", r.ContentLength, max)
		return
	}
	body, err := readLimited(r.Body, r.ContentLength, max)
	if err != nil {
		if errors.Is(err, ErrTooLarge) {
			b.refuse(w, r, id, ReasonPayloadTooLarge, http.StatusRequestEntityTooLarge, "payload exceeds the limit of %d bytes", max)
			return
		}
		fail(w, http.StatusBadRequest, "couldn't read payload: %v", err)
		return
	}
	if body, err = headerPayload(r, body, max); err != nil { // 0-RTT publishes (idem.go)
		b.refuseErr(w, r, id, errStatus(err), err)
		return
	}
	m.Payload = body
	seq, err := b.publishOnce(r, m) // once per Quiot-Msg-Id (idem.go)
	if err != nil {
		b.refuseErr(w, r, id, errStatus(err), err)
		return
	}
	// No Date header (quic-go's HTTP/3 server adds one unless it is set to
	// nil): about 25 bytes after QPACK on every acknowledgement, 8 ms each
	// on a 25 kbit/s NB-IoT downlink, and a publisher has no use for it.
	w.Header()["Date"] = nil
	w.Header().Set(HeaderSeq, strconv.FormatUint(seq, 10))
	w.WriteHeader(http.StatusNoContent)
}

// resumePoint reads a subscribe request's resume point: ?since= or else the
// Last-Event-ID header, each SEQ or EPOCH-SEQ, and ?epoch= (which needs a
// since). since is nil without a resume point; epoch is 0 when unknown.
func resumePoint(r *http.Request) (since *uint64, epoch uint64, err error) {
	q := r.URL.Query()
	src, sv := wire.QuerySince, q.Get(wire.QuerySince)
	if sv == "" {
		src, sv = wire.HeaderLastEventID, r.Header.Get(wire.HeaderLastEventID)
	}
	if sv != "" {
		e, n, err := wire.ParseEventID(sv)
		if err != nil {
			return nil, 0, fmt.Errorf("bad %s %q (want SEQ or EPOCH-SEQ): %w", src, sv, err)
		}
		since, epoch = &n, e
	}
	if ev := q.Get(wire.QueryEpoch); ev != "" {
		e, err := wire.ParseEpoch(ev)
		if err != nil {
			return nil, 0, fmt.Errorf("bad epoch %q (want the hex %s of a subscribe response): %w", ev, HeaderEpoch, err)
		}
		if since == nil {
			return nil, 0, fmt.Errorf("epoch %q without since (a resume point)", ev)
		}
		if epoch != 0 && epoch != e {
			return nil, 0, fmt.Errorf("epoch %q disagrees with the epoch of %s %q", ev, src, sv)
		}
		epoch = e
	}
	return since, epoch, nil
}

// readLimited reads a body of at most max bytes.
func readLimited(r io.Reader, length int64, max int) ([]byte, error) {
	n := 512
	if length >= 0 {
		n = int(length)
	}
	buf := bytes.NewBuffer(make([]byte, 0, n+1))
	got, err := buf.ReadFrom(io.LimitReader(r, int64(max)+1))
	if err != nil {
		return nil, err
	}
	if got > int64(max) {
		return nil, ErrTooLarge
	}
	return buf.Bytes(), nil
}

// handleSubscribe serves GET /v1/topics/{filter}: it reads and admits the
// request (subscribeRequest, admitSubscriber), registers the subscriber
// with the topic space, writes the response header (writeSubscribeHeader), the
// retained messages or replayed history (replay), then live messages
// until the client goes away, the count is reached or the subscriber is
// cut off (deliverLive).
func (b *Broker) handleSubscribe(w http.ResponseWriter, r *http.Request, filter string) {
	s, ok := b.subscribeRequest(w, r, filter)
	if !ok {
		return
	}
	release, ok := b.admitSubscriber(w, r, s.id)
	if !ok {
		return
	}
	defer release()
	if !s.readEncoding(w, r) {
		return
	}
	sub, initial, paced, err := b.space.SubscribePaced(filter, s.since, s.otherRun)
	if err != nil {
		b.refuseErr(w, r, s.id, errStatus(err), err)
		return
	}
	defer b.space.Unsubscribe(sub)
	if s.otherRun {
		b.log.Debug("resume point of another broker run", "filter", filter, "identity", s.id, "epoch", wire.FormatEpoch(s.epoch), "since", *s.since)
	}
	// Heartbeats: always on SSE (comments are ignored by every reader), on
	// binary streams only when asked for (older decoders would take a
	// heartbeat frame for a message).
	s.heartbeat = b.opts.Heartbeat
	if !s.sse && r.Header.Get(HeaderHeartbeat) != "1" {
		s.heartbeat = 0
	}

	out := b.stats.proto(protoOf(r))
	s.writeSubscribeHeader(w)
	rc := http.NewResponseController(w)
	defer b.endWritesWhenCutOff(rc, sub)()
	buf, delivered, ok := s.replay(w, rc, initial, paced)
	if !ok {
		if err := space.ReplayErr(paced); err != nil {
			b.log.Warn("subscription ended: reading its resume failed", "filter", filter, "identity", s.id, "err", err)
		}
		return
	}
	out.out.Add(delivered)
	if s.limit > 0 && delivered >= s.limit {
		return
	}
	b.deliverLive(w, r, rc, s, sub, out, buf, delivered)
}

// subRequest is a subscribe request as read from its URL and headers: who
// subscribes, to what, from which resume point, and how its stream is
// encoded.
type subRequest struct {
	filter string
	id     string // the subscriber's identity
	// authGen and authChanged are the authenticator's generation and
	// change channel before the request was authenticated: a reload after
	// it may end the subscription.
	authGen     uint64
	authChanged <-chan struct{}
	since       *uint64 // resume point; nil = none
	epoch       uint64  // epoch of the resume point; 0 = unknown
	bepoch      uint64  // the broker's epoch, one for the whole response
	otherRun    bool    // the resume point is of another broker run
	limit       uint64  // messages to deliver before ending; 0 = unlimited
	sse         bool    // Server-Sent Events rather than binary frames
	// appendSSE renders a frame as an SSE event (text or base64 payloads).
	appendSSE func(dst []byte, f *wire.Frame, epoch uint64) []byte
	heartbeat time.Duration // heartbeat interval; 0 = none
}

// subscribeRequest checks a subscribe request's filter, authenticates and
// authorises it, and reads its resume point and count. It answers the
// request itself (400, 401, 403) and returns ok=false when the request is
// refused.
func (b *Broker) subscribeRequest(w http.ResponseWriter, r *http.Request, filter string) (_ *subRequest, ok bool) {
	if err := b.space.TopicLimits().ValidateFilter(filter); err != nil {
		b.refuse(w, r, "", ReasonBadTopic, http.StatusBadRequest, "bad filter: %v", err)
		return nil, false
	}
	s := &subRequest{filter: filter}
	s.authGen, s.authChanged = b.opts.Auth.Watch() // a reload may end the subscription
	id, ok := b.identify(w, r)
	if !ok {
		return nil, false
	}
	s.id = id
	if err := b.opts.Auth.Check(id, auth.Subscribe, filter); err != nil {
		b.refuse(w, r, id, ReasonForbidden, http.StatusForbidden, "%v", err)
		return nil, false
	}
	var err error
	s.since, s.epoch, err = resumePoint(r)
	if err != nil {
		fail(w, http.StatusBadRequest, "%v", err)
		return nil, false
	}
	s.bepoch = b.Epoch() // one epoch for the whole response (a cluster link may set it)
	s.otherRun = s.epoch != 0 && s.epoch != s.bepoch
	if cv := r.URL.Query().Get(wire.QueryCount); cv != "" {
		n, err := strconv.ParseUint(cv, 10, 64)
		if err != nil || n == 0 {
			fail(w, http.StatusBadRequest, "bad count %q (want a positive number of messages)", cv)
			return nil, false
		}
		s.limit = n
	}
	return s, true
}

// admitSubscriber takes a subscription slot of the request's connection
// (MaxSubscriptionsPerConn) and one of the broker's subscription limits
// (admitSubscription). It returns the function that gives both back, or
// answers the request itself (429, 503, ...) and returns ok=false.
func (b *Broker) admitSubscriber(w http.ResponseWriter, r *http.Request, id string) (release func(), ok bool) {
	cs, _ := r.Context().Value(connKey{}).(*connState)
	if cs != nil {
		if n := cs.subs.Add(1); int(n) > b.opts.Limits.MaxSubscriptionsPerConn {
			cs.subs.Add(-1)
			b.stats.refuse(RefusedSubscriptionsPerConn)
			b.refuse(w, r, id, ReasonTooMany, http.StatusTooManyRequests, "too many subscriptions on this connection (limit %d)", b.opts.Limits.MaxSubscriptionsPerConn)
			return nil, false
		}
	}
	leaveConn := func() {
		if cs != nil {
			cs.subs.Add(-1)
		}
	}
	admitted, status, err := b.admitSubscription(r, id)
	if err != nil {
		b.refuseErr(w, r, id, status, err)
		leaveConn()
		return nil, false
	}
	return func() {
		admitted()
		leaveConn()
	}, true
}

// readEncoding reads how the stream is encoded: Server-Sent Events when
// the request accepts text/event-stream, with payloads as text or, with
// ?payload=base64, all as base64. It answers 400 itself and returns false
// for a bad payload parameter.
func (s *subRequest) readEncoding(w http.ResponseWriter, r *http.Request) bool {
	s.sse = strings.Contains(r.Header.Get("Accept"), wire.ContentTypeSSE)
	s.appendSSE = wire.AppendSSE // text payloads as "text"
	switch pv := r.URL.Query().Get(wire.QueryPayload); pv {
	case "":
	case "base64":
		s.appendSSE = wire.AppendSSEBase64 // every payload as base64, as before "text"
	default:
		fail(w, http.StatusBadRequest, "bad payload %q (want base64, or none for text payloads as text)", pv)
		return false
	}
	return true
}

// writeSubscribeHeader writes the 200 response header of a subscription:
// its content type, the broker's epoch and, when heartbeats are on, their
// interval.
func (s *subRequest) writeSubscribeHeader(w http.ResponseWriter) {
	h := w.Header()
	if s.sse {
		h.Set("Content-Type", wire.ContentTypeSSE)
	} else {
		h.Set("Content-Type", wire.ContentType)
	}
	h.Set("Cache-Control", "no-cache")
	h.Set(HeaderEpoch, wire.FormatEpoch(s.bepoch))
	if s.heartbeat > 0 {
		h.Set(HeaderHeartbeat, strconv.FormatInt(s.heartbeat.Milliseconds(), 10))
	}
	w.WriteHeader(http.StatusOK)
}

// encode appends f to buf as the stream encodes it: an SSE event or a
// binary frame.
func (s *subRequest) encode(buf []byte, f *wire.Frame) []byte {
	if s.sse {
		return s.appendSSE(buf, f, s.bepoch)
	}
	return wire.AppendFrame(buf, f)
}

// replay writes and flushes the frames a subscription starts with
// (the history after the resume point and its gaps, or the retained
// messages), at most s.limit messages; history is flagged FlagReplayed.
// After the initial frames, the rest is read from paced a chunk at a
// time, each written and flushed before the next is taken: the stream's
// flow control holds a subscriber that does not read at one chunk, never
// the whole retained set or history (docs/security.md, "Worst cases"). An
// SSE stream with nothing to replay gets a comment, so that the client
// sees it start. It returns the buffer for reuse and the number of
// messages written, and ok=false when a write or flush failed (the client
// is gone) or the replay ended short of its end (space.ReplayErr).
func (s *subRequest) replay(w http.ResponseWriter, rc *http.ResponseController, initial []wire.Frame, paced space.Replay) (buf []byte, delivered uint64, ok bool) {
	for i := range initial {
		if s.limit > 0 && delivered == s.limit {
			break
		}
		buf, delivered = s.encodeReplayed(buf, &initial[i], delivered)
		if len(buf) > replayChunkBytes {
			if _, err := w.Write(buf); err != nil {
				return buf, delivered, false
			}
			buf = buf[:0]
		}
	}
	var chunk []wire.Frame
	wrote := false
	for more := paced != nil; more && (s.limit == 0 || delivered < s.limit); {
		n := replayChunkMsgs
		if s.limit > 0 {
			n = int(min(uint64(n), s.limit-delivered))
		}
		chunk, more = paced.Next(chunk[:0], n, replayChunkBytes)
		for i := range chunk {
			buf, delivered = s.encodeReplayed(buf, &chunk[i], delivered)
		}
		clear(chunk) // the payloads are the store's, maybe replaced meanwhile
		if len(buf) > 0 {
			if _, err := w.Write(buf); err != nil {
				return buf, delivered, false
			}
			if err := rc.Flush(); err != nil {
				return buf, delivered, false
			}
			buf, wrote = buf[:0], true
		}
	}
	if err := space.ReplayErr(paced); err != nil {
		// What the cluster holds of the resume could not be read: the
		// stream ends here, and the subscriber resumes from what it got.
		return buf, delivered, false
	}
	if s.sse && len(buf) == 0 && !wrote {
		buf = append(buf, ": subscribed\n\n"...)
	}
	if _, err := w.Write(buf); err != nil {
		return buf, delivered, false
	}
	if err := rc.Flush(); err != nil {
		return buf, delivered, false
	}
	return buf, delivered, true
}

// encodeReplayed appends a replayed frame to buf, flagged FlagReplayed
// when it is history, and returns buf and delivered counting it (gaps are
// not messages).
func (s *subRequest) encodeReplayed(buf []byte, f *wire.Frame, delivered uint64) ([]byte, uint64) {
	if f.IsGap() {
		return s.encode(buf, f), delivered
	}
	if s.since != nil {
		// History after the resume point, not a live message: the
		// subscriber keeps it out of its latency figures.
		f.Flags |= wire.FlagReplayed
	}
	return s.encode(buf, f), delivered + 1
}

// A subscription's paced replay is written in chunks of at most
// replayChunkMsgs messages (or topic gaps) and, beyond its first,
// replayChunkBytes of payload and topic (space.Replay).
const (
	replayChunkMsgs  = 256
	replayChunkBytes = 64 << 10
)

// deliverLive delivers a subscription's messages as the space queues them, after
// delivered messages were replayed, until the client goes away, s.limit
// messages are delivered, the subscriber is cut off (a gap then ends the
// stream) or a reloaded ACL no longer allows it (which closes its
// connection). A stream silent for the heartbeat interval gets a
// heartbeat. buf is a buffer to reuse.
func (b *Broker) deliverLive(w http.ResponseWriter, r *http.Request, rc *http.ResponseController, s *subRequest, sub *space.Subscriber, out *protoCounters, buf []byte, delivered uint64) {
	var gaps []wire.Gap
	var msgs []*Message
	ctx := r.Context()
	authChanged := s.authChanged
	// A stream silent for the heartbeat interval gets a heartbeat, which
	// keeps proxies and the QUIC idle timer from ending a quiet
	// subscription. Every write restarts the interval.
	var beat <-chan time.Time
	var beatTimer *time.Timer
	var beatBytes []byte
	if s.heartbeat > 0 {
		beatTimer = time.NewTimer(s.heartbeat)
		defer beatTimer.Stop()
		beat = beatTimer.C
		hb := wire.HeartbeatFrame()
		beatBytes = s.encode(nil, &hb)
	}
	for {
		select {
		case <-sub.Notify():
		case <-beat:
			if _, err := w.Write(beatBytes); err != nil {
				return
			}
			if err := rc.Flush(); err != nil {
				return
			}
			beatTimer.Reset(s.heartbeat)
			continue
		case <-authChanged:
			authChanged = b.opts.Auth.Changed()
			if !b.opts.Auth.StillValid(s.id, s.authGen) || !b.opts.Auth.Allow(s.id, auth.Subscribe, s.filter) {
				b.log.Info("subscription closed: the reloaded ACL removed its rights", "identity", s.id, "filter", s.filter, "remote", r.RemoteAddr)
				closeConnOf(r)
				return
			}
			continue
		case <-ctx.Done():
			return
		}
		var end, cut, reached bool
		var n int
		gaps, msgs, end, cut = sub.Take(gaps[:0], msgs[:0])
		buf, n, reached = s.encodeBatch(buf[:0], gaps, msgs, cut, delivered)
		delivered += uint64(n)
		clear(msgs) // let the GC have delivered messages
		if len(buf) > 0 {
			if _, err := w.Write(buf); err != nil {
				return
			}
			if err := rc.Flush(); err != nil {
				return
			}
			sub.Written() // the batch's bytes leave the queue's bounds
			out.out.Add(uint64(n))
			if beatTimer != nil {
				beatTimer.Reset(s.heartbeat)
			}
		}
		if end || reached {
			if cut && !reached {
				b.log.Debug("slow subscriber cut off", "filter", s.filter, "identity", s.id)
			}
			return
		}
		if cap(buf) > 1<<20 {
			buf = nil
		}
	}
}

// endWritesWhenCutOff makes the writes of a subscription that the
// Disconnect queue policy cuts off fail once Limits.IdleTimeout has passed:
// a subscriber cut off because it does not read would otherwise hold its
// handler, its connection or stream and the batch being written in a
// write that never ends (its TCP window or QUIC flow-control credit
// spent); a client that reads again within that time still gets the last
// batch and the final gap. It returns the function to call before the
// handler returns (rc is not used after).
func (b *Broker) endWritesWhenCutOff(rc *http.ResponseController, sub *space.Subscriber) (stop func()) {
	if b.opts.Limits.QueuePolicy != Disconnect {
		return func() {}
	}
	done := make(chan struct{})
	var watch sync.WaitGroup
	var set bool
	watch.Go(func() {
		select {
		case <-sub.CutOff():
			set = rc.SetWriteDeadline(time.Now().Add(b.opts.Limits.IdleTimeout)) == nil
		case <-done:
		}
	})
	return func() {
		close(done)
		watch.Wait()
		if set {
			// The stream ended in time: a kept-alive HTTP/1.1
			// connection serves its next request without the deadline.
			_ = rc.SetWriteDeadline(time.Time{})
		}
	}
}

// encodeBatch appends one batch taken from the subscriber's queue to buf:
// its gaps, then its messages up to s.limit (counting delivered messages
// already sent), then, when the subscriber was cut off and the limit not
// reached, the gap that ends the stream. It returns buf, the number of
// messages appended and whether the limit is reached.
func (s *subRequest) encodeBatch(buf []byte, gaps []wire.Gap, msgs []*Message, cut bool, delivered uint64) (_ []byte, n int, reached bool) {
	for _, g := range gaps {
		f := wire.GapFrame(g)
		buf = s.encode(buf, &f)
	}
	for _, m := range msgs {
		f := space.Frame(m, 0)
		buf = s.encode(buf, &f)
		n++
		if s.limit > 0 && delivered+uint64(n) == s.limit {
			reached = true
			break
		}
	}
	if cut && !reached {
		f := wire.GapFrame(wire.Gap{})
		buf = s.encode(buf, &f)
	}
	return buf, n, reached
}

func (b *Broker) handleStream(w http.ResponseWriter, r *http.Request) {
	if ct := r.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(ct, wire.ContentType) {
		fail(w, http.StatusUnsupportedMediaType, "content type must be %s", wire.ContentType)
		return
	}
	authGen := b.opts.Auth.Generation() // a reload may end the stream
	lastGen := authGen
	id, ok := b.identify(w, r)
	if !ok {
		return
	}
	rc := http.NewResponseController(w)
	_ = rc.EnableFullDuplex() // HTTP/1.1 only; HTTP/2 and HTTP/3 are full duplex
	w.Header().Set("Content-Type", wire.ContentType)
	w.WriteHeader(http.StatusOK)
	if err := rc.Flush(); err != nil {
		return
	}
	// A shutdown ends the stream: closing the body makes the read fail.
	stop := context.AfterFunc(b.shutdownCtx(r.Context()), func() { _ = r.Body.Close() })
	defer stop()

	lim := b.opts.Limits
	dec := wire.NewDecoder(r.Body, lim.MaxPayload+lim.MaxTopicLength+64)
	var out []byte
	var lastTopic string
	var lastAllowed bool
	in := 0
	inflight := streamInflight{b: b}
	for {
		p, err := dec.Publish()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return
			}
			var a wire.Ack
			switch {
			case errors.Is(err, wire.ErrTooLarge):
				// The frame limit adds the topic and framing to the payload
				// limit; the user knows the payload limit (--max-payload).
				a = wire.Ack{Status: http.StatusRequestEntityTooLarge, Reason: fmt.Sprintf("payload exceeds the limit of %d bytes", lim.MaxPayload)}
				b.noteRefusal(r, id, ReasonPayloadTooLarge, http.StatusRequestEntityTooLarge, a.Reason)
			case errors.Is(err, wire.ErrMalformed):
				a = wire.Ack{Status: http.StatusBadRequest, Reason: err.Error()}
			case b.space.Closing():
				a = wire.Ack{Status: http.StatusServiceUnavailable, Reason: "broker shutting down"}
				b.noteRefusal(r, id, ReasonShuttingDown, http.StatusServiceUnavailable, a.Reason)
			default:
				return
			}
			out = wire.AppendAck(out, &a)
			_, _ = w.Write(out)
			_ = rc.Flush()
			return
		}
		in++
		ack := wire.Ack{ID: p.ID}
		if g := b.opts.Auth.Generation(); g != lastGen {
			if !b.opts.Auth.StillValid(id, authGen) {
				b.log.Info("publish stream closed: the reloaded ACL removed its rights", "identity", id, "remote", r.RemoteAddr)
				closeConnOf(r)
				return
			}
			lastGen, lastTopic = g, ""
		}
		if p.Topic != lastTopic || lastTopic == "" {
			lastTopic = p.Topic
			lastAllowed = b.opts.Auth.Allow(id, auth.Publish, p.Topic)
		}
		m := Message{Topic: p.Topic, Payload: p.Payload, Time: p.Time, Retain: p.Flags&wire.PubRetain != 0, Origin: protoOf(r), Identity: id}
		if p.Flags&wire.PubQoS1 != 0 {
			m.QoS = 1
		}
		if err := b.space.Validate(&m); err != nil {
			ack.Status, ack.Reason = uint64(errStatus(err)), err.Error()
			b.noteErr(r, id, errStatus(err), err)
		} else if !lastAllowed {
			ack.Status, ack.Reason = http.StatusForbidden, b.opts.Auth.Check(id, auth.Publish, p.Topic).Error()
			b.noteRefusal(r, id, ReasonForbidden, http.StatusForbidden, ack.Reason)
		} else if seq, err := b.space.Publish(inflight.ctx(r.Context(), &m), m); err != nil {
			ack.Status, ack.Reason = uint64(errStatus(err)), err.Error()
			b.noteErr(r, id, errStatus(err), err)
		} else {
			ack.Seq = seq
		}
		if m.QoS == 1 || ack.Status != 0 {
			out = wire.AppendAck(out, &ack)
		}
		if len(out) > 0 && (dec.Buffered() == 0 || len(out) > 16<<10) {
			if _, err := w.Write(out); err != nil {
				return
			}
			if err := rc.Flush(); err != nil {
				return
			}
			out = out[:0]
		}
	}
}

// shutdownCtx returns a context cancelled when the broker shuts down or ctx ends.
func (b *Broker) shutdownCtx(ctx context.Context) context.Context {
	c, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-b.done:
			cancel()
		case <-c.Done():
		}
	}()
	return c
}
