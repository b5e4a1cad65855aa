// Package web is the broker's browser part: CORS for configured origins,
// session tokens that work with EventSource (which cannot set headers), a
// JSON view of the broker (stats, topics) and the dashboard served at "/".
//
// It is an http.Handler middleware around the broker's own handler
// (Handler.Wrap), so it covers the HTTP/3 and the TCP (HTTP/1.1, HTTP/2)
// listeners alike. The broker stays the only place that authorises: a
// session token only names an ACL identity, which every request then
// presents to the broker's one authorisation check (auth.Authenticator).
//
// # Browser authentication
//
// POST /v1/session, authenticated as any other request (client certificate,
// Authorization: Bearer or Basic), answers a short-lived session token
// signed with HMAC-SHA256, bound to the identity and an expiry, and sets it
// as an HttpOnly, Secure, SameSite=Strict cookie (quiot_session). A browser
// then presents it as that cookie (same origin: the dashboard), as
// ?access_token=TOKEN on GET requests (EventSource from another origin), or
// as Authorization: Bearer TOKEN (fetch). The token is removed from the URL
// before the broker sees the request, and nothing logs it. A
// state-changing request from a foreign Origin is refused (CSRF) by the
// broker's one check of the credentials (Backend.Identify), whatever they
// are: the cookie, cached Basic credentials, a client certificate.
//
// # Endpoints
//
//	POST   /v1/session   -> {"identity","token","expires","proto"}, Set-Cookie
//	GET    /v1/session   -> who am I: {"identity","proto","via","filter","open"}
//	DELETE /v1/session   -> ends the token (cookie, Bearer) and clears the cookie
//	GET    /v1/stats     -> broker counters (the figures of /metrics) as JSON
//	GET    /v1/stats/topics -> topics seen since start: count, last value, retained
//	GET    /             -> the dashboard (Options.Dashboard), /ui/* its files
//
// GET /v1/topics/{filter}?proto=1 (SSE) first sends an event "proto" whose
// data is {"proto": the HTTP version the stream runs on ("HTTP/3.0"),
// "lastEventId": the resume point the request carried, if any}.
package web

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/quiot/quiot/broker/auth"
	"github.com/quiot/quiot/internal/wire"
)

// Backend is what the web part needs from the broker.
type Backend interface {
	// Identify authenticates r exactly as the broker does for its own
	// requests (client certificate, Authorization header, connection
	// binding, session identity in the context). When it returns ok=false
	// it has answered w (401/403).
	Identify(w http.ResponseWriter, r *http.Request) (id string, ok bool)
	// Auth is the broker's authenticator (identities and ACL).
	Auth() *auth.Authenticator
	// Stats returns the broker's counters, JSON-encodable.
	Stats() any
	// SetAltSvc adds the Alt-Svc header that advertises HTTP/3.
	SetAltSvc(h http.Header)
}

// Options configure the web part. A nil *Options, and every zero field,
// means the documented default.
type Options struct {
	// CORSOrigins are the origins (scheme://host[:port]) whose pages may
	// call the broker from a browser; "*" allows every origin. Empty means
	// none: no CORS headers, and preflight requests are refused.
	CORSOrigins []string
	// Dashboard serves the dashboard at "/" (and its files under /ui/).
	// False means no dashboard (the JSON endpoints stay).
	Dashboard bool
	// SessionKey signs session tokens (HMAC-SHA256, at least 32 bytes);
	// nil means a random key for this run (tokens end with the process).
	SessionKey []byte
	// SessionTTL is the lifetime of a session token and cookie; zero means
	// 15 minutes. A subscription opened with a token outlives it; a new
	// request needs a fresh token (POST /v1/session again).
	SessionTTL time.Duration
	// MaxTopics bounds the topics /v1/stats/topics tracks (count, last value);
	// zero means 1000. Later topics are counted, not tracked.
	MaxTopics int
	// Logger receives diagnostics; nil means slog.Default().
	Logger *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

const (
	defaultSessionTTL = 15 * time.Minute
	defaultMaxTopics  = 1000
	// CookieName is the session cookie.
	CookieName = "quiot_session"
	// TokenParam is the query parameter carrying a session token on GET.
	TokenParam = "access_token"
	// protoParam asks an SSE subscription for a first "proto" event.
	protoParam = "proto"
)

func (o *Options) ensureDefaults() (Options, error) {
	var c Options
	if o != nil {
		c = *o
	}
	if c.SessionTTL <= 0 {
		c.SessionTTL = defaultSessionTTL
	}
	if c.MaxTopics <= 0 {
		c.MaxTopics = defaultMaxTopics
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.SessionKey == nil {
		c.SessionKey = make([]byte, 32)
		_, _ = rand.Read(c.SessionKey) // crypto/rand.Read never fails (Go >= 1.24)
	} else if len(c.SessionKey) < 32 {
		return c, fmt.Errorf("session key of %d bytes is too short (want at least 32)", len(c.SessionKey))
	}
	return c, nil
}

// Handler is the web part of one broker. Create it with New.
type Handler struct {
	opts    Options
	be      Backend
	log     *slog.Logger
	cors    corsPolicy
	signer  signer
	ended   *endedTokens // tokens ended by a log-out (logout.go)
	topics  *topicTable
	started time.Time

	assetsOnce sync.Once
	assets     map[string]*asset
}

// New makes the web part for a broker backend.
func New(opts *Options, be Backend) (*Handler, error) {
	o, err := opts.ensureDefaults()
	if err != nil {
		return nil, err
	}
	cp, err := newCORSPolicy(o.CORSOrigins)
	if err != nil {
		return nil, err
	}
	h := &Handler{opts: o, be: be, log: o.Logger, cors: cp, signer: signer{key: o.SessionKey}, ended: newEndedTokens(o.SessionTTL), topics: newTopicTable(o.MaxTopics), started: o.Now()}
	if cp.any {
		h.log.Warn("CORS allows every origin (--cors-origins '*'): any web page a user visits may use their broker session")
	}
	return h, nil
}

// Observe records an accepted message for /v1/stats/topics. The broker calls it
// for every message (a tap); it copies at most a short prefix of payload
// and never blocks for long.
func (h *Handler) Observe(topic string, payload []byte, retain bool, origin string) {
	h.topics.observe(topic, payload, retain, origin, h.opts.Now())
}

type identityKey struct{}

// IdentityFrom returns the identity a valid session token (cookie, query
// or Bearer) gave the request, if any.
func IdentityFrom(ctx context.Context) (id string, ok bool) {
	s, ok := ctx.Value(identityKey{}).(*session)
	if !ok {
		return "", false
	}
	return s.id, true
}

// TokenFrom returns the identity a valid session token gave the request
// and the ACL generation the token was issued under (the one its rights
// are checked from, auth.Authenticator.StillValid), if any.
func TokenFrom(ctx context.Context) (id string, gen uint64, ok bool) {
	s, ok := ctx.Value(identityKey{}).(*session)
	if !ok {
		return "", 0, false
	}
	return s.id, s.tok.Generation, true
}

// session is what the middleware learned about a request's token.
type session struct {
	id  string
	via string // "cookie", "query", "bearer"
	tok Token
}

// Wrap returns next behind the web part: CORS, session tokens, the JSON
// endpoints and the dashboard; every other request goes to next.
func (h *Handler) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.serve(w, r, next)
	})
}

func (h *Handler) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	origin := r.Header.Get("Origin")
	allowed := origin != "" && h.cors.allows(origin)
	if allowed {
		h.cors.setHeaders(w.Header(), origin)
	}
	if r.Method == http.MethodOptions && origin != "" && r.Header.Get("Access-Control-Request-Method") != "" {
		h.preflight(w, r, origin, allowed)
		return
	}
	r, sess, err := h.takeToken(r)
	if err != nil {
		w.Header().Set("WWW-Authenticate", `Bearer realm="quiot", error="invalid_token"`)
		fail(w, http.StatusUnauthorized, "%v", err)
		return
	}
	if sess != nil && sess.via == "stale-cookie" {
		clearCookie(w)
		sess = nil
	}
	if sess != nil {
		r = r.WithContext(context.WithValue(r.Context(), identityKey{}, sess))
	}
	path := r.URL.Path
	web := true
	switch {
	case path == wire.PathSession:
		h.handleSession(w, r, sess)
	case path == wire.PathStats:
		h.handleStats(w, r)
	case path == wire.PathStatsTopics:
		h.handleTopics(w, r)
	case h.opts.Dashboard && (path == "/" || path == "/index.html" || strings.HasPrefix(path, "/ui/")):
		h.handleDashboard(w, r)
	default:
		web = false
	}
	if web {
		return
	}
	if r.Method == http.MethodGet && (path == wire.PathTopics || strings.HasPrefix(path, wire.PathTopics+"/")) && r.URL.Query().Get(protoParam) == "1" {
		r = stripQuery(r, protoParam)
		w = &protoWriter{ResponseWriter: w, proto: r.Proto, resume: r.Header.Get("Last-Event-ID")}
	}
	next.ServeHTTP(w, r)
}

// preflight answers a CORS preflight request.
func (h *Handler) preflight(w http.ResponseWriter, r *http.Request, origin string, allowed bool) {
	if !allowed {
		fail(w, http.StatusForbidden, "origin %q is not allowed (broker --cors-origins)", origin)
		return
	}
	hd := w.Header()
	hd.Set("Access-Control-Allow-Methods", "GET, HEAD, POST, PUT, DELETE")
	hd.Set("Access-Control-Allow-Headers", allowHeaders)
	hd.Set("Access-Control-Max-Age", "600")
	if r.Header.Get("Access-Control-Request-Private-Network") == "true" {
		hd.Set("Access-Control-Allow-Private-Network", "true")
	}
	if r.ProtoMajor < 3 {
		h.be.SetAltSvc(hd)
	}
	w.WriteHeader(http.StatusNoContent)
}

// sameOrigin reports whether origin is the broker's own (https://Host).
func sameOrigin(origin string, r *http.Request) bool {
	return strings.EqualFold(origin, "https://"+r.Host)
}

// takeToken finds a session token in the query (GET/HEAD only), an
// Authorization: Bearer header or the cookie, removes it from the URL,
// and checks it. A request with no token returns sess=nil; one whose token
// is bad or expired returns an error (401), except a stale cookie, which
// is dropped (session via "stale-cookie"). A Bearer value that is not a
// session token is left for the broker (an ACL token).
func (h *Handler) takeToken(r *http.Request) (*http.Request, *session, error) {
	var tok, via string
	if strings.Contains(r.URL.RawQuery, TokenParam) {
		if q := r.URL.Query(); q.Has(TokenParam) {
			r = stripQuery(r, TokenParam)
			if r.Method != http.MethodGet && r.Method != http.MethodHead {
				return r, nil, fmt.Errorf("a session token in the URL is only accepted on GET (use Authorization: Bearer)")
			}
			tok, via = q.Get(TokenParam), "query"
		}
	}
	if via == "" {
		if a := r.Header.Get("Authorization"); a != "" {
			scheme, cred, _ := strings.Cut(a, " ")
			cred = strings.TrimSpace(cred)
			if strings.EqualFold(scheme, "bearer") && looksLikeToken(cred) {
				tok, via = cred, "bearer"
				r = r.Clone(r.Context())
				r.Header.Del("Authorization")
			}
		}
	}
	if via == "" && r.Header.Get("Authorization") == "" {
		if c, err := r.Cookie(CookieName); err == nil && c.Value != "" {
			tok, via = c.Value, "cookie"
		}
	}
	if via == "" {
		return r, nil, nil
	}
	t, err := h.signer.verify(tok, h.opts.Now())
	id := t.Identity
	if err == nil && !h.be.Auth().StillValid(id, t.Generation) {
		err = ErrTokenRevoked
	}
	if err == nil && h.ended.ended(t) {
		err = ErrTokenLoggedOut
	}
	if err != nil && via == "cookie" {
		// A stale cookie (expired, or signed by an earlier broker run) is
		// dropped, not fatal: the request goes on as if it had none, so
		// that the browser can log in again.
		return r, &session{via: "stale-cookie"}, nil
	}
	if err != nil {
		return r, nil, fmt.Errorf("session token (%s): %w; get a new one with POST /v1/session", via, err)
	}
	if id != "" && !h.be.Auth().Known(id) {
		return r, nil, fmt.Errorf("session token (%s) names %q, who is no longer a user", via, id)
	}
	return r, &session{id: id, via: via, tok: t}, nil
}

// clearCookie tells the browser to drop the session cookie.
func clearCookie(w http.ResponseWriter) {
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, Secure: true, SameSite: http.SameSiteStrictMode})
}

// stripQuery returns r without the query parameter name, in URL and
// RequestURI, so that nothing downstream (logs included) sees it.
func stripQuery(r *http.Request, name string) *http.Request {
	q := r.URL.Query()
	q.Del(name)
	r2 := r.Clone(r.Context())
	u := *r.URL
	u.RawQuery = q.Encode()
	r2.URL = &u
	r2.RequestURI = u.RequestURI()
	return r2
}

// sessionReply is the body of /v1/session.
type sessionReply struct {
	Identity string `json:"identity"`
	Token    string `json:"token,omitempty"`
	Expires  int64  `json:"expires,omitempty"` // Unix seconds
	TTL      int64  `json:"ttl,omitempty"`     // seconds
	Proto    string `json:"proto"`
	Via      string `json:"via,omitempty"`
	// Filter is a filter the identity may subscribe to, for the
	// dashboard's live view: "#" when allowed, else the first level of a
	// topic seen so far ("sensors/#").
	Filter string `json:"filter"`
	// Open reports a broker without an ACL (--dev, --allow-anonymous, or
	// the default loopback-only mode): every client it admits may do
	// everything, so there is no one to log in as and the dashboard hides
	// its login form.
	Open bool `json:"open"`
}

func (h *Handler) handleSession(w http.ResponseWriter, r *http.Request, sess *session) {
	switch r.Method {
	case http.MethodDelete:
		// A log-out ends the token on the broker too (a copy of it, in
		// the URL of an EventSource or elsewhere, stops working). It is
		// checked as every request is: a foreign page may not end the
		// user's session.
		if sess != nil {
			if _, ok := h.be.Identify(w, r); !ok {
				return
			}
			h.ended.end(sess.tok, h.opts.Now())
		}
		clearCookie(w)
		w.WriteHeader(http.StatusNoContent)
		return
	case http.MethodGet, http.MethodPost:
	default:
		w.Header().Set("Allow", "GET, POST, DELETE")
		fail(w, http.StatusMethodNotAllowed, "use POST for a session token, GET to see who you are, DELETE to log out")
		return
	}
	gen := h.be.Auth().Generation() // before authenticating: a reload after it ends the token
	id, ok := h.be.Identify(w, r)
	if !ok {
		return
	}
	rep := sessionReply{Identity: id, Proto: r.Proto, Via: "credentials", Filter: h.defaultFilter(id), Open: h.be.Auth().IsOpen()}
	if sess != nil {
		rep.Via = sess.via
	}
	if r.Method == http.MethodPost {
		now := h.opts.Now()
		exp := now.Add(h.opts.SessionTTL)
		rep.Token = h.signer.sign(id, exp, gen)
		rep.Expires = exp.Unix()
		rep.TTL = int64(h.opts.SessionTTL / time.Second)
		http.SetCookie(w, &http.Cookie{Name: CookieName, Value: rep.Token, Path: "/", MaxAge: int(h.opts.SessionTTL / time.Second),
			HttpOnly: true, Secure: true, SameSite: http.SameSiteStrictMode})
		w.Header().Set("Cache-Control", "no-store")
	}
	h.writeJSON(w, r, rep)
}

// defaultFilter picks a filter id may subscribe to: "#", or the first
// level of a tracked topic followed by "/#".
func (h *Handler) defaultFilter(id string) string {
	a := h.be.Auth()
	if a.Allow(id, auth.Subscribe, "#") {
		return "#"
	}
	all, _ := h.topics.snapshot()
	for _, t := range all {
		first, _, _ := strings.Cut(t.Topic, "/")
		if f := first + "/#"; a.Allow(id, auth.Subscribe, f) {
			return f
		}
	}
	for _, t := range all {
		if a.Allow(id, auth.Subscribe, t.Topic) {
			return t.Topic
		}
	}
	return "#"
}

// statsReply is the body of /v1/stats.
type statsReply struct {
	Broker   any     `json:"broker"`
	Uptime   float64 `json:"uptime_s"`
	Proto    string  `json:"proto"`
	Identity string  `json:"identity"`
}

// statsTopic is the filter an identity must be allowed to subscribe to
// to see the broker's counters.
const statsTopic = "$SYS/#"

func (h *Handler) handleStats(w http.ResponseWriter, r *http.Request) {
	if !getOnly(w, r) {
		return
	}
	id, ok := h.be.Identify(w, r)
	if !ok {
		return
	}
	if err := h.be.Auth().Check(id, auth.Subscribe, statsTopic); err != nil {
		fail(w, http.StatusForbidden, "broker stats need subscribe permission on %s: %v", statsTopic, err)
		return
	}
	h.writeJSON(w, r, statsReply{Broker: h.be.Stats(), Uptime: h.opts.Now().Sub(h.started).Seconds(), Proto: r.Proto, Identity: id})
}

// topicsReply is the body of /v1/stats/topics.
type topicsReply struct {
	Topics    []TopicInfo `json:"topics"`
	Untracked uint64      `json:"untracked"`
	Hidden    int         `json:"hidden"`
	Proto     string      `json:"proto"`
}

func (h *Handler) handleTopics(w http.ResponseWriter, r *http.Request) {
	if !getOnly(w, r) {
		return
	}
	id, ok := h.be.Identify(w, r)
	if !ok {
		return
	}
	a := h.be.Auth()
	all, untracked := h.topics.snapshot()
	rep := topicsReply{Topics: make([]TopicInfo, 0, len(all)), Untracked: untracked, Proto: r.Proto}
	for _, t := range all {
		if a.Allow(id, auth.Subscribe, t.Topic) {
			rep.Topics = append(rep.Topics, t)
		} else {
			rep.Hidden++
		}
	}
	h.writeJSON(w, r, rep)
}

func getOnly(w http.ResponseWriter, r *http.Request) bool {
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return true
	}
	w.Header().Set("Allow", "GET")
	fail(w, http.StatusMethodNotAllowed, "use GET")
	return false
}

func (h *Handler) writeJSON(w http.ResponseWriter, r *http.Request, v any) {
	hd := w.Header()
	if r.ProtoMajor < 3 {
		h.be.SetAltSvc(hd)
	}
	hd.Set("Content-Type", "application/json")
	if hd.Get("Cache-Control") == "" {
		hd.Set("Cache-Control", "no-cache")
	}
	enc := json.NewEncoder(w)
	if err := enc.Encode(v); err != nil {
		h.log.Debug("web: couldn't write json", "path", r.URL.Path, "err", err)
	}
}

// fail answers with status and a one-line plain-text reason (as the broker does).
func fail(w http.ResponseWriter, status int, format string, args ...any) {
	hd := w.Header()
	hd.Set("Content-Type", "text/plain; charset=utf-8")
	hd.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	msg := strings.ReplaceAll(fmt.Sprintf(format, args...), "\n", " ")
	_, _ = io.WriteString(w, msg+"\n")
}

// protoEvent is the data of the "proto" event.
type protoEvent struct {
	// Proto is the HTTP version of the stream ("HTTP/3.0").
	Proto string `json:"proto"`
	// LastEventID is the resume point the request carried (EventSource
	// sends it when it reconnects); empty on a first subscription.
	LastEventID string `json:"lastEventId,omitempty"`
}

// protoWriter prepends an SSE event naming the HTTP version (and the
// resume point) to a successful event stream.
type protoWriter struct {
	http.ResponseWriter
	proto   string
	resume  string
	decided bool
}

func (p *protoWriter) WriteHeader(code int) {
	if !p.decided {
		p.decided = true
		if code == http.StatusOK && strings.HasPrefix(p.Header().Get("Content-Type"), "text/event-stream") {
			p.ResponseWriter.WriteHeader(code)
			ev, _ := json.Marshal(protoEvent{Proto: p.proto, LastEventID: p.resume})
			_, _ = io.WriteString(p.ResponseWriter, "event: proto\ndata: "+string(ev)+"\n\n")
			return
		}
	}
	p.ResponseWriter.WriteHeader(code)
}

func (p *protoWriter) Write(b []byte) (int, error) {
	if !p.decided {
		p.WriteHeader(http.StatusOK)
	}
	return p.ResponseWriter.Write(b)
}

// Flush flushes the underlying writer.
func (p *protoWriter) Flush() {
	if f, ok := p.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (p *protoWriter) Unwrap() http.ResponseWriter { return p.ResponseWriter }

// errBadOrigin wraps a malformed --cors-origins entry.
var errBadOrigin = errors.New("bad CORS origin")

// parseOrigin checks one configured origin: scheme://host[:port], no path.
func parseOrigin(s string) (string, error) {
	if s == "*" {
		return s, nil
	}
	u, err := url.Parse(s)
	if err != nil {
		return "", fmt.Errorf("%w %q: %v", errBadOrigin, s, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("%w %q: want scheme://host[:port] with scheme http or https", errBadOrigin, s)
	}
	if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return "", fmt.Errorf("%w %q: an origin has no path, query, fragment or user", errBadOrigin, s)
	}
	return strings.ToLower(u.Scheme + "://" + u.Host), nil
}
