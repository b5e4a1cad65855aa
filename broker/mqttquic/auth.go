package mqttquic

import (
	"crypto/tls"
	"sync"
	"sync/atomic"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/quiot/quiot/broker/auth"
)

// authHook authenticates MQTT clients and checks the ACL with the broker's
// authenticator, the same rules as HTTP/3: credentials first (the password
// as a token, else user name and password), then a verified client
// certificate (identity = CN), then anonymous access if configured.
type authHook struct {
	mqtt.HookBase
	core Core
	// ids maps an MQTT client id to its session's identity; it outlives the
	// network connection as long as the session does, so QoS 1 messages
	// queued for an offline session pass the ACL check.
	ids sync.Map // string -> *identity
}

type identity struct {
	cl *mqtt.Client
	id string
	// lastRead and lastWrite remember the last ACL decision for a
	// delivery or subscription (read) and for a publish (write): a
	// subscriber gets the same topic over and over, and the ACL (fixed for
	// the broker's life) would match its patterns again for every message.
	lastRead, lastWrite atomic.Pointer[aclDecision]
}

// aclDecision is one cached ACL answer for a topic (immutable).
type aclDecision struct {
	topic string
	ok    bool
}

// ID names the hook.
func (h *authHook) ID() string { return "quiot-auth" }

// Provides reports the events the hook handles.
func (h *authHook) Provides(b byte) bool {
	switch b {
	case mqtt.OnConnectAuthenticate, mqtt.OnACLCheck, mqtt.OnDisconnect, mqtt.OnClientExpired:
		return true
	}
	return false
}

// tlsState is implemented by *tls.Conn and streamconn.Conn.
type tlsState interface {
	ConnectionState() tls.ConnectionState
}

// authenticate returns the identity of a CONNECT, or ok false.
func authenticate(a *auth.Authenticator, cl *mqtt.Client, pk packets.Packet) (id string, ok bool) {
	user, pass := string(pk.Connect.Username), string(pk.Connect.Password)
	if pk.Connect.PasswordFlag && pass != "" {
		if id, ok = a.Token(pass); !ok {
			id, ok = a.Basic(user, pass)
		}
		if !ok && !a.IsOpen() {
			return "", false
		}
		return id, true
	}
	if ts, isTLS := cl.Net.Conn.(tlsState); isTLS {
		cs := ts.ConnectionState()
		if len(cs.PeerCertificates) > 0 && len(cs.VerifiedChains) > 0 {
			return cs.PeerCertificates[0].Subject.CommonName, true
		}
	}
	if a.Anonymous() {
		return "", true
	}
	return "", false
}

// OnConnectAuthenticate admits a client and records its identity.
func (h *authHook) OnConnectAuthenticate(cl *mqtt.Client, pk packets.Packet) bool {
	id, ok := authenticate(h.core.Auth(), cl, pk)
	if !ok {
		return false
	}
	h.ids.Store(cl.ID, &identity{cl: cl, id: id})
	return true
}

// identityOf returns the identity of client id cid ("" when anonymous or
// unknown).
func (h *authHook) identityOf(cid string) (string, bool) {
	v, ok := h.ids.Load(cid)
	if !ok {
		return "", false
	}
	return v.(*identity).id, true
}

// OnACLCheck allows a publish (write) or a subscription or delivery (read)
// when the broker's ACL does. Topic is a name or, on subscribe, a filter.
//
// mochi asks for every delivery to every subscriber, so the answer is
// cheap: an open broker (no ACL file) allows everything without a lookup,
// and each session remembers its last decision per direction.
func (h *authHook) OnACLCheck(cl *mqtt.Client, topic string, write bool) bool {
	if cl.Net.Inline {
		return true
	}
	a := h.core.Auth()
	if a.IsOpen() {
		return true
	}
	v, ok := h.ids.Load(cl.ID)
	if !ok {
		return false
	}
	ident := v.(*identity)
	last, action := &ident.lastRead, auth.Subscribe
	if write {
		last, action = &ident.lastWrite, auth.Publish
	}
	if d := last.Load(); d != nil && d.topic == topic {
		return d.ok
	}
	ok = a.Allow(ident.id, action, mqttShareStrip(topic))
	last.Store(&aclDecision{topic: topic, ok: ok})
	return ok
}

// forget drops the identity of cl's session unless a newer connection
// of the same client id has replaced it.
func (h *authHook) forget(cl *mqtt.Client) {
	if v, ok := h.ids.Load(cl.ID); ok && v.(*identity).cl == cl {
		h.ids.CompareAndDelete(cl.ID, v)
	}
}

// OnDisconnect forgets the identity when the session ends with the
// connection.
func (h *authHook) OnDisconnect(cl *mqtt.Client, _ error, expire bool) {
	if expire {
		h.forget(cl)
	}
}

// OnClientExpired forgets the identity of an expired session.
func (h *authHook) OnClientExpired(cl *mqtt.Client) { h.forget(cl) }

// mqttShareStrip removes a shared-subscription prefix ($share/group/) so
// the ACL sees the plain filter.
func mqttShareStrip(filter string) string {
	const p = "$share/"
	if len(filter) > len(p) && filter[:len(p)] == p {
		for i := len(p); i < len(filter); i++ {
			if filter[i] == '/' {
				return filter[i+1:]
			}
		}
	}
	return filter
}
