package mqttquic

import (
	"bytes"
	"sync"
	"sync/atomic"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// Messages queued on a session while its client reconnects.
//
// mochi hands a persistent session to a reconnecting client in
// inheritClientSession: it marks the old client taken over, copies its
// queue (Inflight.Clone) and subscriptions to the new client, clears the
// old one, and only then registers the new client under the id. A
// delivery that looked the id up before that (publishToSubscribers takes
// the client from the table, then queues on it) queues the message on the
// old client after the copy: nobody ever sends it, though its publisher
// got its PUBACK (mochi acknowledges a QoS 1 publish before it fans the
// message out, so a client that publishes and then reconnects a
// subscriber meets this every time the two race). mochi offers no hook
// around the copy, so the compat hook repairs it afterwards: every QoS 1
// message queued on a client that is already taken over (OnQosPublish runs
// right after the message is queued) is handed to the client that took the
// session over, unless the copy already holds it. Messages queued before
// the new client's CONNACK join its queue and go out with mochi's resend;
// later ones (a delivery that was descheduled between the lookup and the
// queueing) are queued and written at once.

// takeover follows one session being handed from a client to its
// successor (same client id, reconnected).
type takeover struct {
	old   *mqtt.Client
	clean bool // the successor started a new session: the old one's messages end with it

	mu      sync.Mutex
	succ    *mqtt.Client     // set once mochi has handed the session over (CONNACK being written)
	pending []packets.Packet // late messages seen before succ was set
}

// takeoverLinger is how long after a takeover late messages queued on the
// old client are still handed on: a delivery descheduled longer than that
// between looking the client up and queueing on it is lost (and counted).
const takeoverLinger = sessionEndWait

// qosNotifier is a hook told of a message queued for a session
// (OnQosPublish): the session store and the auth hook's queue accounting.
type qosNotifier interface {
	OnQosPublish(cl *mqtt.Client, pk packets.Packet, sent int64, resends int)
}

// noteTakeover records, as cl's session is about to be established (after
// awaitSessionEnd), that cl takes over the session of the client now
// registered under its id, if any.
func (h *compatHook) noteTakeover(cl *mqtt.Client, pk packets.Packet) {
	old, ok := h.mq.Clients.Get(cl.ID)
	if !ok || old == cl {
		return
	}
	t := &takeover{
		old:   old,
		clean: pk.Connect.Clean || old.Properties.Clean && old.Properties.ProtocolVersion < 5, // mochi's rule
	}
	h.takeovers.Store(old, t)
	h.successors.Store(cl, t)
}

// completeTakeover runs once mochi has handed cl the session (cl's CONNACK
// is being encoded, or cl's connection ended before it was): the late
// messages seen so far join cl's queue, later ones are handed on at once.
func (h *compatHook) completeTakeover(cl *mqtt.Client) {
	v, ok := h.successors.LoadAndDelete(cl)
	if !ok {
		return
	}
	t := v.(*takeover)
	t.mu.Lock()
	t.succ = cl
	late := t.pending
	t.pending = nil
	t.mu.Unlock()
	if !t.clean {
		for _, pk := range late {
			h.adopt(cl, pk, false)
		}
	}
	time.AfterFunc(takeoverLinger, func() { h.takeovers.CompareAndDelete(t.old, t) })
}

// OnQosPublish hands on a message mochi has just queued on a client whose
// session another client has taken over.
func (h *compatHook) OnQosPublish(cl *mqtt.Client, pk packets.Packet, _ int64, _ int) {
	if testHookQosPublish != nil {
		testHookQosPublish(cl, pk)
	}
	if pk.FixedHeader.Type != packets.Publish || !cl.IsTakenOver() {
		return
	}
	h.late(cl, pk, true)
}

// late hands pk, queued on old after old's session was taken over, to the
// successor (now, or when the takeover completes).
func (h *compatHook) late(old *mqtt.Client, pk packets.Packet, send bool) {
	v, ok := h.takeovers.Load(old)
	if !ok {
		// A takeover older than takeoverLinger (or one that started a
		// clean session, whose record is gone too).
		h.lateLost.Add(1)
		return
	}
	t := v.(*takeover)
	if t.clean {
		return // the session ended: MQTT drops its messages (MQTT-3.1.2-4)
	}
	t.mu.Lock()
	if t.succ == nil {
		t.pending = append(t.pending, pk)
		t.mu.Unlock()
		return
	}
	succ := t.succ
	t.mu.Unlock()
	h.adopt(succ, pk, send)
}

// adopt queues pk, a message queued on the client succ took the session
// over from, for succ, unless succ's copy of the queue holds it already.
// It keeps pk's packet identifier when succ has it free (identifiers are
// handed out in publish order, and the queue is resent in their order).
// With send, mochi's resend is over: pk is announced to the hooks that
// keep the queue and written at once (from its own goroutine: the caller
// is a publisher's delivery, which must not wait on another client).
func (h *compatHook) adopt(succ *mqtt.Client, pk packets.Packet, send bool) {
	if cur, ok := succ.State.Inflight.Get(pk.PacketID); ok && cur.TopicName == pk.TopicName && bytes.Equal(cur.Payload, pk.Payload) {
		return // copied with the session
	}
	out := pk.Copy(true)
	out.FixedHeader.Dup = false
	out.Expiry = pk.Expiry
	if out.Expiry < 0 {
		out.Expiry = 0 // held for credit on the old client; the resend or the write below sends it
	}
	if cur, used := succ.State.Inflight.Get(out.PacketID); used {
		id, err := succ.NextPacketID()
		if err != nil {
			h.lateLost.Add(1)
			atomic.AddInt64(&h.mq.Info.InflightDropped, 1)
			return
		}
		out.PacketID = uint16(id)
		// The old client's OnQosPublish stored pk under the identifier
		// succ uses for cur: store cur again.
		for _, n := range h.qosHooks {
			n.OnQosPublish(succ, cur, cur.Created, 0)
		}
	}
	if !succ.State.Inflight.Set(out) {
		return
	}
	atomic.AddInt64(&h.mq.Info.Inflight, 1)
	h.adopted.Add(1)
	if succ.IsTakenOver() {
		// Taken over in turn while this ran: the copy may have missed it.
		h.late(succ, out, send)
		return
	}
	if !send {
		return
	}
	for _, n := range h.qosHooks {
		n.OnQosPublish(succ, out, out.Created, 0)
	}
	go func() { _ = succ.WritePacket(out) }() // a closed client keeps it queued
}
