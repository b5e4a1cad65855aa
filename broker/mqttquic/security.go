package mqttquic

// The rules every MQTT message path follows (issue 9):
//
//   - One decision: allow (below) wraps auth.Authenticator.Allow, the
//     broker's one authorization check, and every path calls it: PUBLISH
//     (OnACLCheck write), SUBSCRIBE and every delivery, retained replay
//     included (OnACLCheck read), the will at CONNECT and again when mochi
//     sends it (OnConnect, OnWill), the messages an inherited session
//     resends (OnSessionEstablish), and the bridge both ways (mochi's
//     checks for MQTT -> HTTP/3; bridge.inject for HTTP/3 -> MQTT).
//   - `$` topics belong to the broker: no client publishes to them, wills
//     included, over either protocol; the bridge drops them.
//   - With an ACL, a client id equal to the name of a [[user]] belongs to
//     that identity (auth.Authenticator.ClientIDOwner): any other identity,
//     anonymous included, is refused with Client Identifier not valid
//     (MQTT 5 0x85, 3.1.1 return code 2), so nobody can squat a device's
//     id.
//   - A client id belongs to the identity holding its session (connected
//     or offline). A CONNECT by another identity with that id is refused
//     with Not authorized (MQTT 5 0x87, 3.1.1 return code 5); the session
//     is neither inherited nor disconnected. The same identity takes its
//     session over as MQTT says. All anonymous clients are one identity.
//   - Every resource is bounded (Limits), with a counter (Server.Security).

import (
	"math"
	"net"
	"sync"
	"sync/atomic"
	"time"
	"unique"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/auth"
)

// allow is auth.Authenticator.Allow for MQTT: may identity id
// ("" = anonymous) do action on topic (a name for Publish, a name or
// filter for Subscribe)? A shared subscription's filter is checked without
// its $share/group/ prefix. Allow itself refuses every publish to a `$`
// topic and to a name holding a wildcard (a will topic mochi does not
// check), for every protocol.
func allow(a *auth.Authenticator, id string, action auth.Action, topic string) bool {
	if action == auth.Subscribe {
		topic = mqttShareStrip(topic)
	}
	return a.Allow(id, action, topic)
}

// SecurityStats counts what the MQTT server refused or dropped to keep its
// rules and limits, and what it holds.
type SecurityStats struct {
	// RefusedClients counts CONNECTs refused because Limits.MaxClients
	// clients were connected.
	RefusedClients uint64
	// RefusedSessions counts CONNECTs refused by Limits.MaxSessions or
	// Limits.MaxSessionsPerIdentity.
	RefusedSessions uint64
	// RefusedTakeovers counts CONNECTs refused because the client id's
	// session belongs to another identity.
	RefusedTakeovers uint64
	// RefusedClientIDs counts CONNECTs refused because the client id is
	// the name of another identity (auth.Authenticator.ClientIDOwner).
	RefusedClientIDs uint64
	// RefusedWills counts CONNECTs refused because the identity may not
	// publish to the will topic, or the will topic is beyond the topic
	// limits.
	RefusedWills uint64
	// DroppedWills counts wills not sent because the identity could no
	// longer publish to the topic when the will was due.
	DroppedWills uint64
	// DroppedResends counts queued messages of an inherited session not
	// resent because the identity may no longer receive them.
	DroppedResends uint64
	// DroppedQueueFull counts deliveries not queued for a session because
	// Limits.MaxQueuedBytes or MaxQueuedBytesTotal was reached.
	DroppedQueueFull uint64
	// DroppedInflight counts deliveries not queued because a session held
	// Limits.MaxQueuedMessages (mochi's count).
	DroppedInflight uint64
	// ExpiredSessions counts anonymous offline sessions ended by
	// Limits.AnonymousSessionExpiry.
	ExpiredSessions uint64
	// BridgeDroppedFull counts HTTP/3 messages not injected into MQTT
	// because the bridge queue was full (Limits.BridgeQueueBytes,
	// BridgeQueueMessages).
	BridgeDroppedFull uint64
	// BridgeDroppedDenied counts HTTP/3 messages not injected into MQTT
	// because of a `$` topic or a publisher not allowed to publish there.
	BridgeDroppedDenied uint64
	// RefusedPreConnect counts connections closed at once because their
	// source address held Limits.MaxPreConnectPerAddr connections without
	// CONNECT.
	RefusedPreConnect uint64
	// ClosedNoConnect counts connections closed because they sent no
	// CONNECT within Limits.ConnectTimeout.
	ClosedNoConnect uint64
	// QUICRetries counts the MQTT-over-QUIC connection attempts asked to
	// prove their source address with a Retry (Limits.QUICRetryAbove).
	QUICRetries uint64
	// QUICHalfOpen is the number of MQTT-over-QUIC handshakes in progress
	// from addresses not yet validated.
	QUICHalfOpen int64
	// Clients is the number of connected MQTT clients.
	Clients int64
	// Sessions is the number of sessions (connected and offline) of
	// identified clients (with a broker).
	Sessions int
	// QueuedBytes is the bytes of the messages all sessions hold.
	QueuedBytes int64
	// BridgeQueueBytes is the bytes waiting in the bridge queue.
	BridgeQueueBytes int64
	// PendingWriteBytes is the bytes of the QoS 0 messages waiting to be
	// written to clients, and DroppedPendingBytes counts the QoS 0
	// deliveries dropped because Limits.MaxQueuedBytes or
	// MaxQueuedBytesTotal of them were waiting.
	PendingWriteBytes   int64
	DroppedPendingBytes uint64
	// RetainedReplays is the number of clients with a retained replay
	// under way (docs/mqtt.md, "Retained replay after SUBSCRIBE"): one
	// goroutine each, paced by the client.
	RetainedReplays int64
}

type securityCounters struct {
	refusedClients, refusedSessions, refusedTakeovers, refusedWills atomic.Uint64
	refusedClientIDs                                                atomic.Uint64
	droppedWills, droppedResends, droppedQueueFull, expiredSessions atomic.Uint64
}

// Security returns the server's security counters (for metrics).
func (s *Server) Security() SecurityStats {
	st := SecurityStats{
		Clients:           atomic.LoadInt64(&s.mq.Info.ClientsConnected),
		DroppedInflight:   uint64(atomic.LoadInt64(&s.mq.Info.InflightDropped)),
		RefusedPreConnect: s.compat.pre.refused.Load(),
		ClosedNoConnect:   s.compat.pre.timedOut.Load(),

		PendingWriteBytes:   atomic.LoadInt64(&s.mq.Info.PendingWriteBytes),
		DroppedPendingBytes: uint64(atomic.LoadInt64(&s.mq.Info.PendingBytesDropped)),
		RetainedReplays:     int64(s.mq.RetainedReplays()),
	}
	if s.quic != nil {
		st.QUICRetries, st.QUICHalfOpen = s.quic.valid.Retries(), s.quic.valid.HalfOpen()
	}
	if s.br == nil {
		return st
	}
	h := s.br.auth
	st.RefusedClients = h.stats.refusedClients.Load()
	st.RefusedSessions = h.stats.refusedSessions.Load()
	st.RefusedTakeovers = h.stats.refusedTakeovers.Load()
	st.RefusedClientIDs = h.stats.refusedClientIDs.Load()
	st.RefusedWills = h.stats.refusedWills.Load()
	st.DroppedWills = h.stats.droppedWills.Load()
	st.DroppedResends = h.stats.droppedResends.Load()
	st.DroppedQueueFull = h.stats.droppedQueueFull.Load()
	st.ExpiredSessions = h.stats.expiredSessions.Load()
	st.QueuedBytes = h.queued.Load()
	h.mu.Lock()
	st.Sessions = h.sessions
	h.mu.Unlock()
	st.BridgeDroppedFull = s.br.Dropped.Load()
	st.BridgeDroppedDenied = s.br.Denied.Load()
	s.br.mu.Lock()
	st.BridgeQueueBytes = s.br.queueBytes
	s.br.mu.Unlock()
	return st
}

// live reports whether the recorded session state of client id cid is a
// session mochi holds or a connection still in progress (a claim of a
// connection that failed before its session began is not).
func (h *authHook) live(cid string, ident *identity) bool {
	if _, ok := h.mq.Clients.Get(cid); ok {
		return true
	}
	return !ident.cl.Closed()
}

// claim records cl's session under identity id, or refuses the CONNECT
// (answered after the lock is released): its client id's session belongs
// to another identity, or a limit is reached.
func (h *authHook) claim(cl *mqtt.Client, id string) error {
	code, v3, refused := h.claimLocked(cl, id)
	if refused {
		return h.refuse(cl, code, v3)
	}
	return nil
}

func (h *authHook) claimLocked(cl *mqtt.Client, id string) (code, v3 packets.Code, refused bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if atomic.LoadInt64(&h.mq.Info.ClientsConnected) >= int64(h.limits.MaxClients) {
		h.stats.refusedClients.Add(1)
		countRefused(h.core, broker.ReasonTooMany)
		h.log.Warn("mqtt connect refused: too many clients", "client", cl.ID, "limit", h.limits.MaxClients)
		return packets.ErrQuotaExceeded, packets.Err3ServerUnavailable, true
	}
	prev := h.ids[cl.ID] // h.mu held: no writer
	if prev != nil {
		if !h.live(cl.ID, prev) {
			h.dropLocked(cl.ID, prev)
			prev = nil
		}
	}
	if existing, ok := h.mq.Clients.Get(cl.ID); ok && prev == nil {
		prev = h.adoptLocked(existing)
	}
	if prev != nil && prev.id != id && prev.cl.Closed() {
		if owner, owned := h.core.Auth().ClientIDOwner(cl.ID); owned && owner == id {
			// The client id is the connecting identity's name, and an
			// offline session of another identity holds it (kept from
			// before the ACL named the identity): it ends, and the owner
			// starts a new session rather than inheriting it.
			h.log.Info("mqtt session of another identity ended: the client id is the connecting identity's name", "client", cl.ID, "identity", id, "previous", prev.id)
			h.endOfflineLocked(cl.ID, prev)
			prev = nil
		}
	}
	if prev != nil && prev.id != id {
		h.stats.refusedTakeovers.Add(1)
		countRefused(h.core, broker.ReasonForbidden)
		h.log.Info("mqtt connect refused: client id belongs to another identity", "client", cl.ID, "identity", id)
		return packets.ErrNotAuthorized, packets.Err3NotAuthorized, true
	}
	key := limitKey(id, cl)
	if prev == nil {
		if h.perID[key] >= h.limits.MaxSessionsPerIdentity || h.sessions >= h.limits.MaxSessions {
			h.stats.refusedSessions.Add(1)
			countRefused(h.core, broker.ReasonTooMany)
			h.log.Warn("mqtt connect refused: too many sessions", "client", cl.ID, "identity", id, "remote", cl.Net.Remote,
				"identity_sessions", h.perID[key], "sessions", h.sessions)
			return packets.ErrQuotaExceeded, packets.Err3ServerUnavailable, true
		}
		h.perID[key]++
		h.sessions++
	} else {
		key = prev.key // counted where the session was first counted
		// The new connection's queue is counted afresh once its
		// session is established.
		h.queued.Add(prev.q.reset(nil))
	}
	h.putLocked(cl.ID, &identity{cl: cl, id: id, key: key})
	// The session store keeps the user name: a session restored after a
	// restart keeps its owner (adoptLocked).
	cl.Properties.Username = []byte(id)
	return packets.Code{}, packets.Code{}, false
}

// limitKey is what Limits.MaxSessionsPerIdentity counts a session of
// identity id, connected as cl, under: the identity, or for an anonymous
// client its source address (the HTTP side bounds anonymous clients per
// address too). Counted as one identity, all anonymous clients of a broker
// without an ACL (--dev, --allow-anonymous, loopback) shared one quota, and
// the 257th was refused. The NUL byte keeps the key apart from every
// identity name. A session restored after a restart whose address is not
// known is counted under the empty address. An anonymous key is
// canonicalised (unique.Make): the session keeps it for its life, and
// the anonymous clients of one address share one copy rather than 24
// bytes each.
func limitKey(id string, cl *mqtt.Client) string {
	if id != "" {
		return id
	}
	host := cl.Net.Remote
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	return unique.Make("\x00anonymous " + host).Value()
}

// adoptLocked records a session mochi holds that no CONNECT of this
// server claimed (restored from the session store after a restart): its
// owner is the identity its connection had, kept as the user name
// (h.mu held).
func (h *authHook) adoptLocked(cl *mqtt.Client) *identity {
	ident := &identity{cl: cl, id: string(cl.Properties.Username)}
	ident.key = limitKey(ident.id, cl)
	if held := h.ids[cl.ID]; held != nil { // h.mu held: no writer
		return held
	}
	h.putLocked(cl.ID, ident)
	h.queued.Add(ident.q.reset(cl.State.Inflight.GetAll(false)))
	h.perID[ident.key]++
	h.sessions++
	return ident
}

// adopt is adoptLocked for a client mochi holds, or nil.
func (h *authHook) adopt(cl *mqtt.Client) *identity {
	if held, ok := h.mq.Clients.Get(cl.ID); !ok || held != cl {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.adoptLocked(cl)
}

// putLocked makes ident the session state of client id cid, replacing
// any (h.mu held).
func (h *authHook) putLocked(cid string, ident *identity) {
	h.idsMu.Lock()
	old := h.ids[cid]
	if h.ids == nil {
		h.ids = make(map[string]*identity)
	}
	h.ids[cid] = ident
	h.idsMu.Unlock()
	if old != nil {
		old.gone.Store(true)
	}
}

// dropLocked forgets the session state ident of cid (h.mu held).
func (h *authHook) dropLocked(cid string, ident *identity) {
	h.idsMu.Lock()
	held := h.ids[cid] == ident
	if held {
		delete(h.ids, cid)
	}
	h.idsMu.Unlock()
	if !held {
		return
	}
	ident.gone.Store(true)
	h.queued.Add(ident.q.reset(nil))
	if h.perID[ident.key]--; h.perID[ident.key] <= 0 {
		delete(h.perID, ident.key)
	}
	h.sessions--
}

// endOfflineLocked ends the offline session ident of client id cid, as
// sweep ends an expired one. h.mu is held.
func (h *authHook) endOfflineLocked(cid string, ident *identity) {
	if cl, ok := h.mq.Clients.Get(cid); ok && cl == ident.cl {
		h.mq.UnsubscribeClient(cl)
		cl.ClearInflights()
		h.mq.Clients.Delete(cid)
	}
	h.dropLocked(cid, ident)
}

// endSession forgets the session of cl unless a newer connection of the
// same client id has replaced it.
func (h *authHook) endSession(cl *mqtt.Client) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if ident := h.owner(cl); ident != nil {
		h.dropLocked(cl.ID, ident)
	}
}

// sweep ends the anonymous offline sessions older than
// Limits.AnonymousSessionExpiry at now, and forgets claims of connections
// that never became sessions.
func (h *authHook) sweep(now time.Time) {
	limit := now.Add(-h.limits.AnonymousSessionExpiry).Unix()
	h.mu.Lock()
	defer h.mu.Unlock()
	for cid, cl := range h.mq.Clients.GetAll() {
		if h.ids[cid] == nil {
			h.adoptLocked(cl)
		}
	}
	// h.mu held: ids changes only here (dropLocked deletes, which a range
	// allows).
	for cid, ident := range h.ids {
		cl, ok := h.mq.Clients.Get(cid)
		if !ok {
			if ident.cl.Closed() {
				h.dropLocked(cid, ident)
			}
			continue
		}
		if ident.id != "" || cl != ident.cl {
			continue
		}
		if st := cl.StopTime(); st == 0 || st > limit || !cl.Closed() {
			continue
		}
		h.mq.UnsubscribeClient(cl)
		cl.ClearInflights()
		h.mq.Clients.Delete(cid)
		h.dropLocked(cid, ident)
		h.stats.expiredSessions.Add(1)
	}
}

// OnSessionEstablish drops, before mochi hands an existing session to the
// new connection, the queued messages the connecting identity may not
// receive (the ACL may have changed since they were queued): mochi resends
// an inherited session's queue without asking the ACL.
func (h *authHook) OnSessionEstablish(cl *mqtt.Client, pk packets.Packet) {
	if pk.Connect.Clean {
		return
	}
	existing, ok := h.mq.Clients.Get(cl.ID)
	ident := h.owner(cl)
	if !ok || existing == cl || ident == nil {
		return
	}
	a := h.core.Auth()
	for _, m := range existing.State.Inflight.GetAll(false) {
		if m.FixedHeader.Type != packets.Publish || allow(a, ident.id, auth.Subscribe, m.TopicName) {
			continue
		}
		if existing.State.Inflight.Delete(m.PacketID) {
			atomic.AddInt64(&h.mq.Info.Inflight, -1)
			h.stats.droppedResends.Add(1)
		}
	}
}

// OnSessionEstablished counts the queue the session holds now (inherited
// messages included).
func (h *authHook) OnSessionEstablished(cl *mqtt.Client, _ packets.Packet) {
	if ident := h.owner(cl); ident != nil {
		h.queued.Add(ident.q.reset(cl.State.Inflight.GetAll(false)))
	}
}

// OnQosPublish counts a message queued for a session.
func (h *authHook) OnQosPublish(cl *mqtt.Client, pk packets.Packet, _ int64, _ int) {
	if pk.FixedHeader.Type != packets.Publish {
		return
	}
	if ident := h.owner(cl); ident != nil {
		h.queued.Add(ident.q.add(pk.PacketID, msgSize(pk)))
	}
}

// OnQosComplete uncounts an acknowledged message.
func (h *authHook) OnQosComplete(cl *mqtt.Client, pk packets.Packet) {
	if ident := h.owner(cl); ident != nil {
		h.queued.Add(ident.q.remove(pk.PacketID))
	}
}

// OnQosDropped uncounts an abandoned message.
func (h *authHook) OnQosDropped(cl *mqtt.Client, pk packets.Packet) {
	h.OnQosComplete(cl, pk)
}

func msgSize(pk packets.Packet) int64 { return int64(len(pk.TopicName) + len(pk.Payload)) }

// queueAcct counts the bytes of the messages one session holds, by packet
// id (mochi announces a message again when it resends it).
//
// A session mostly holds a message or two: the first queueSmall are kept
// in an array searched in place, the rest in a map. A map alone cost a
// hash insert and delete for every delivery and its PUBACK (about 2.5 %
// of the broker's CPU at 10,000 MQTT/TCP subscribers; docs/BENCH.md, "One
// processor while the load fits one), and about 200 bytes for every
// session that was ever sent a message at QoS 1 or 2.
type queueAcct struct {
	mu    sync.Mutex
	small [queueSmall]queueEntry // id 0: free (MQTT packet ids start at 1)
	sizes map[uint16]int64       // beyond small
	bytes atomic.Int64
}

// queueSmall is how many messages a session's queueAcct keeps without a
// map: two entries of 8 bytes keep an identity in the 112-byte size class.
const queueSmall = 2

type queueEntry struct {
	id uint16
	n  int32
}

// set counts message id at n bytes and returns the change; q.mu is held.
func (q *queueAcct) set(id uint16, n int64) int64 {
	if id != 0 {
		for i := range q.small {
			if e := &q.small[i]; e.id == id {
				d := n - int64(e.n)
				if n > math.MaxInt32 { // a size the entry cannot hold: to the map
					*e = queueEntry{}
					q.mapSet(id, n)
				} else {
					e.n = int32(n)
				}
				return d
			}
		}
	}
	if old, ok := q.sizes[id]; ok {
		q.sizes[id] = n
		return n - old
	}
	if id != 0 && n <= math.MaxInt32 {
		for i := range q.small {
			if e := &q.small[i]; e.id == 0 {
				*e = queueEntry{id: id, n: int32(n)}
				return n
			}
		}
	}
	q.mapSet(id, n)
	return n
}

func (q *queueAcct) mapSet(id uint16, n int64) {
	if q.sizes == nil {
		q.sizes = map[uint16]int64{}
	}
	q.sizes[id] = n
}

// add counts message id of n bytes and returns the change in bytes.
func (q *queueAcct) add(id uint16, n int64) int64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	d := q.set(id, n)
	q.bytes.Add(d)
	return d
}

// remove uncounts message id and returns the change in bytes.
func (q *queueAcct) remove(id uint16) int64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	if id != 0 {
		for i := range q.small {
			if e := &q.small[i]; e.id == id {
				n := int64(e.n)
				*e = queueEntry{}
				q.bytes.Add(-n)
				return -n
			}
		}
	}
	n, ok := q.sizes[id]
	if !ok {
		return 0
	}
	delete(q.sizes, id)
	q.bytes.Add(-n)
	return -n
}

// reset counts exactly the publishes in held and returns the change in
// bytes.
func (q *queueAcct) reset(held []packets.Packet) int64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	old := q.bytes.Load()
	q.small, q.sizes = [queueSmall]queueEntry{}, nil
	var total int64
	for _, pk := range held {
		if pk.FixedHeader.Type != packets.Publish {
			continue
		}
		total += q.set(pk.PacketID, msgSize(pk))
	}
	q.bytes.Store(total)
	return total - old
}
