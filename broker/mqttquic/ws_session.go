package mqttquic

import (
	"net/http"

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

// sessionOf returns the session token identity the browser part found on
// the upgrade request r, or nil.
func sessionOf(r *http.Request, a *auth.Authenticator) *wsSession {
	id, ok := web.IdentityFrom(r.Context())
	if !ok {
		return nil
	}
	return &wsSession{id: id, gen: a.Generation()}
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
