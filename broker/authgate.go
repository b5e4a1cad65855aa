package broker

import (
	"errors"
	"net/http"

	"github.com/quic-go/quic-go"

	"github.com/quiot/quiot/broker/auth"
)

// The HTTP side of the authenticator's connection rules (broker/auth):
// admission by remote address (a broker without an ACL serves loopback
// clients only) and the end of connections whose rights a reload of the
// ACL removed. identify and handleSubscribe call these.

// h3NoError is HTTP/3's H3_NO_ERROR, the code a revoked connection is
// closed with (the reason string says why).
const h3NoError = quic.ApplicationErrorCode(0x100)

// revokedReason is the one-line reason a revoked connection gets.
const revokedReason = "the ACL was reloaded and this connection's rights changed: authenticate on a new connection"

// admitted answers 403 with the one-line reason and returns false when the
// authenticator does not admit r's remote address.
func (b *Broker) admitted(w http.ResponseWriter, r *http.Request) bool {
	if err := b.opts.Auth.Admit(r.RemoteAddr); err != nil {
		b.refuse(w, r, "", ReasonForbidden, http.StatusForbidden, "%v", err)
		return false
	}
	return true
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

// bindStatus is the HTTP status of an error binding a connection to an
// identity: 403 for a certificate that cannot name an identity, 429 for
// the per-identity connection limit.
func bindStatus(err error) int {
	if errors.Is(err, auth.ErrDenied) {
		return http.StatusForbidden
	}
	return http.StatusTooManyRequests
}
