package broker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/quiot/quiot/broker/auth"
	"github.com/quiot/quiot/broker/web"
	"github.com/quiot/quiot/internal/wire"
)

// Header names of the protocol.
const (
	HeaderSeq  = "Quiot-Seq"
	HeaderTime = "Quiot-Time"
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
	if b.hub.isClosing() {
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
	case path == "/healthz":
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			fail(w, http.StatusMethodNotAllowed, "use GET")
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, "ok\n")
		if st := b.clusterStatus(); st != "" { // federation.go
			_, _ = io.WriteString(w, "cluster: "+st+"\n")
		}
	case path == "/v1/publish":
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", "POST")
			fail(w, http.StatusMethodNotAllowed, "use POST for a publish stream")
			return
		}
		b.handleStream(w, r)
	case path == topicsPath || strings.HasPrefix(path, topicsPath+"/"):
		t, err := requestTopic(r)
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

// topicsPath is the collection of topics; a topic or filter follows it as
// one percent-encoded path segment.
const topicsPath = "/v1/topics"

// requestTopic returns the topic or filter a /v1/topics request names: the
// percent-decoded rest of the path after "/v1/topics/", or, for the path
// "/v1/topics" alone, the query parameter "topic" (the only way to name the
// topics "." and "..", which are dot segments in any path).
func requestTopic(r *http.Request) (string, error) {
	if r.URL.Path == topicsPath {
		q := r.URL.Query()
		if !q.Has("topic") {
			return "", errors.New("no topic: use /v1/topics/{topic} or /v1/topics?topic={topic}")
		}
		return q.Get("topic"), nil
	}
	return topicFromPath(r.URL.EscapedPath())
}

// topicFromPath decodes the topic or filter of an escaped request path
// "/v1/topics/{topic}". The topic should travel as one percent-encoded
// segment ("a%2F..%2Fb"); raw '/' between levels is accepted and means the
// same. A segment that URL normalisation would remove or merge (".", "..",
// or their %2E forms, as WHATWG URL parsers treat them) is refused: a client
// that normalises URLs could not have sent the path as it was meant.
func topicFromPath(escaped string) (string, error) {
	rest, ok := strings.CutPrefix(escaped, topicsPath+"/")
	if !ok {
		return "", fmt.Errorf("path %q does not start with %s/ once percent-encoded", escaped, topicsPath)
	}
	for seg := range strings.SplitSeq(rest, "/") {
		if isDotSegment(seg) {
			return "", fmt.Errorf("path segment %q is a dot segment, which URL normalisation removes: send the topic as one percent-encoded segment (a%%2F..%%2Fb), or as /v1/topics?topic=", seg)
		}
	}
	t, err := url.PathUnescape(rest)
	if err != nil {
		return "", fmt.Errorf("bad percent-encoding in topic %q: %w", rest, err)
	}
	return t, nil
}

// isDotSegment reports whether a raw path segment is "." or "..", also with
// its dots percent-encoded ("%2e", ".%2E", ...).
func isDotSegment(seg string) bool {
	if len(seg) > 6 {
		return false
	}
	s := strings.ReplaceAll(strings.ReplaceAll(seg, "%2e", "."), "%2E", ".")
	return s == "." || s == ".."
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
		return id, true // a browser's session token, verified by broker/web
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
				id, ok = a.Basic(u, p)
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
	if bound {
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
		cn := r.TLS.PeerCertificates[0].Subject.CommonName
		if err := auth.ValidIdentity(cn); err != nil {
			// A CN that could act as a wildcard in %u patterns is
			// refused, never bound (issue 9 finding 4).
			return false, "", fmt.Errorf("%w: client certificate: %w", auth.ErrDenied, err)
		}
		if err := cs.bindLocked(cn); err != nil {
			return false, "", err
		}
		return true, cs.identity, nil
	}
	return false, "", nil
}

func (b *Broker) handlePublish(w http.ResponseWriter, r *http.Request, t string) {
	if err := b.hub.tl.ValidateName(t); err != nil {
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
	switch q.Get("qos") {
	case "", "1":
	case "0":
		m.QoS = 0
	default:
		fail(w, http.StatusBadRequest, "bad qos %q (want 0 or 1)", q.Get("qos"))
		return
	}
	switch q.Get("retain") {
	case "", "0", "false":
	case "1", "true":
		m.Retain = true
	default:
		fail(w, http.StatusBadRequest, "bad retain %q (want 0 or 1)", q.Get("retain"))
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
	src, sv := "since", q.Get("since")
	if sv == "" {
		src, sv = "Last-Event-ID", r.Header.Get("Last-Event-ID")
	}
	if sv != "" {
		e, n, err := wire.ParseEventID(sv)
		if err != nil {
			return nil, 0, fmt.Errorf("bad %s %q (want SEQ or EPOCH-SEQ): %w", src, sv, err)
		}
		since, epoch = &n, e
	}
	if ev := q.Get("epoch"); ev != "" {
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

func (b *Broker) handleSubscribe(w http.ResponseWriter, r *http.Request, filter string) {
	if err := b.hub.tl.ValidateFilter(filter); err != nil {
		b.refuse(w, r, "", ReasonBadTopic, http.StatusBadRequest, "bad filter: %v", err)
		return
	}
	authGen, authChanged := b.opts.Auth.Watch() // a reload may end the subscription
	id, ok := b.identify(w, r)
	if !ok {
		return
	}
	if err := b.opts.Auth.Check(id, auth.Subscribe, filter); err != nil {
		b.refuse(w, r, id, ReasonForbidden, http.StatusForbidden, "%v", err)
		return
	}
	since, epoch, err := resumePoint(r)
	if err != nil {
		fail(w, http.StatusBadRequest, "%v", err)
		return
	}
	bepoch := b.Epoch() // one epoch for the whole response (a cluster link may set it)
	otherRun := epoch != 0 && epoch != bepoch
	limit := uint64(0) // messages to deliver before ending; 0 = unlimited
	if cv := r.URL.Query().Get("count"); cv != "" {
		n, err := strconv.ParseUint(cv, 10, 64)
		if err != nil || n == 0 {
			fail(w, http.StatusBadRequest, "bad count %q (want a positive number of messages)", cv)
			return
		}
		limit = n
	}
	cs, _ := r.Context().Value(connKey{}).(*connState)
	if cs != nil {
		if n := cs.subs.Add(1); int(n) > b.opts.Limits.MaxSubscriptionsPerConn {
			cs.subs.Add(-1)
			b.stats.refuse(RefusedSubscriptionsPerConn)
			b.refuse(w, r, id, ReasonTooMany, http.StatusTooManyRequests, "too many subscriptions on this connection (limit %d)", b.opts.Limits.MaxSubscriptionsPerConn)
			return
		}
		defer cs.subs.Add(-1)
	}
	release, status, err := b.admitSubscription(r, id)
	if err != nil {
		b.refuseErr(w, r, id, status, err)
		return
	}
	defer release()
	sse := strings.Contains(r.Header.Get("Accept"), "text/event-stream")
	sub := newSubscriber(filter, b.opts.Limits, b.stats)
	initial, err := b.hub.start(sub, since, otherRun)
	if err != nil {
		b.refuseErr(w, r, id, errStatus(err), err)
		return
	}
	defer b.hub.stop(sub)
	if otherRun {
		b.log.Debug("resume point of another broker run", "filter", filter, "identity", id, "epoch", wire.FormatEpoch(epoch), "since", *since)
	}
	// Heartbeats: always on SSE (comments are ignored by every reader), on
	// binary streams only when asked for (older decoders would take a
	// heartbeat frame for a message).
	heartbeat := b.opts.Heartbeat
	if !sse && r.Header.Get(HeaderHeartbeat) != "1" {
		heartbeat = 0
	}

	out := b.stats.proto(protoOf(r))
	h := w.Header()
	if sse {
		h.Set("Content-Type", "text/event-stream")
	} else {
		h.Set("Content-Type", wire.ContentType)
	}
	h.Set("Cache-Control", "no-cache")
	h.Set(HeaderEpoch, wire.FormatEpoch(bepoch))
	if heartbeat > 0 {
		h.Set(HeaderHeartbeat, strconv.FormatInt(heartbeat.Milliseconds(), 10))
	}
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	encode := func(buf []byte, f *wire.Frame) []byte {
		if sse {
			return wire.AppendSSE(buf, f, bepoch)
		}
		return wire.AppendFrame(buf, f)
	}
	var buf []byte
	delivered := uint64(0)
	for i := range initial {
		if limit > 0 && delivered == limit {
			break
		}
		buf = encode(buf, &initial[i])
		if !initial[i].IsGap() {
			delivered++
		}
		if len(buf) > 64<<10 {
			if _, err := w.Write(buf); err != nil {
				return
			}
			buf = buf[:0]
		}
	}
	if sse && len(buf) == 0 {
		buf = append(buf, ": subscribed\n\n"...)
	}
	if _, err := w.Write(buf); err != nil {
		return
	}
	if err := rc.Flush(); err != nil {
		return
	}
	out.out.Add(delivered)
	if limit > 0 && delivered >= limit {
		return
	}

	var gaps []wire.Gap
	var msgs []*Message
	ctx := r.Context()
	// A stream silent for the heartbeat interval gets a heartbeat, which
	// keeps proxies and the QUIC idle timer from ending a quiet
	// subscription. Every write restarts the interval.
	var beat <-chan time.Time
	var beatTimer *time.Timer
	var beatBytes []byte
	if heartbeat > 0 {
		beatTimer = time.NewTimer(heartbeat)
		defer beatTimer.Stop()
		beat = beatTimer.C
		hb := wire.HeartbeatFrame()
		beatBytes = encode(nil, &hb)
	}
	for {
		select {
		case <-sub.notify:
		case <-beat:
			if _, err := w.Write(beatBytes); err != nil {
				return
			}
			if err := rc.Flush(); err != nil {
				return
			}
			beatTimer.Reset(heartbeat)
			continue
		case <-authChanged:
			authChanged = b.opts.Auth.Changed()
			if !b.opts.Auth.StillValid(id, authGen) || !b.opts.Auth.Allow(id, auth.Subscribe, filter) {
				b.log.Info("subscription closed: the reloaded ACL removed its rights", "identity", id, "filter", filter, "remote", r.RemoteAddr)
				closeConnOf(r)
				return
			}
			continue
		case <-ctx.Done():
			return
		}
		var end, cut bool
		gaps, msgs, end, cut = sub.take(gaps[:0], msgs[:0])
		buf = buf[:0]
		for _, g := range gaps {
			f := wire.GapFrame(g)
			buf = encode(buf, &f)
		}
		n, reached := 0, false
		for _, m := range msgs {
			f := frameOf(m, 0)
			buf = encode(buf, &f)
			n++
			if limit > 0 && delivered+uint64(n) == limit {
				reached = true
				break
			}
		}
		delivered += uint64(n)
		if cut && !reached {
			f := wire.GapFrame(wire.Gap{})
			buf = encode(buf, &f)
		}
		clear(msgs) // let the GC have delivered messages
		if len(buf) > 0 {
			if _, err := w.Write(buf); err != nil {
				return
			}
			if err := rc.Flush(); err != nil {
				return
			}
			out.out.Add(uint64(n))
			if beatTimer != nil {
				beatTimer.Reset(heartbeat)
			}
		}
		if end || reached {
			if cut && !reached {
				b.log.Debug("slow subscriber cut off", "filter", filter, "identity", id)
			}
			return
		}
		if cap(buf) > 1<<20 {
			buf = nil
		}
	}
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
				a = wire.Ack{Status: http.StatusRequestEntityTooLarge, Reason: err.Error()}
				b.noteRefusal(r, id, ReasonPayloadTooLarge, http.StatusRequestEntityTooLarge, a.Reason)
			case errors.Is(err, wire.ErrMalformed):
				a = wire.Ack{Status: http.StatusBadRequest, Reason: err.Error()}
			case b.hub.isClosing():
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
		if err := b.hub.validate(&m); err != nil {
			ack.Status, ack.Reason = uint64(errStatus(err)), err.Error()
			b.noteErr(r, id, errStatus(err), err)
		} else if !lastAllowed {
			ack.Status, ack.Reason = http.StatusForbidden, b.opts.Auth.Check(id, auth.Publish, p.Topic).Error()
			b.noteRefusal(r, id, ReasonForbidden, http.StatusForbidden, ack.Reason)
		} else if seq, err := b.hub.publish(inflight.ctx(r.Context(), &m), m); err != nil {
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
