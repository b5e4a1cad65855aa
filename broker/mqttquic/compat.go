package mqttquic

import (
	"bytes"
	"errors"
	"net"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/listeners"
	"github.com/mochi-mqtt/server/v2/packets"
)

// mochi acknowledges a successful QoS 1 publish with the reason code it
// finds in packets.QosCodes[1], which is 0x01 ("Granted QoS 1", a SUBACK
// code). A PUBACK's success code is 0x00 (MQTT 5 3.4.2.1); paho-mqtt
// (Python) fails on 0x01 and hangs every later publish. The only hook that
// could change the acknowledgement is OnPacketEncode, which mochi runs for
// every packet written, each delivery included; the table's one use in
// mochi v2.7.9 is that acknowledgement (server.go, processPublish), so the
// entry is set here instead, before any server exists.
func init() {
	packets.QosCodes[1] = packets.CodeSuccess
}

// compatHook mends what clients observe of mochi where MQTT 3.1.1 or 5.0
// asks for something else (docs/mqtt.md's conformance table lists them):
//
//   - a PUBLISH mochi would drop without a word (a topic name under $SYS or
//     $share; mochi answers neither PUBACK nor PUBREC, and the publisher
//     waits for ever) is refused as every other refused publish is
//     (answerRefusal);
//   - a QoS 2 PUBLISH re-sent while its PUBREC is outstanding is answered
//     with PUBREC 0x00 and not delivered again (MQTT-4.3.3-10; mochi
//     answers 0x91, which fails the message at the client);
//   - a client that reconnects right after a session that ended with its
//     connection gets a new session, not that one (awaitSessionEnd);
//   - the client's packet identifiers and the server's are kept apart
//     (see idState): mochi shares one map between them;
//   - a PUBLISH that names its topic by alias only has it resolved before
//     mochi's ACL check (which judged the empty name), and one with an
//     alias never set is a protocol error (DISCONNECT 0x82);
//   - CONNACK announces the Maximum Packet Size and the Topic Alias Maximum
//     the server enforces (mochi enforces both but announces neither, so a
//     client could not know them);
//   - a QoS 1 or 2 message larger than a client's Maximum Packet Size is
//     dropped for that client as if it had been delivered (MQTT-3.1.2-25);
//     mochi does not send it either, but keeps it in flight for ever, so
//     it took one of the client's Receive Maximum slots each time;
//   - a QoS 1 or 2 message that waited for flow-control credit (the
//     client's Receive Maximum) stays in flight once sent: mochi removes it
//     from the session when it sends it, so the client's PUBACK returned
//     no credit (after Receive Maximum such messages the client got
//     nothing more, MQTT 5 4.9) and a reconnect would not resend it
//     (MQTT-4.4.0-1); the hook puts it back (OnPacketSent, then the
//     client's next packet or its disconnect);
//   - messages waiting in a session go out in the order they were
//     published (MQTT-4.6.0-6), after waiting for credit and on a
//     reconnect: mochi orders them by uint16(Created), Created being a
//     time in seconds, so within a second in any order; the hook renumbers
//     Created in packet identifier order (identifiers are handed out in
//     publish order) before mochi picks the next one (orderInflight);
//   - PUBLISH packets keep their user properties for clients that asked for
//     no problem information: MQTT 5 (3.1.2.11.7) restricts that flag to
//     other packet types, but mochi strips user properties from every
//     packet, which would lose the "quiot-time" send stamp.
//
// mochi runs OnPacketEncode for every packet written (each delivery), so
// the hook provides it only while a CONNACK is due or once a client has
// asked for no problem information or announced a Maximum Packet Size
// (sticky: most clients never do; quiot's does neither).
type compatHook struct {
	mqtt.HookBase
	mq                *mqtt.Server
	maxPacketSize     uint32
	topicAliasMaximum uint16

	needed     atomic.Bool  // a client asked for no problem information or has a maximum packet size
	flowed     atomic.Bool  // a client announced a Receive Maximum
	sentHeld   sync.Map     // *mqtt.Client -> *[]packets.Packet: held messages sent, to put back in flight
	connacking atomic.Int32 // CONNACKs due (entries in pending)
	pending    sync.Map     // *mqtt.Client -> struct{}: CONNACK due
	ending     sync.Map     // *mqtt.Client -> struct{}: sent DISCONNECT, its session ends with the connection
	ids        sync.Map     // *mqtt.Client -> *idState: packet identifiers used by both sides
	idClients  atomic.Int32 // entries in ids
	// conns are the connections mochi is handling (sessionEnds) and
	// latest each client id's latest connection with a session, both
	// under connsMu. A map under a lock holds an entry in about 55 bytes,
	// a sync.Map in about 100 (docs/BENCH.md, "Heap per idle client, site
	// by site"); each is touched about twice per connection.
	connsMu sync.Mutex
	conns   map[net.Conn]*connTrack
	latest  map[string]*connTrack
	pre     *preConnect // connections without CONNECT yet (sessionEnds)

	// gate orders connections being established against Server.Close
	// (enter, shut).
	gate    sync.Mutex
	closing bool // Close has begun: no connection is handed to mochi any more

	// Session takeovers (takeover.go).
	takeovers  sync.Map      // old *mqtt.Client -> *takeover
	successors sync.Map      // new *mqtt.Client -> *takeover, until completed
	qosHooks   []qosNotifier // told of messages adopted after a resend
	adopted    atomic.Int64  // late messages handed to the session's new client
	lateLost   atomic.Int64  // late messages that could not be handed on
}

// connTrack follows one connection through mochi's handling of it.
type connTrack struct {
	listener string       // the id of the listener that accepted it
	conn     net.Conn     // the connection as mochi reads it (watchPacketSize)
	cl       *mqtt.Client // set when its session is established (the connection's own goroutine)
	// done holds the channel closed once mochi is done with the
	// connection (ended), made only when a takeover waits for it; it
	// holds &closedDone once the connection has ended. A channel made
	// with every connection took 96 bytes (docs/BENCH.md, "Heap per idle
	// client, site by site").
	done atomic.Pointer[chan struct{}]
	// pre is the connection's place among those without CONNECT
	// (preConnect), until releasePre ends it and drops it: kept for the
	// connection's life it took 64 bytes (docs/BENCH.md, "Heap per idle
	// client, the second pass").
	pre atomic.Pointer[pending]
}

// releasePre ends the connection's place among those without CONNECT
// (idempotent) and drops it.
func (t *connTrack) releasePre() {
	if w := t.pre.Swap(nil); w != nil {
		w.release()
	}
}

// closedDone is the closed channel of every connection that has ended
// (connTrack.done).
var closedDone = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// ended returns a channel closed once mochi is done with the connection.
func (t *connTrack) ended() <-chan struct{} {
	if p := t.done.Load(); p != nil {
		return *p
	}
	ch := make(chan struct{})
	if t.done.CompareAndSwap(nil, &ch) {
		return ch
	}
	return *t.done.Load()
}

// end closes the channel ended returned, if any, and makes later calls
// of ended return a closed one.
func (t *connTrack) end() {
	if p := t.done.Swap(&closedDone); p != nil && p != &closedDone {
		close(*p)
	}
}

// sessionEndWait bounds awaitSessionEnd; it only guards against a clean-up
// that hangs.
const sessionEndWait = 30 * time.Second

// sessionEnds wraps a listener so that the compat hook learns when mochi
// is done with each connection: attachClient has returned, so a session
// that ended with the connection is forgotten by then (awaitSessionEnd).
type sessionEnds struct {
	listeners.Listener
	h *compatHook
}

// Close closes the wrapped listener, its clients disconnected by
// closeListenerClients instead of the callback mochi passes. mochi v2.7.9's
// (Server.closeListenerClients) reads the client table with
// Clients.GetByListener, which takes the table's read lock twice (it calls
// Len under its RLock): a client added or removed in between (a writer
// waiting for the lock) blocks the second RLock, and the close waits for
// ever. Seen as a make test hang: Server.Close in a test's cleanup against
// attachClient's Clients.Delete of a WebSocket client that was ending.
//
// When the server closes, the connections of the listener that mochi is
// still handling but whose client closeListenerClients did not see (not
// in mochi's client table yet, as one that arrived during the close) are
// closed too: mochi's Close waits for every connection it handles to end,
// and such a client would otherwise hold it until the client left.
func (l sessionEnds) Close(listeners.CloseFn) {
	l.Listener.Close(l.h.closeListenerClients)
	if !l.h.isClosing() {
		return
	}
	id := l.ID()
	for _, c := range l.h.connsOf(id) {
		_ = c.Close()
	}
	if testHookSwept != nil {
		testHookSwept()
	}
}

// closeListenerClients disconnects the clients of listener id (as mochi's
// own does: DISCONNECT 0x8B, server shutting down), reading the client
// table under one lock (GetAll).
func (h *compatHook) closeListenerClients(id string) {
	for _, cl := range h.mq.Clients.GetAll() {
		if cl.Net.Listener == id && !cl.Closed() {
			_ = h.mq.DisconnectClient(cl, packets.ErrServerShuttingDown)
		}
	}
}

// enter counts a connection about to be handed to mochi in mochi's client
// wait group (Listeners.ClientsWg), or reports false once Close has begun.
// mochi v2.7.9's attachClient calls ClientsWg.Add(1) on the connection's
// goroutine while Server.Close may already be in ClientsWg.Wait: an Add
// from zero concurrent with Wait, which the race detector reports (seen in
// a fresh-clone make test under load: a test's cleanup closing the server
// while a client connected). Holding our own count from before
// establishing until mochi is done keeps the group above zero whenever
// mochi adds, and shut stops new ones before Wait can begin.
func (h *compatHook) enter() bool {
	h.gate.Lock()
	defer h.gate.Unlock()
	if h.closing {
		return false
	}
	h.mq.Listeners.ClientsWg.Add(1)
	return true
}

// leave ends what enter counted.
func (h *compatHook) leave() { h.mq.Listeners.ClientsWg.Done() }

// shut makes enter refuse every later connection; Server.Close calls it
// before mochi's Close.
func (h *compatHook) shut() {
	h.gate.Lock()
	h.closing = true
	h.gate.Unlock()
}

// isClosing reports whether shut was called.
func (h *compatHook) isClosing() bool {
	h.gate.Lock()
	defer h.gate.Unlock()
	return h.closing
}

// handling is the number of connections mochi is handling.
func (h *compatHook) handling() int {
	h.connsMu.Lock()
	defer h.connsMu.Unlock()
	return len(h.conns)
}

// connsOf returns the connections of listener id mochi is handling.
func (h *compatHook) connsOf(id string) []net.Conn {
	h.connsMu.Lock()
	defer h.connsMu.Unlock()
	var cs []net.Conn
	for c, t := range h.conns {
		if t.listener == id {
			cs = append(cs, c)
		}
	}
	return cs
}

// trackOf returns the tracking of connection c, or nil if mochi is not
// handling it.
func (h *compatHook) trackOf(c net.Conn) *connTrack {
	h.connsMu.Lock()
	defer h.connsMu.Unlock()
	return h.conns[c]
}

// errClosing refuses a connection accepted while the server closes.
var errClosing = errors.New("mqtt server closing")

// Serve serves the wrapped listener, tracking each connection.
//
// The function it passes stays on the stack of the connection's goroutine
// while mochi reads from the connection, for the life of the connection:
// it does its work in track and untrack so its frame stays small, and
// with it the resting stack, which the garbage collector halves to 4 KiB
// only when under 2 KiB of it is in use (docs/BENCH.md).
func (l sessionEnds) Serve(establish listeners.EstablishFn) {
	h := l.h
	l.Listener.Serve(func(id string, c net.Conn) error {
		t, err := h.track(id, c)
		if err != nil {
			return err
		}
		err = establish(id, t.conn)
		if c, ok := err.(listeners.Continued); ok {
			// mochi's poller reads the client (third_party/mochi/QUIOT.md,
			// change 20): it is done with the connection when the client
			// ends, not now.
			c.Then(func(err error) error { h.untrack(t); return err })
			return err
		}
		h.untrack(t)
		return err
	})
}

// track admits a connection accepted by listener id and tracks it while
// mochi handles it (untrack ends that); an error refuses it, closed.
//
//go:noinline
func (h *compatHook) track(id string, c net.Conn) (*connTrack, error) {
	if !h.enter() {
		_ = c.Close()
		return nil, errClosing
	}
	c = watchPacketSize(c, h.maxPacketSize) // disconnect.go
	release, err := h.pre.admit(c)
	if err != nil {
		_ = c.Close()
		h.leave()
		return nil, err
	}
	t := &connTrack{listener: id, conn: c}
	t.pre.Store(release)
	if testHookTrack != nil {
		testHookTrack()
	}
	h.connsMu.Lock()
	if h.conns == nil {
		h.conns = make(map[net.Conn]*connTrack)
	}
	h.conns[c] = t
	h.connsMu.Unlock()
	// Close may have begun after enter and swept the connections before
	// this one was stored (sessionEnds.Close): close it here, or mochi's
	// Close waits for it until the client leaves or its keep-alive runs
	// out (90 s in a make test under -race). Either the sweep sees it
	// stored, or this sees the close (shut comes before the sweep).
	if h.isClosing() {
		_ = c.Close()
	}
	return t, nil
}

// untrack ends what track began, once mochi is done with the connection.
//
//go:noinline
func (h *compatHook) untrack(t *connTrack) {
	t.releasePre()
	h.connsMu.Lock()
	delete(h.conns, t.conn)
	h.connsMu.Unlock()
	if t.cl != nil {
		h.completeTakeover(t.cl) // if its CONNACK never went out
		h.connsMu.Lock()
		if h.latest[t.cl.ID] == t {
			delete(h.latest, t.cl.ID)
		}
		h.connsMu.Unlock()
	}
	t.end()
	h.leave()
}

// ID names the hook.
func (h *compatHook) ID() string { return "quiot-compat" }

// Provides reports the events the hook handles.
func (h *compatHook) Provides(b byte) bool {
	switch b {
	case mqtt.OnConnect, mqtt.OnSessionEstablish, mqtt.OnSessionEstablished, mqtt.OnPacketRead, mqtt.OnDisconnect,
		mqtt.OnQosPublish:
		return true
	case mqtt.OnPacketEncode:
		return h.needed.Load() || h.connacking.Load() > 0
	case mqtt.OnPacketSent:
		return h.flowed.Load()
	case mqtt.OnPacketProcessed:
		return h.idClients.Load() > 0
	}
	return false
}

// OnConnect turns server-to-client topic aliases off for sessions that
// may outlive the connection, the encoding hook on when a client asks for
// no problem information or announces a Maximum Packet Size, and the
// sent-message hook when it announces a Receive Maximum (before anything
// is written to it).
func (h *compatHook) OnConnect(cl *mqtt.Client, _ packets.Packet) error {
	if t := h.trackOf(cl.Net.Conn); t != nil {
		t.releasePre() // CONNECT read: mochi's keepalive deadline follows
	}
	// A CONNECT from 0-RTT data takes over a live session only once the
	// handshake has shown it is no replay (early.go).
	if handshakePending(cl) && liveSession(h.mq, cl) && !awaitHandshake(cl) {
		return packets.ErrServerUnavailable
	}
	if cl.Properties.ProtocolVersion == 5 && cl.Properties.Props().SessionExpiryInterval > 0 {
		// A session that may outlive its connection gets no topic
		// aliases from the server: mochi queues a delivery as sent (with
		// the alias and no topic name) and resends it so on the next
		// connection, where the alias means nothing (aliases last for
		// one connection, MQTT 5 3.3.2.3.4): the client closes for the
		// protocol error and meets the same message at every reconnect.
		// The server need not use aliases at all; sessions that end
		// with their connection keep them.
		cl.Properties.EditProps().TopicAliasMaximum = 0
	}
	if p := cl.Properties.Props(); p.RequestProblemInfoFlag && p.RequestProblemInfo == 0 || p.MaximumPacketSize > 0 {
		h.needed.Store(true)
	}
	if cl.Properties.Props().ReceiveMaximum > 0 {
		h.flowed.Store(true)
	}
	return nil
}

// OnPacketSent notes a QoS 1 or 2 message that had waited for credit
// (mochi marks it with Expiry -1, sends it from the client's reading
// goroutine and then deletes it from the session).
func (h *compatHook) OnPacketSent(cl *mqtt.Client, pk packets.Packet, _ []byte) {
	if pk.FixedHeader.Type != packets.Publish || pk.FixedHeader.Qos == 0 || pk.Expiry >= 0 {
		return
	}
	v, _ := h.sentHeld.LoadOrStore(cl, new([]packets.Packet))
	l := v.(*[]packets.Packet)
	*l = append(*l, pk)
}

// restoreHeld puts the held messages sent to cl back in flight.
func (h *compatHook) restoreHeld(cl *mqtt.Client) {
	v, ok := h.sentHeld.LoadAndDelete(cl)
	if !ok {
		return
	}
	for _, pk := range *v.(*[]packets.Packet) {
		pk.Expiry = 0
		if cl.State.Inflight.Set(pk) {
			atomic.AddInt64(&h.mq.Info.Inflight, 1)
		}
	}
}

// OnDisconnect keeps held messages sent, and deliveries and QoS 2 states
// set aside, in the session (resent when the client returns), and forgets
// the client's marks.
func (h *compatHook) OnDisconnect(cl *mqtt.Client, _ error, _ bool) {
	h.restoreHeld(cl)
	h.unmark(cl)
	h.ending.Delete(cl) // Closed() holds from here on
	if v, ok := h.ids.Load(cl); ok {
		h.dropIDState(cl, v.(*idState), true)
	}
}

// OnSessionEstablish (authenticated, CONNACK next) waits for the end of a
// session that ended with its connection, notes a session takeover
// (takeover.go) and marks the client's CONNACK (limits' properties for
// MQTT 5, the session's order for all).
func (h *compatHook) OnSessionEstablish(cl *mqtt.Client, pk packets.Packet) {
	h.awaitSessionEnd(cl)
	h.noteTakeover(cl, pk)
	if _, loaded := h.pending.LoadOrStore(cl, struct{}{}); !loaded {
		h.connacking.Add(1)
	}
}

// awaitSessionEnd waits, before cl's session is established, until mochi
// is done with the previous connection of cl's client id if that
// connection's session ended with it (MQTT 5 Session Expiry 0, 3.1.1
// Clean Session 1). mochi closes the connection first and forgets the
// session a moment later, by client id: its subscriptions and its entry in
// the client table. A client reconnecting in between got that session back
// (Session Present 1, its subscriptions) instead of a new one
// (MQTT-3.1.2-23), or, once mochi's expiry sweep had already dropped the
// old client from the table, a new session that the end of the clean-up
// then forgot (no longer held, subscriptions gone). The wait is for the
// event (sessionEnds), bounded only in case the clean-up hangs.
func (h *compatHook) awaitSessionEnd(cl *mqtt.Client) {
	cur := h.trackOf(cl.Net.Conn)
	if cur != nil {
		cur.cl = cl
	}
	h.connsMu.Lock()
	prev := h.latest[cl.ID]
	h.connsMu.Unlock()
	if prev != nil {
		old := prev.cl
		if _, disconnecting := h.ending.Load(old); disconnecting || old.Closed() && endsWithConnection(old) {
			t := time.NewTimer(sessionEndWait)
			select {
			case <-prev.ended():
			case <-t.C:
			}
			t.Stop()
		}
	}
	if cur != nil {
		h.connsMu.Lock()
		if h.latest == nil {
			h.latest = make(map[string]*connTrack)
		}
		h.latest[cl.ID] = cur
		h.connsMu.Unlock()
	}
}

// endsWithConnection reports whether cl's session ends when its connection
// does (mochi's rule in attachClient).
func endsWithConnection(cl *mqtt.Client) bool {
	if cl.Properties.ProtocolVersion == 5 {
		return cl.Properties.Props().SessionExpiryInterval == 0
	}
	return cl.Properties.Clean
}

// OnSessionEstablished (CONNACK written, a resumed session's messages
// resent) forgets a mark its CONNACK did not consume, and puts the resent
// messages that had waited for credit back in flight like the others.
// The fork takes the resent messages from the client's flow-control
// credit before the client can get a delivery (third_party/mochi/QUIOT.md,
// change 16; it was done here, after the resend, and a message published
// meanwhile could go out on the whole Receive Maximum).
func (h *compatHook) OnSessionEstablished(cl *mqtt.Client, _ packets.Packet) {
	h.unmark(cl)
	if cl.Properties.Props().ReceiveMaximum == 0 || cl.State.Inflight.Len() == 0 {
		return
	}
	h.restoreHeld(cl)
}

// unstall gives back the send quota of a client whose deliveries wait
// for its Receive Maximum with none in flight. mochi decides that a
// delivery waits from the quota it read before it put the delivery in
// flight; credit returned in between (a PUBACK or PUBCOMP, or a delivery
// over the client's Maximum Packet Size completed unsent) finds nothing
// waiting yet, and the delivery then waits with no credit left and no
// acknowledgement to come (TestSendQuotaLostWakeup). With nothing in
// flight the whole Receive Maximum is free. It runs on the client's
// reading goroutine before mochi processes the packet, and mochi sends
// the next waiting delivery right after it: so the delivery waits at most
// until the client's next packet (its PINGREQ at the latest).
func unstall(cl *mqtt.Client) {
	rm := cl.Properties.Props().ReceiveMaximum
	if rm == 0 || cl.State.Inflight.Len() == 0 {
		return
	}
	held := false
	for _, pk := range cl.State.Inflight.GetAll(false) {
		switch {
		case pk.FixedHeader.Type == packets.Publish && pk.Expiry < 0:
			held = true
		case isOutbound(pk):
			return // its acknowledgement returns credit and sends the next
		}
	}
	if held {
		cl.State.Inflight.ResetSendQuota(int32(rm))
	}
}

func (h *compatHook) unmark(cl *mqtt.Client) bool {
	if _, ok := h.pending.LoadAndDelete(cl); ok {
		h.connacking.Add(-1)
		return true
	}
	return false
}

// OnPacketEncode adds the limits to a marked CONNACK and re-allows
// properties on outgoing PUBLISH packets.
func (h *compatHook) OnPacketEncode(cl *mqtt.Client, pk packets.Packet) packets.Packet {
	switch pk.FixedHeader.Type {
	case packets.Publish:
		pk.Mods.DisallowProblemInfo = false
		if pk.FixedHeader.Qos > 0 && pk.Mods.MaxSize > 0 && publishSizeBound(pk) > pk.Mods.MaxSize && tooLarge(pk) {
			// mochi will not write it (WritePacket checks the size after
			// this hook) and would keep it in flight: complete it here.
			if testHookTooLarge != nil {
				defer testHookTooLarge(cl)()
			}
			if cl.State.Inflight.Delete(pk.PacketID) {
				atomic.AddInt64(&h.mq.Info.Inflight, -1)
				cl.State.Inflight.IncreaseSendQuota()
			}
			atomic.AddInt64(&h.mq.Info.MessagesDropped, 1)
		}
	case packets.Connack:
		if h.unmark(cl) && pk.ReasonCode == packets.CodeSuccess.Code {
			if cl.Properties.ProtocolVersion == 5 {
				pk.Properties.MaximumPacketSize = h.maxPacketSize
				pk.Properties.TopicAliasMaximum = h.topicAliasMaximum
			}
			// mochi has handed cl the session: messages queued on the
			// old client after the copy join the queue (takeover.go),
			// which is resent right after CONNACK.
			h.completeTakeover(cl)
			orderInflight(cl, false)
		}
	}
	return pk
}

// orderInflight renumbers the Created field of cl's QoS 1 and 2 messages in
// flight (only those waiting for credit if held) so that mochi's order,
// uint16(Created), is the order they were published in. That is packet
// identifier order, read on the circle of identifiers: mochi hands them out
// increasing and wrapping, and those in flight span less than half of it
// (at most Capabilities.MaximumInflight), so the first one follows the
// widest gap. With MaximumMessageExpiryInterval 0 (New) mochi uses Created
// for nothing else.
func orderInflight(cl *mqtt.Client, held bool) {
	all := cl.State.Inflight.GetAll(held)
	pubs := all[:0]
	for _, pk := range all {
		if pk.FixedHeader.Type == packets.Publish {
			pubs = append(pubs, pk)
		}
	}
	if len(pubs) < 2 {
		return
	}
	sort.Slice(pubs, func(i, j int) bool { return pubs[i].PacketID < pubs[j].PacketID })
	start, gap := 0, int(pubs[0].PacketID)+65536-int(pubs[len(pubs)-1].PacketID)
	for i := 1; i < len(pubs); i++ {
		if g := int(pubs[i].PacketID) - int(pubs[i-1].PacketID); g > gap {
			start, gap = i, g
		}
	}
	for i := range pubs {
		pk := pubs[(start+i)%len(pubs)]
		if want := int64(i + 1); pk.Created != want {
			pk.Created = want
			cl.State.Inflight.Set(pk)
		}
	}
}

// publishSizeBound is at least the encoded size of pk (cheap: no
// encoding).
func publishSizeBound(pk packets.Packet) uint32 {
	n := 5 + 2 + len(pk.TopicName) + 2 + len(pk.Payload) + 64 // fixed header, topic, id, payload, fixed-size properties
	p := pk.Properties
	n += len(p.ContentType) + len(p.ResponseTopic) + len(p.CorrelationData) + 5*len(p.SubscriptionIdentifier) + 12
	for _, u := range p.User {
		n += 5 + len(u.Key) + len(u.Val)
	}
	return uint32(n)
}

// tooLarge reports whether pk, encoded as mochi will encode it, exceeds
// pk.Mods.MaxSize.
func tooLarge(pk packets.Packet) bool {
	var buf bytes.Buffer
	if err := pk.PublishEncode(&buf); err != nil {
		return false
	}
	return uint32(buf.Len()) > pk.Mods.MaxSize
}

// OnPacketRead answers the PUBLISH packets mochi would leave unanswered.
// It refuses (which closes the connection) only a packet from 0-RTT data
// whose handshake never completed: mochi otherwise processes it as usual.
func (h *compatHook) OnPacketRead(cl *mqtt.Client, pk packets.Packet) (packets.Packet, error) {
	// From 0-RTT data only CONNECT (checked in OnConnect), PUBLISH
	// (checked in the bridge's OnPublish) and PINGREQ are served before
	// the handshake completes (early.go); a connection whose handshake
	// fails ends here.
	if t := pk.FixedHeader.Type; t != packets.Connect && t != packets.Publish && t != packets.Pingreq && handshakePending(cl) && !awaitHandshake(cl) {
		return pk, packets.ErrServerUnavailable
	}
	if h.flowed.Load() {
		h.restoreHeld(cl) // before this packet (perhaps their PUBACK) is processed
		unstall(cl)
		if t := pk.FixedHeader.Type; cl.Properties.Props().ReceiveMaximum > 0 && (t == packets.Puback || t == packets.Pubcomp) {
			orderInflight(cl, true) // mochi may send the next held message after this one
		}
	}
	if pk.FixedHeader.Type == packets.Pubrel {
		h.unparkForPubrel(cl, pk.PacketID)
		return pk, nil
	}
	if pk.FixedHeader.Type == packets.Disconnect {
		// mochi closes the connection before it forgets the session;
		// awaitSessionEnd needs to know from the start.
		ends := cl.Properties.Clean
		if cl.Properties.ProtocolVersion == 5 {
			ends = cl.Properties.Props().SessionExpiryInterval == 0
			if pk.Properties.SessionExpiryIntervalFlag {
				ends = pk.Properties.SessionExpiryInterval == 0
			}
		}
		if ends {
			h.ending.Store(cl, struct{}{})
		}
		return pk, nil
	}
	if t := pk.FixedHeader.Type; (t == packets.Subscribe || t == packets.Unsubscribe) && !cl.Net.Inline {
		// mochi refuses a SUBSCRIBE or UNSUBSCRIBE whose identifier a
		// delivery to the client holds (0x91 in every SUBACK/UNSUBACK
		// code), though the two are separate spaces: a client resuming
		// a session with queued messages had its first SUBSCRIBE refused.
		// The delivery is set aside while mochi processes the packet
		// (OnPacketProcessed puts it back).
		if out, ok := cl.State.Inflight.Get(pk.PacketID); ok && isOutbound(out) {
			h.idState(cl).saved = &out
			h.deleteInflight(cl, pk.PacketID)
		}
		return pk, nil
	}
	if pk.FixedHeader.Type != packets.Publish || cl.Net.Inline {
		return pk, nil
	}
	if pk.PublishValidate(h.topicAliasMaximum) != packets.CodeSuccess {
		return pk, nil // mochi disconnects for the protocol error
	}
	if pk.Properties.TopicAliasFlag && pk.TopicName == "" {
		// mochi resolves the alias only after its ACL check, which then
		// judged the empty topic name; an alias never set gave an empty
		// topic name instead of a protocol error (MQTT 5 3.3.2.3.4).
		pk.TopicName = cl.State.TopicAliases.Inbound.Set(pk.Properties.TopicAlias, "")
		if pk.TopicName == "" {
			_ = cl.WritePacket(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Disconnect},
				ReasonCode: packets.ErrProtocolViolation.Code, Properties: packets.Properties{ReasonString: "topic alias not set"}})
			return pk, packets.ErrRejectPacket
		}
	}
	if pk.FixedHeader.Qos == 0 {
		return pk, nil
	}
	if !mqtt.IsValidFilter(pk.TopicName, true) {
		// mochi ignores the packet (processPublish returns before any
		// acknowledgement); answer it here.
		answerRefusal(cl, pk, packets.Code{Code: packets.ErrNotAuthorized.Code, Reason: "topic name reserved for the broker"})
		return pk, nil
	}
	if pk.FixedHeader.Qos == 2 {
		in, ok := cl.State.Inflight.Get(pk.PacketID)
		if ok && in.FixedHeader.Type == packets.Pubrec && in.ReasonCode < packets.ErrUnspecifiedError.Code || h.parkedHas(cl, pk.PacketID) {
			// A re-sent QoS 2 PUBLISH (its PUBREC was lost): acknowledge
			// again and let mochi ignore it (a $SYS topic name is the one
			// thing processPublish drops before any acknowledgement).
			_ = cl.WritePacket(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pubrec}, PacketID: pk.PacketID})
			pk.TopicName = mqtt.SysPrefix + "/quiot/duplicate"
			pk.Properties.TopicAlias, pk.Properties.TopicAliasFlag = 0, false
			return pk, nil
		}
	}
	if out, ok := cl.State.Inflight.Get(pk.PacketID); ok && isOutbound(out) {
		// mochi will delete this delivery from the session (it takes the
		// identifier for the client's own); OnPacketProcessed puts it back.
		h.idState(cl).saved = &out
	}
	return pk, nil
}

// Packet identifiers: the client's (its publishes) and the server's (its
// deliveries) are separate spaces, but mochi keeps both in one map per
// session (Inflight). The hook keeps them apart: a delivery whose
// identifier a client's publish reuses is put back after mochi processed
// the publish, and the client's QoS 2 state (PUBREC awaiting PUBREL) that
// would then share the slot is parked beside the map until its PUBREL
// comes. All of it runs in the client's reading goroutine (OnPacketRead,
// OnPacketProcessed, OnDisconnect), so idState needs no lock. Known gap: a
// session taken over by a new connection while a QoS 2 state is parked
// loses that state (a re-sent duplicate would then be delivered twice).
type idState struct {
	saved  *packets.Packet           // delivery to restore after this packet
	parked map[uint16]packets.Packet // client's PUBREC states displaced by deliveries
}

// isOutbound reports whether an Inflight entry belongs to a delivery from
// the server (PUBLISH awaiting PUBACK/PUBREC, PUBREL awaiting PUBCOMP)
// rather than to the client's QoS 2 publish (PUBREC awaiting PUBREL).
func isOutbound(pk packets.Packet) bool {
	return pk.FixedHeader.Type == packets.Publish || pk.FixedHeader.Type == packets.Pubrel
}

func (h *compatHook) idState(cl *mqtt.Client) *idState {
	if v, ok := h.ids.Load(cl); ok {
		return v.(*idState)
	}
	st := &idState{parked: map[uint16]packets.Packet{}}
	h.ids.Store(cl, st)
	h.idClients.Add(1)
	return st
}

func (h *compatHook) parkedHas(cl *mqtt.Client, id uint16) bool {
	if h.idClients.Load() == 0 {
		return false
	}
	v, ok := h.ids.Load(cl)
	if !ok {
		return false
	}
	_, ok = v.(*idState).parked[id]
	return ok
}

// setInflight puts pk in cl's session, counted as mochi counts.
func (h *compatHook) setInflight(cl *mqtt.Client, pk packets.Packet) {
	if cl.State.Inflight.Set(pk) {
		atomic.AddInt64(&h.mq.Info.Inflight, 1)
	}
}

// deleteInflight removes id from cl's session, counted as mochi counts.
func (h *compatHook) deleteInflight(cl *mqtt.Client, id uint16) {
	if cl.State.Inflight.Delete(id) {
		atomic.AddInt64(&h.mq.Info.Inflight, -1)
	}
}

// unparkForPubrel brings a parked QoS 2 state back into the session for
// the client's PUBREL, saving the delivery that holds the slot.
func (h *compatHook) unparkForPubrel(cl *mqtt.Client, id uint16) {
	if !h.parkedHas(cl, id) {
		return
	}
	st := h.idState(cl)
	if out, ok := cl.State.Inflight.Get(id); ok && isOutbound(out) {
		st.saved = &out
		h.deleteInflight(cl, id)
	}
	h.setInflight(cl, st.parked[id])
	delete(st.parked, id)
}

// OnPacketProcessed puts back a delivery saved for this packet, parking the
// client's QoS 2 state that took its slot.
func (h *compatHook) OnPacketProcessed(cl *mqtt.Client, pk packets.Packet, _ error) {
	v, ok := h.ids.Load(cl)
	if !ok {
		return
	}
	st := v.(*idState)
	if st.saved != nil && st.saved.PacketID == pk.PacketID {
		restore := true
		if cur, ok := cl.State.Inflight.Get(pk.PacketID); ok {
			if cur.FixedHeader.Type == packets.Pubrec && !isOutbound(cur) {
				st.parked[pk.PacketID] = cur
				h.deleteInflight(cl, pk.PacketID)
			} else {
				restore = false // a new delivery got the identifier meanwhile
			}
		}
		if restore {
			h.setInflight(cl, *st.saved)
		} else if id, err := cl.NextPacketID(); err == nil {
			// Kept under another identifier: sent again at the next
			// reconnect (a duplicate, not a loss).
			saved := *st.saved
			saved.PacketID = uint16(id)
			h.setInflight(cl, saved)
		} else {
			atomic.AddInt64(&h.mq.Info.InflightDropped, 1)
		}
		st.saved = nil
	}
	h.dropIDState(cl, st, false)
}

// dropIDState forgets st once empty, or (at the session's end) puts what
// it holds back into the session where the slot is free.
func (h *compatHook) dropIDState(cl *mqtt.Client, st *idState, end bool) {
	if end {
		if st.saved != nil {
			if _, ok := cl.State.Inflight.Get(st.saved.PacketID); !ok {
				h.setInflight(cl, *st.saved)
			}
		}
		for id, pk := range st.parked {
			if _, ok := cl.State.Inflight.Get(id); !ok {
				h.setInflight(cl, pk)
			}
		}
		st.saved, st.parked = nil, nil
	}
	if st.saved == nil && len(st.parked) == 0 {
		if _, ok := h.ids.LoadAndDelete(cl); ok {
			h.idClients.Add(-1)
		}
	}
}

// answerRefusal tells the publisher of pk that it was not accepted, as the
// protocol version allows:
//
//   - MQTT 5, QoS 1: PUBACK with code; QoS 2: PUBREC with code (MQTT 5
//     3.4.2.1 and 3.5.2.1: a reason of 0x80 or above ends the exchange);
//   - MQTT 3.1.1, QoS 1 or 2: it has no way to say no, and the server must
//     either acknowledge or close the network connection (MQTT-3.3.5-2).
//     The connection is closed: a positive acknowledgement would lose the
//     message without the publisher ever knowing (mochi does the same
//     for a publish the ACL denies);
//   - QoS 0: nothing (there is no acknowledgement to carry a refusal).
func answerRefusal(cl *mqtt.Client, pk packets.Packet, code packets.Code) {
	switch {
	case pk.FixedHeader.Qos == 0:
	case cl.Properties.ProtocolVersion == 5:
		_ = cl.WritePacket(refusalAck(pk, code))
	default:
		cl.Stop(code)
	}
}

// refusalAck is the MQTT 5 PUBACK (QoS 1) or PUBREC (QoS 2) refusing pk
// with code, its reason string the code's reason and no other property.
func refusalAck(pk packets.Packet, code packets.Code) packets.Packet {
	t := packets.Puback
	if pk.FixedHeader.Qos == 2 {
		t = packets.Pubrec
	}
	ack := packets.Packet{FixedHeader: packets.FixedHeader{Type: t}, PacketID: pk.PacketID, ReasonCode: code.Code}
	ack.Properties.ReasonString = code.Reason
	return ack
}

// Test seams, set by tests only: testHookTooLarge runs on the writing
// goroutine before a delivery over the client's Maximum Packet Size is
// completed, and the function it returns right after; testHookQosPublish
// runs when mochi has put a QoS 1 or 2 delivery in flight, before it
// takes its send quota.
var (
	testHookTooLarge   func(cl *mqtt.Client) (after func())
	testHookQosPublish func(cl *mqtt.Client, pk packets.Packet)
	// testHookTrack runs in track between enter and storing the
	// connection; testHookSwept once sessionEnds.Close swept the tracked
	// connections.
	testHookTrack, testHookSwept func()
)
