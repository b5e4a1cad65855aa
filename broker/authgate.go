package broker

import (
	"errors"
	"net/http"

	"github.com/quic-go/quic-go"

	"github.com/quiot/quiot/broker/auth"
	"github.com/quiot/quiot/broker/web"
)

// The HTTP side of the authenticator's connection rules (broker/auth):
// admission by remote address (a broker without an ACL serves loopback
// clients only) and by the Origin of a state-changing request (the Origin
// rule, docs/security.md), and the end of connections whose rights a
// reload of the ACL removed. identify and handleSubscribe call these.

// h3NoError is HTTP/3's H3_NO_ERROR, the code a revoked connection is
// closed with (the reason string says why).
const h3NoError = quic.ApplicationErrorCode(0x100)

// revokedReason is the one-line reason a revoked connection gets.
const revokedReason = "the ACL was reloaded and this connection's rights changed: authenticate on a new connection"

// admitted answers 403 with the one-line reason and returns false when the
// authenticator does not admit r's remote address, or when r is a
// cross-site request that may change state (crossSite). Every request that
// authenticates passes here first, whatever its credential: client
// certificate, Basic, Bearer, session token (cookie or not), anonymous
// access and the no-ACL mode's loopback trust.
func (b *Broker) admitted(w http.ResponseWriter, r *http.Request) bool {
	if err := b.opts.Auth.Admit(r.RemoteAddr); err != nil {
		b.refuse(w, r, "", ReasonForbidden, http.StatusForbidden, "%v", err)
		return false
	}
	if origin, foreign := b.crossSite(r); foreign {
		b.refuse(w, r, "", ReasonForbidden, http.StatusForbidden,
			"a %s from origin %q, which is neither this broker nor an allowed CORS origin (broker --cors-origins), is refused whatever its credentials", r.Method, origin)
		return false
	}
	return true
}

// crossSite reports a request a web page of a foreign origin made with the
// user's browser: a method that may change state (anything but GET, HEAD
// and OPTIONS) whose Origin header is present, not the broker's own and
// not one of Options.Web's CORS origins. The browser adds what it holds
// for the broker to such a request (cached Basic credentials, its client
// certificate, its network position: loopback, the LAN), so none of them
// may count. A request without Origin does not come from a web page.
func (b *Broker) crossSite(r *http.Request) (origin string, foreign bool) {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return "", false
	}
	origin = r.Header.Get("Origin")
	if origin == "" || web.SameOrigin(origin, r) {
		return origin, false
	}
	var list []string
	if b.opts.Web != nil {
		list = b.opts.Web.CORSOrigins
	}
	allows, err := web.OriginCheck(list) // checked by web.New already
	return origin, err != nil || !allows(origin)
}

// revoked reports whether the connection of r, authenticated as id at
// authenticator generation gen, lost its rights in a reload since. Then it
// answers 401 and ends the connection.
func (b *Broker) revoked(w http.ResponseWriter, r *http.Request, id string, gen uint64) bool {
	if b.opts.Auth.StillValid(id, gen) {
		return false
	}
	b.log.Info("connection closed: the reloaded ACL removed its rights", "identity", id, "remote", r.RemoteAddr)
	b.stats.countRefused(protoOf(r), ReasonUnauthenticated) // logged just above, not again by noteRefusal
	if r.ProtoMajor < 3 {
		w.Header().Set("Connection", "close")
	}
	w.Header().Set("WWW-Authenticate", `Bearer realm="quiot"`)
	fail(w, http.StatusUnauthorized, revokedReason)
	_ = http.NewResponseController(w).Flush()
	closeConnOf(r)
	return true
}

// closeConnOf closes r's QUIC connection with the revocation reason (a TCP
// connection ends after its response: Connection: close).
func closeConnOf(r *http.Request) {
	if cs, _ := r.Context().Value(connKey{}).(*connState); cs != nil && cs.qc != nil {
		_ = cs.qc.CloseWithError(h3NoError, revokedReason)
	}
}

// sessionOnConn binds r's connection to id, the identity of a browser
// session token (broker/web), as credentials bind it: a connection already
// bound to another identity (by credentials, a client certificate or
// another token) refuses the token with 403, one connection, one
// identity; a connection it binds counts against MaxConnsPerIdentity
// (429 beyond it). An anonymous token binds nothing. Unlike credentials,
// the token binds the connection only for requests that carry it: a
// request on the connection without it is not authenticated by it.
func (b *Broker) sessionOnConn(w http.ResponseWriter, r *http.Request, id string) bool {
	cs, _ := r.Context().Value(connKey{}).(*connState)
	if cs == nil {
		return true
	}
	gen := b.opts.Auth.Generation()
	cs.mu.Lock()
	defer cs.mu.Unlock()
	wasBound := cs.authed
	bound, was, err := cs.boundLocked(r)
	if err != nil {
		b.refuseErr(w, r, id, bindStatus(err), err)
		return false
	}
	switch {
	case bound && was != id:
		b.refuse(w, r, was, ReasonForbidden, http.StatusForbidden, "the session token names %q but this connection is authenticated as %q (open a new connection to change identity)", id, was)
		return false
	case bound && wasBound:
		return !b.revoked(w, r, id, cs.gen)
	case bound:
		cs.gen = gen // bound now by its client certificate
		return true
	case id == "":
		return true
	}
	if err := cs.bindLocked(id); err != nil {
		b.refuseErr(w, r, id, http.StatusTooManyRequests, err)
		return false
	}
	cs.session, cs.gen = true, gen
	return true
}

// bindStatus is the HTTP status of an error binding a connection to an
// identity: 403 for a certificate that cannot name an identity, 429 for
// the per-identity connection limit.
func bindStatus(err error) int {
	if errors.Is(err, auth.ErrDenied) {
		return http.StatusForbidden
	}
	return http.StatusTooManyRequests
}
