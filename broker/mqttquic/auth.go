package mqttquic

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/auth"
	"github.com/quiot/quiot/internal/lograte"
	"github.com/quiot/quiot/internal/topic"
)

// authHook authenticates MQTT clients and checks every message path with
// the broker's authenticator (allow, the MQTT side's one authorization
// decision), the same rules as HTTP/3: credentials first (the password as
// a token, else user name and password), then a verified client
// certificate (identity = CN), then anonymous access if configured.
//
// It also owns the sessions: a client id belongs to the identity that
// holds its session (connected or offline), and the hook bounds sessions
// and queued messages (Limits). See security.go for the rules.
type authHook struct {
	mqtt.HookBase
	core   Core
	mq     *mqtt.Server
	limits Limits
	log    *slog.Logger
	// certs says the QUIC listener asks for client certificates: a
	// CONNECT from 0-RTT data then waits for the handshake to read one
	// (authenticate).
	certs bool
	// topics bounds topic names and filters: the HTTP side's limits
	// (broker.Limits MaxTopicLength, MaxTopicLevels; topicLimitsOf).
	topics topic.Limits

	// ids maps an MQTT client id to its session's identity; it outlives
	// the network connection as long as the session does, so messages
	// queued for an offline session pass the ACL check, and a client of
	// another identity cannot claim the id. Written with mu and idsMu
	// held; read with either (lookup takes idsMu). A delivery finds its
	// session on the client (sessionOf) and reads ids only when that is
	// stale. A map under a lock: as a sync.Map it took about 100 bytes
	// an entry, 55 now (docs/BENCH.md, "Heap per idle client, site by
	// site").
	ids   map[string]*identity
	idsMu sync.RWMutex

	mu       sync.Mutex     // serialises session bookkeeping
	perID    map[string]int // sessions per identity
	sessions int            // entries in ids

	// queued is the bytes of the messages all sessions hold.
	queued atomic.Int64
	stats  securityCounters
	// refusalLog bounds the Info lines of refusals a client can cause
	// (noteRefusal).
	refusalLog lograte.Limiter

	stop     chan struct{}
	stopOnce sync.Once
	swept    chan struct{} // closed when the sweeper has ended

	// beforeDelivery, when set (tests only), runs as mochi checks a
	// delivery to a session: after it has taken the session's client from
	// its table, before it queues the message on it.
	beforeDelivery atomic.Pointer[func(cl *mqtt.Client, topic string)]
}

// identity is one session's owner and its per-session state.
type identity struct {
	cl *mqtt.Client // the latest connection of the session
	// gone is set when the identity leaves ids (replaced or deleted; it
	// never returns): a client's HookState that holds it is stale.
	gone atomic.Bool
	// subscribing is non-zero while a SUBSCRIBE of the session is
	// processed (its ACL checks are for filters, not deliveries, and do
	// not count against the queue quota). Beside gone: an identity is
	// 112 bytes, in the 112-byte size class (120 with each in 8 bytes of
	// its own).
	subscribing atomic.Int32
	id          string // "" = anonymous
	// key is what Limits.MaxSessionsPerIdentity counts the session
	// under (limitKey).
	key string
	// lastRead and lastWrite remember the last ACL decision for a
	// delivery or subscription (read) and for a publish (write): a
	// subscriber gets the same topic over and over, and the ACL would
	// match its patterns again for every message.
	lastRead, lastWrite atomic.Pointer[aclDecision]
	// filters are the filters of the SUBSCRIBE being processed (set with
	// subscribing): an ACL check of one of them is the subscription's, a
	// refusal to note, not a delivery's.
	filters atomic.Pointer[[]string]
	q       queueAcct
}

// aclDecision is one cached ACL answer for a topic (immutable), valid for
// the authenticator that gave it (a reloaded ACL is a new one).
type aclDecision struct {
	a     *auth.Authenticator
	gen   uint64 // a.Generation(): Reload swaps the rules in place
	topic string
	ok    bool
}

func newAuthHook(mq *mqtt.Server, core Core, l Limits, log *slog.Logger) *authHook {
	h := &authHook{core: core, mq: mq, limits: l, log: log, topics: topicLimitsOf(core), perID: map[string]int{}, stop: make(chan struct{}), swept: make(chan struct{})}
	go h.sweeper()
	return h
}

// ID names the hook.
func (h *authHook) ID() string { return "quiot-auth" }

// Provides reports the events the hook handles.
func (h *authHook) Provides(b byte) bool {
	switch b {
	case mqtt.OnConnect, mqtt.OnConnectAuthenticate, mqtt.OnSessionEstablish, mqtt.OnSessionEstablished,
		mqtt.OnACLCheck, mqtt.OnWill, mqtt.OnDisconnect, mqtt.OnClientExpired,
		mqtt.OnSubscribe, mqtt.OnSubscribed, mqtt.OnUnsubscribe,
		mqtt.OnQosPublish, mqtt.OnQosComplete, mqtt.OnQosDropped, mqtt.OnStopped:
		return true
	}
	return false
}

// tlsState is implemented by *tls.Conn and streamconn.Conn.
type tlsState interface {
	ConnectionState() tls.ConnectionState
}

// authenticate returns the identity of a CONNECT, or ok false; throttled
// (wrapping auth.ErrThrottled) when the password was not checked because
// the client's address sent too many wrong ones (auth.BasicFrom).
//
// certs says client certificates may be presented. Over QUIC, reading the
// TLS state of a connection still in its handshake (CONNECT in 0-RTT data)
// blocks until the handshake completes; without certificates there is
// nothing to read, so such a CONNECT is served at once (early.go).
func authenticate(a *auth.Authenticator, cl *mqtt.Client, pk packets.Packet, certs bool) (id string, ok bool, throttled error) {
	if a.Admit(cl.Net.Remote) != nil {
		return "", false, nil // no ACL: loopback clients only
	}
	if id, bound, ok := sessionIdentity(a, cl, pk); bound { // ws_session.go
		return id, ok, nil
	}
	user, pass := string(pk.Connect.Username), string(pk.Connect.Password)
	if pk.Connect.PasswordFlag && pass != "" {
		if id, ok = a.Token(pass); !ok {
			var err error
			id, err = a.BasicFrom(cl.Net.Remote, user, pass)
			if errors.Is(err, auth.ErrThrottled) {
				return "", false, err
			}
			ok = err == nil
		}
		if !ok && !a.IsOpen() {
			return "", false, nil
		}
		return id, true, nil
	}
	if ts, isTLS := cl.Net.Conn.(tlsState); isTLS && (certs || !handshakePending(cl)) {
		cs := ts.ConnectionState()
		if len(cs.PeerCertificates) > 0 && len(cs.VerifiedChains) > 0 {
			// A CN that is no identity (a wildcard, '/', NUL) or has no
			// [[user]] entry is refused.
			id, ok = a.Certificate(cs.PeerCertificates[0].Subject.CommonName)
			return id, ok, nil
		}
	}
	if a.Anonymous() {
		return "", true, nil
	}
	return "", false, nil
}

// OnConnect authenticates a client, checks its client id against the
// identity it names (auth.ClientIDOwner), its will against the ACL, its
// client id against the owner of an existing session, and the session
// limits, and records the session's identity. A refusal is answered here
// with a CONNACK (mochi would not send one for an OnConnect error): Client
// Identifier not valid (0x85; 3.1.1: 2) for a client id that is another
// identity's name, Not authorized (0x87; 3.1.1: 5) for a will or a client
// id whose session another identity holds, Topic Name invalid (0x90;
// 3.1.1: 5) for a will topic beyond the topic limits (h.topics), Quota
// exceeded (0x97; 3.1.1: 3 Server unavailable) for a limit, Connection
// rate exceeded (0x9F; 3.1.1: 3) for a password from an address that sent
// too many wrong ones (auth.BasicFrom). Bad credentials are left to
// OnConnectAuthenticate (mochi's answer).
func (h *authHook) OnConnect(cl *mqtt.Client, pk packets.Packet) error {
	a := h.core.Auth()
	if err := a.Admit(cl.Net.Remote); err != nil {
		h.noteRefusal("mqtt connect refused", broker.ReasonForbidden, "client", cl.ID, "remote", cl.Net.Remote, "why", err.Error())
		return h.refuse(cl, packets.ErrNotAuthorized, packets.Err3NotAuthorized)
	}
	id, ok, throttled := authenticate(a, cl, pk, h.certs)
	if throttled != nil {
		h.noteRefusal("mqtt connect refused", broker.ReasonThrottled, "client", cl.ID, "remote", cl.Net.Remote, "why", throttled.Error())
		return h.refuse(cl, packets.ErrConnectionRateExceeded, packets.Err3ServerUnavailable)
	}
	if !ok {
		// mochi answers Bad user name or password (OnConnectAuthenticate).
		h.noteRefusal("mqtt connect refused", broker.ReasonUnauthenticated, "client", cl.ID, "remote", cl.Net.Remote, "why", "no valid credentials or client certificate")
		return nil
	}
	if owner, owned := a.ClientIDOwner(cl.ID); owned && owner != id {
		// The client id is another identity's name (%u): only that
		// identity may use it, so nobody can squat a device's id.
		h.stats.refusedClientIDs.Add(1)
		h.noteRefusal("mqtt connect refused", broker.ReasonForbidden, "client", cl.ID, "identity", id, "remote", cl.Net.Remote,
			"why", "client id is the name of another identity")
		return h.refuse(cl, packets.ErrClientIdentifierNotValid, packets.Err3ClientIdentifierNotValid)
	}
	if cl.Properties.HasWill() && !allow(a, id, auth.Publish, cl.Properties.Will().TopicName) {
		h.stats.refusedWills.Add(1)
		h.noteRefusal("mqtt connect refused", broker.ReasonForbidden, "client", cl.ID, "identity", id, "remote", cl.Net.Remote,
			"topic", cl.Properties.Will().TopicName, "why", "will topic not allowed")
		return h.refuse(cl, packets.ErrNotAuthorized, packets.Err3NotAuthorized)
	}
	if cl.Properties.HasWill() {
		if err := h.topics.ValidateName(cl.Properties.Will().TopicName); err != nil {
			h.stats.refusedWills.Add(1)
			h.noteRefusal("mqtt connect refused", broker.ReasonBadTopic, "client", cl.ID, "identity", id, "remote", cl.Net.Remote,
				"why", "will topic: "+err.Error())
			return h.refuse(cl, packets.ErrTopicNameInvalid, packets.Err3NotAuthorized)
		}
	}
	return h.claim(cl, id)
}

// refuse answers a CONNECT with code (MQTT 5) or v3 (3.1.1) and returns
// the error that ends the connection.
func (h *authHook) refuse(cl *mqtt.Client, code, v3 packets.Code) error {
	if cl.Properties.ProtocolVersion < 5 {
		_ = h.mq.SendConnack(cl, v3, false, nil)
	} else {
		_ = h.mq.SendConnack(cl, code, false, nil)
	}
	return code
}

// OnConnectAuthenticate admits the clients OnConnect recorded.
func (h *authHook) OnConnectAuthenticate(cl *mqtt.Client, _ packets.Packet) bool {
	ident := h.lookup(cl.ID)
	return ident != nil && ident.cl == cl
}

// lookup returns the session state of client id cid (ids[cid]), or nil.
func (h *authHook) lookup(cid string) *identity {
	h.idsMu.RLock()
	defer h.idsMu.RUnlock()
	return h.ids[cid]
}

// identityOf returns the identity of cl's client id ("" when anonymous
// or unknown).
func (h *authHook) identityOf(cl *mqtt.Client) (string, bool) {
	ident := h.sessionOf(cl)
	if ident == nil {
		return "", false
	}
	return ident.id, true
}

// owner returns the session state whose latest connection is cl, or nil
// (cl was taken over or its session ended).
func (h *authHook) owner(cl *mqtt.Client) *identity {
	ident := h.sessionOf(cl)
	if ident == nil || ident.cl != cl {
		return nil
	}
	return ident
}

// sessionOf returns the session state of cl's client id (ids[cl.ID]), or
// nil. mochi asks for it on every delivery and every PUBACK, so the client
// keeps the last one found (Client.HookState) while it stays in ids.
func (h *authHook) sessionOf(cl *mqtt.Client) *identity {
	if ident, _ := cl.HookState.Load().(*identity); ident != nil && !ident.gone.Load() {
		return ident
	}
	ident := h.lookup(cl.ID)
	if ident == nil {
		return nil
	}
	cl.HookState.Store(ident)
	return ident
}

// OnACLCheck allows a publish (write) or a subscription or delivery (read)
// when allow does; a delivery also needs room in the session's queue
// (Limits.MaxQueuedBytes, MaxQueuedBytesTotal). Topic is a name or, on
// subscribe, a filter.
//
// mochi asks for every delivery to every subscriber (retained replay
// included), so the answer is cheap: each session remembers its last
// decision per direction.
func (h *authHook) OnACLCheck(cl *mqtt.Client, topic string, write bool) bool {
	if cl.Net.Inline {
		return true
	}
	if f := h.beforeDelivery.Load(); f != nil && !write {
		(*f)(cl, topic)
	}
	ident := h.sessionOf(cl)
	if ident == nil {
		if ident = h.adopt(cl); ident == nil {
			return false
		}
	}
	if !write && ident.subscribing.Load() == 0 &&
		(ident.q.bytes.Load() >= h.limits.MaxQueuedBytes || h.queued.Load() >= h.limits.MaxQueuedBytesTotal) {
		if n := h.stats.droppedQueueFull.Add(1); n&(n-1) == 0 {
			h.log.Warn("mqtt session queue full: messages not queued", "client", cl.ID, "queued_bytes", ident.q.bytes.Load(), "dropped", n)
		}
		return false
	}
	a := h.core.Auth()
	last, action := &ident.lastRead, auth.Subscribe
	if write {
		last, action = &ident.lastWrite, auth.Publish
	}
	gen := a.Generation()
	var ok bool
	if d := last.Load(); d != nil && d.a == a && d.gen == gen && d.topic == topic {
		ok = d.ok
	} else {
		ok = allow(a, ident.id, action, topic)
		last.Store(&aclDecision{a: a, gen: gen, topic: topic, ok: ok})
	}
	if !ok {
		switch {
		case write:
			h.noteRefusal("mqtt publish refused", broker.ReasonForbidden, "client", cl.ID, "identity", ident.id, "topic", topic)
		case ident.subscribing.Load() > 0 && ident.subscribes(topic):
			h.noteRefusal("mqtt subscribe refused", broker.ReasonForbidden, "client", cl.ID, "identity", ident.id, "topic", topic)
		}
		// A delivery the ACL denies is no refusal: the subscriber's
		// filter is wider than its rights, and the message skips it.
	}
	return ok
}

// subscribes reports whether filter is one of the SUBSCRIBE being
// processed.
func (ident *identity) subscribes(filter string) bool {
	f := ident.filters.Load()
	return f != nil && slices.Contains(*f, filter)
}

// refusalCounter is the part of a Core that counts refusals
// (*broker.Broker has it; a Core without it counts none).
type refusalCounter interface {
	CountRefused(proto string, r broker.Reason)
}

// countRefused counts a refusal of an MQTT client for reason r.
func countRefused(c Core, r broker.Reason) {
	if rc, ok := c.(refusalCounter); ok {
		rc.CountRefused(Origin, r)
	}
}

// noteRefusal counts a refusal for reason r and logs it at Info as msg
// with the key/value pairs attrs (never a credential): at most
// lograte.DefaultBurst lines of one msg a minute, the next one saying how
// many were suppressed, so a client refused in a loop cannot flood the log.
func (h *authHook) noteRefusal(msg string, r broker.Reason, attrs ...any) {
	countRefused(h.core, r)
	ok, suppressed := h.refusalLog.Allow(msg)
	if !ok {
		return
	}
	attrs = append(attrs, "reason", r.String())
	if suppressed > 0 {
		attrs = append(attrs, "suppressed", suppressed)
	}
	h.log.Info(msg, attrs...)
}

// maySubscribe reports whether cl's identity may subscribe to filter, with
// no side effect (the interest hook asks before it covers a filter).
func (h *authHook) maySubscribe(cl *mqtt.Client, filter string) bool {
	ident := h.owner(cl)
	return ident != nil && allow(h.core.Auth(), ident.id, auth.Subscribe, filter)
}

// OnSubscribe refuses the filters beyond the topic limits (badFilters)
// and marks the session as subscribing (see identity.subscribing).
func (h *authHook) OnSubscribe(cl *mqtt.Client, pk packets.Packet) packets.Packet {
	if cl.Net.Inline {
		return pk
	}
	pk.Filters = h.badFilters(cl, "mqtt subscribe refused", pk.Filters)
	if ident := h.owner(cl); ident != nil {
		filters := make([]string, len(pk.Filters))
		for i, f := range pk.Filters {
			filters[i] = f.Filter
		}
		ident.filters.Store(&filters)
		ident.subscribing.Add(1)
	}
	return pk
}

// OnUnsubscribe answers the filters beyond the topic limits with No
// subscription existed (0x11; none can exist) without mochi looking them up
// (badFilters).
func (h *authHook) OnUnsubscribe(cl *mqtt.Client, pk packets.Packet) packets.Packet {
	if cl.Net.Inline {
		return pk
	}
	pk.Filters = h.badFilters(cl, "mqtt unsubscribe refused", pk.Filters)
	return pk
}

// refusedFilter replaces a filter beyond the topic limits in a SUBSCRIBE
// or UNSUBSCRIBE: mochi refuses it at once as an invalid filter (SUBACK
// 0x8F Topic Filter invalid; 3.1.1: 0x80) and holds no subscription to
// it. mochi's cost of a filter grows with the square of its levels (its
// topic tree rescans the filter for every level), so a filter beyond the
// limits never reaches it.
const refusedFilter = "#/"

// badFilters returns filters with each filter beyond the topic limits
// (checked without its $share/group/ prefix, the group name no longer than
// one topic) replaced by refusedFilter, each refusal counted and logged as
// msg; filters itself is not changed.
func (h *authHook) badFilters(cl *mqtt.Client, msg string, filters packets.Subscriptions) packets.Subscriptions {
	var out packets.Subscriptions
	for i, sub := range filters {
		err := h.validFilter(sub.Filter)
		if err == nil {
			continue
		}
		if out == nil {
			out = slices.Clone(filters)
		}
		out[i].Filter = refusedFilter
		h.noteRefusal(msg, broker.ReasonBadTopic, "client", cl.ID, "remote", cl.Net.Remote, "why", err.Error())
	}
	if out == nil {
		return filters
	}
	return out
}

// validFilter checks an MQTT filter against the topic limits, a shared
// subscription's without its $share/group/ prefix.
func (h *authHook) validFilter(f string) error {
	inner := mqttShareStrip(f)
	if group := len(f) - len(inner); inner != f && group > len("$share//")+h.topics.MaxLength {
		return fmt.Errorf("%w: shared subscription group is %d bytes, longer than %d", topic.ErrInvalid, group-len("$share//"), h.topics.MaxLength)
	}
	return h.topics.ValidateFilter(inner)
}

// topicLimiter is the part of a Core that tells the HTTP side's limits
// (*broker.Broker has it).
type topicLimiter interface {
	Limits() broker.Limits
}

// topicLimitsOf returns the topic limits of the broker c, the same as its
// HTTP side applies (docs/security.md), or the defaults.
func topicLimitsOf(c Core) topic.Limits {
	l := topic.Limits{MaxLength: topic.DefaultMaxLength, MaxLevels: topic.DefaultMaxLevels}
	if tl, ok := c.(topicLimiter); ok {
		bl := tl.Limits()
		if bl.MaxTopicLength > 0 {
			l.MaxLength = bl.MaxTopicLength
		}
		if bl.MaxTopicLevels > 0 {
			l.MaxLevels = bl.MaxTopicLevels
		}
	}
	return l
}

// OnSubscribed ends what OnSubscribe began.
func (h *authHook) OnSubscribed(cl *mqtt.Client, _ packets.Packet, _ []byte) {
	if ident := h.owner(cl); ident != nil {
		ident.subscribing.Add(-1)
		ident.filters.Store(nil)
	}
}

// OnWill checks a will again when mochi is about to send it (the ACL may
// have been reloaded since CONNECT): a will its identity may not publish is
// replaced by an empty one, which mochi delivers to nobody and the bridge
// does not forward.
func (h *authHook) OnWill(cl *mqtt.Client, will mqtt.Will) (mqtt.Will, error) {
	id, known := h.identityOf(cl)
	if known && allow(h.core.Auth(), id, auth.Publish, will.TopicName) {
		return will, nil
	}
	h.stats.droppedWills.Add(1)
	h.log.Info("mqtt will dropped: topic not allowed", "client", cl.ID, "identity", id, "topic", will.TopicName)
	return mqtt.Will{}, nil
}

// OnDisconnect ends the session when it ends with the connection.
func (h *authHook) OnDisconnect(cl *mqtt.Client, _ error, expire bool) {
	if expire {
		h.endSession(cl)
	}
}

// OnClientExpired ends an expired offline session. mochi only forgets the
// client; its subscriptions and queued messages are released here.
func (h *authHook) OnClientExpired(cl *mqtt.Client) {
	if h.owner(cl) != nil {
		h.mq.UnsubscribeClient(cl)
		cl.ClearInflights()
	}
	h.endSession(cl)
}

// OnStopped ends the sweeper.
func (h *authHook) OnStopped() {
	h.stopOnce.Do(func() { close(h.stop) })
	<-h.swept
}

// sweeper expires anonymous offline sessions (Limits.AnonymousSessionExpiry)
// and forgets claims of connections that never became sessions.
func (h *authHook) sweeper() {
	defer close(h.swept)
	every := min(max(h.limits.AnonymousSessionExpiry/4, time.Second), 30*time.Second)
	t := time.NewTicker(every)
	defer t.Stop()
	gen, changed := h.core.Auth().Watch()
	for {
		select {
		case <-h.stop:
			return
		case now := <-t.C:
			h.sweep(now)
		case <-changed:
			since := gen
			gen, changed = h.core.Auth().Watch()
			h.revoke(since)
		}
	}
}

// revoke disconnects the clients whose identity lost rights in a reload
// of the ACL after generation since (auth.StillValid), and those whose
// client id the reload made another identity's (auth.ClientIDOwner):
// MQTT 5 clients get a DISCONNECT Not authorized (0x87). Offline sessions
// stay; every delivery to them passes the ACL again (OnACLCheck), and the
// owner of a client id ends another identity's offline session of it when
// it connects (claimLocked).
func (h *authHook) revoke(since uint64) {
	a := h.core.Auth()
	// The sessions are taken first: disconnecting a client may end its
	// session (OnDisconnect), which changes ids.
	h.idsMu.RLock()
	idents := make([]*identity, 0, len(h.ids))
	for _, ident := range h.ids {
		idents = append(idents, ident)
	}
	h.idsMu.RUnlock()
	for _, ident := range idents {
		cl := ident.cl
		if cl == nil || cl.Net.Inline || cl.Closed() {
			continue
		}
		owner, owned := a.ClientIDOwner(cl.ID)
		switch {
		case owned && owner != ident.id:
			// The reload named an identity after this client id.
			h.log.Info("mqtt client disconnected: the reloaded ACL gave its client id to another identity", "client", cl.ID, "identity", ident.id, "owner", owner)
		case a.StillValid(ident.id, since):
			continue
		default:
			h.log.Info("mqtt client disconnected: the reloaded ACL removed its rights", "client", cl.ID, "identity", ident.id)
		}
		if cl.Properties.ProtocolVersion >= 5 {
			_ = h.mq.DisconnectClient(cl, packets.ErrNotAuthorized)
		} else {
			cl.Stop(packets.ErrNotAuthorized)
		}
	}
}

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
