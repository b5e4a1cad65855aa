package mqttquic

import (
	"net/http"
	"strings"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/quiot/quiot/broker/auth"
	"github.com/quiot/quiot/broker/web"
)

// A browser's session token on MQTT over WebSocket (docs/browser.md,
// docs/security.md). On the broker's own port (/mqtt) the upgrade request
// passes the broker's browser part (broker/web) first, which verifies a
// session token from POST /v1/session found in the quiot_session cookie,
// an Authorization: Bearer header or ?access_token= (its signature,
// expiry, log-out and the ACL reloads since it was issued) and names its
// identity in the request's context. The MQTT connection is then bound to
// that identity: its CONNECT needs no credentials, a user name in it must
// be empty or that identity, and the session is that identity's for the
// ACL and the per-identity limits like any other. A connection without a
// valid token (none, or a stale cookie the browser part dropped) is
// judged by its CONNECT as every MQTT client is.

// wsSession is the session token identity of an upgraded connection.
type wsSession struct {
	id string
	// gen is the ACL generation at the upgrade, when the token was
	// found valid: a reload between the upgrade and the CONNECT that
	// changed the identity's rights ends it as it ends the token.
	gen uint64
}

// sessionOf returns the identity the upgrade request r authenticated, or
// nil: the session token the browser part found on it, else HTTP
// credentials on it (Authorization: Basic, or Bearer with an ACL token).
// A browser sends the Basic credentials it holds for the broker (the
// dashboard's log-in prompt) with the upgrade by itself, and then the
// browser part leaves the session cookie alone. Bad credentials bind
// nothing: the CONNECT is judged as every other.
func sessionOf(r *http.Request, a *auth.Authenticator) *wsSession {
	if id, gen, ok := web.TokenFrom(r.Context()); ok {
		// Rights are checked from the token's issue: a reload since then
		// that changed the identity's rights ends it, whenever it came.
		return &wsSession{id: id, gen: gen}
	}
	gen := a.Generation() // before authenticating: a reload after it is noticed
	if user, pass, ok := r.BasicAuth(); ok {
		if id, ok := a.Basic(user, pass); ok {
			return &wsSession{id: id, gen: gen}
		}
		return nil
	}
	if scheme, cred, ok := strings.Cut(r.Header.Get("Authorization"), " "); ok && strings.EqualFold(scheme, "bearer") {
		if id, ok := a.Token(strings.TrimSpace(cred)); ok {
			return &wsSession{id: id, gen: gen}
		}
	}
	return nil
}

// sessionBound is a connection a session token authenticated (wsConn,
// wssConn).
type sessionBound interface {
	session() *wsSession
}

func (ws *wsConn) session() *wsSession { return ws.sess }

// sessionIdentity returns the identity of a CONNECT on a connection bound
// by a session token: bound is false for every other connection. The
// CONNECT's user name must be empty or the token's identity; its password,
// if any, is not looked at (the token authenticated the connection).
func sessionIdentity(a *auth.Authenticator, cl *mqtt.Client, pk packets.Packet) (id string, bound, ok bool) {
	sb, isSB := cl.Net.Conn.(sessionBound)
	if !isSB {
		return "", false, false
	}
	s := sb.session()
	if s == nil {
		return "", false, false
	}
	if user := string(pk.Connect.Username); user != "" && user != s.id {
		return "", true, false
	}
	if !a.StillValid(s.id, s.gen) || (s.id != "" && !a.Known(s.id)) {
		return "", true, false
	}
	return s.id, true, true
}
