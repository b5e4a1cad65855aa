package mqttquic

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/auth"
	"github.com/quiot/quiot/internal/wire"
)

// Core is what the MQTT side needs of the HTTP/3 broker; *broker.Broker
// implements it.
type Core interface {
	// Publish accepts a message into the shared topic space.
	Publish(ctx context.Context, m broker.Message) (uint64, error)
	// AddTap registers fn for every accepted message (synchronous, must
	// not block).
	AddTap(fn func(m *broker.Message))
	// Auth returns the identities and ACL shared by both protocols.
	Auth() *auth.Authenticator
	// ConnOpened and ConnClosed count connections per protocol.
	ConnOpened(proto string)
	// ConnClosed counts the end of a connection.
	ConnClosed(proto string)
	// CountOut counts deliveries to subscribers of a protocol.
	CountOut(proto string, n int)
}

var _ Core = (*broker.Broker)(nil)

const (
	// Origin is the broker.Message origin of messages published over MQTT.
	Origin = "mqtt"
	// StampProperty is the MQTT 5 user property carrying the publisher's
	// send time (wire.MQTTStampProperty: Unix nanoseconds in base 36); a
	// PUBLISH may carry it as wire.MQTTTimeProperty (decimal) instead.
	StampProperty = wire.MQTTStampProperty
	// bridgeClientID is the inline mochi client that injects HTTP/3
	// publishes.
	bridgeClientID = "quiot-bridge"
)

// bridge joins mochi's topic space to the broker's.
//
// MQTT -> broker: OnPublish (after mochi's ACL check, before PUBACK) hands
// every publish of a network client to Core.Publish with Origin "mqtt", so
// a refusal by the broker (bad topic, payload too large) is answered in the
// PUBACK; mochi delivers to MQTT subscribers itself.
//
// broker -> MQTT: a tap queues every message whose Origin is not "mqtt";
// one goroutine injects them in order into mochi through an inline client,
// keeping QoS (mochi delivers min(publish, subscription)), retain and the
// send time. Messages injected by the bridge are not handed back (OnPublish
// ignores inline clients), so nothing loops or arrives twice.
//
// Wills: mochi publishes a will itself (no OnPublish); OnWillSent hands it
// to the broker as well, so HTTP/3 subscribers and the broker's retained
// store see it as MQTT ones do.
//
// The bridge keeps the rules of security.go: the queue is bounded in
// messages and bytes (Limits.BridgeQueueMessages, BridgeQueueBytes); a
// message whose topic starts with `$` (the broker's), or whose publisher
// may not publish to its topic, is never injected (the inline client is
// exempt from mochi's checks, so the bridge checks with allow); each MQTT
// subscriber then gets it only if the ACL lets it read the topic (mochi's
// per-delivery check).
type bridge struct {
	mqtt.HookBase
	mq   *mqtt.Server
	core Core
	auth *authHook
	log  *slog.Logger
	cl   *mqtt.Client

	// retainWills holds the client ids whose will due to be sent has the
	// retain flag (OnWill); mochi is handed it without, so that only a
	// will the broker accepts within its retained-bytes bound is retained
	// (OnWillSent).
	retainWills sync.Map // client id -> struct{}

	mu         sync.Mutex
	cond       *sync.Cond
	queue      []*broker.Message
	queueBytes int64 // topic and payload bytes in queue
	closed     bool
	done       chan struct{}

	// Dropped counts broker messages not injected because the queue was
	// full.
	Dropped atomic.Uint64
	// Denied counts broker messages not injected because of a `$` topic
	// or a publisher not allowed to publish to the topic.
	Denied atomic.Uint64
	// Injected counts broker messages injected into mochi.
	Injected atomic.Uint64
	// Refused counts MQTT publishes the broker refused.
	Refused atomic.Uint64
}

func newBridge(mq *mqtt.Server, core Core, ah *authHook, log *slog.Logger) *bridge {
	b := &bridge{mq: mq, core: core, auth: ah, log: log, done: make(chan struct{})}
	b.cond = sync.NewCond(&b.mu)
	b.cl = mq.NewClient(nil, "local", bridgeClientID, true)
	b.cl.Properties.ProtocolVersion = 5
	core.AddTap(b.tap)
	go b.run()
	return b
}

// ID names the hook.
func (b *bridge) ID() string { return "quiot-bridge" }

// Provides reports the events the hook handles.
func (b *bridge) Provides(e byte) bool {
	switch e {
	case mqtt.OnPublish, mqtt.OnWill, mqtt.OnWillSent, mqtt.OnSessionEstablished, mqtt.OnDisconnect, mqtt.OnPacketSent, mqtt.OnStopped:
		return true
	}
	return false
}

// OnPublish hands a network client's publish to the broker.
func (b *bridge) OnPublish(cl *mqtt.Client, pk packets.Packet) (packets.Packet, error) {
	if cl.Net.Inline {
		return pk, nil
	}
	m := broker.Message{
		Topic:   pk.TopicName,
		Payload: pk.Payload,
		QoS:     pk.FixedHeader.Qos,
		Retain:  pk.FixedHeader.Retain,
		Origin:  Origin,
	}
	m.Time = sendStamp(pk)
	m.Identity, _ = b.auth.identityOf(cl)
	if handshakePending(cl) && !earlySafe(pk, time.Now()) && !awaitHandshake(cl) {
		return pk, packets.ErrRejectPacket // a 0-RTT replay, or the connection ended (early.go)
	}
	var err error
	repeat := false
	id := userProperty(pk, wire.MQTTMsgIDProperty)
	if id == "" {
		id = stampID(pk)
	}
	if id != "" {
		if oc, ok := b.core.(onceCore); ok {
			_, repeat, err = oc.PublishOnce(context.Background(), m, id)
		} else {
			_, err = b.core.Publish(context.Background(), m)
		}
	} else {
		_, err = b.core.Publish(context.Background(), m)
	}
	if err == nil && repeat {
		// Published before (a replay, or sent again after a lost
		// connection): acknowledged, not delivered or retained again.
		return pk, packets.CodeSuccessIgnore
	}
	if err != nil {
		b.Refused.Add(1)
		if r, ok := broker.RefusalOf(err); ok {
			countRefused(b.core, r)
		}
		b.log.Debug("broker refused mqtt publish", "client", cl.ID, "topic", pk.TopicName, "error", err)
		answerRefusal(cl, pk, refusalCode(err)) // server.go
		return pk, packets.ErrRejectPacket
	}
	return pk, nil
}

// stampID is the message id a QoS 1 or 2 PUBLISH without a
// quiot-msg-id gets from its compact send stamp (wire.MQTTStampProperty),
// its topic and its payload: what `quiot sub --dedup` compares. quiot's
// clients and bridges send a message again with the same stamp (after a
// lost connection, or from a bridge's store after a restart of the edge,
// as a new PUBLISH with a new packet identifier), so the broker publishes
// it once per identity within broker.IdemWindow (PublishOnce), as it does
// a repeated quiot-msg-id. "" for a PUBLISH with no compact stamp, or at
// QoS 0: a third-party client's messages are never dropped as repeats.
func stampID(pk packets.Packet) string {
	if pk.FixedHeader.Qos == 0 {
		return ""
	}
	v := userProperty(pk, wire.MQTTStampProperty)
	if v == "" {
		return ""
	}
	ns, err := strconv.ParseInt(v, 36, 64)
	if err != nil || ns <= 0 {
		return ""
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(pk.TopicName))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write(pk.Payload)
	return "qt" + strconv.FormatInt(ns, 36) + "-" + strconv.FormatUint(h.Sum64(), 36)
}

// refusalCode maps a broker error to the reason code of the MQTT 5 PUBACK
// or PUBREC that refuses the publish: only codes both packets' tables
// (MQTT 5 3.4.2.1, 3.5.2.1) allow, with the error as reason string. A
// payload over the broker's limit but within the Maximum Packet Size is
// "quota exceeded" (0x97: "an implementation or administrative imposed
// limit has been exceeded"); 0x95 "packet too large" is a DISCONNECT code.
func refusalCode(err error) packets.Code {
	code := packets.ErrImplementationSpecificError.Code // 0x83
	switch {
	case errors.Is(err, broker.ErrBadTopic):
		code = packets.ErrTopicNameInvalid.Code // 0x90
	case errors.Is(err, broker.ErrTooLarge), errors.Is(err, broker.ErrRetainedFull):
		code = packets.ErrQuotaExceeded.Code // 0x97
	case errors.Is(err, auth.ErrDenied):
		code = packets.ErrNotAuthorized.Code // 0x87
	}
	return packets.Code{Code: code, Reason: truncReason(err)}
}

// truncReason makes err's text a reason string: valid UTF-8 without
// control characters (MQTT 5 1.5.4 forbids U+0000 and discourages the
// others; the text may quote a client's topic) and at most 200 bytes, cut
// at a character boundary.
func truncReason(err error) string {
	s := strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return '?'
		}
		return r
	}, strings.ToValidUTF8(err.Error(), "?"))
	if len(s) > 200 {
		i := 200
		for i > 0 && !utf8.RuneStart(s[i]) {
			i--
		}
		s = s[:i]
	}
	return s
}

// OnWill takes the retain flag off a will mochi is about to send (after
// the auth hook's check) and remembers it, so that mochi does not retain
// the will on its own: OnWillSent retains it once the broker has accepted
// it within Limits.RetainedBytes, as a retained PUBLISH is (issue 27,
// docs/security.md). Every will of a client id passes here before it is
// sent, a delayed one at the disconnection.
func (b *bridge) OnWill(cl *mqtt.Client, will mqtt.Will) (mqtt.Will, error) {
	if !will.Retain || will.TopicName == "" {
		b.retainWills.Delete(cl.ID)
		return will, nil
	}
	b.retainWills.Store(cl.ID, struct{}{})
	will.Retain = false
	return will, nil
}

// OnWillSent hands a will mochi has just published (checked by the auth
// hook at CONNECT and again in OnWill) to the broker, so that HTTP/3
// subscribers get it and a retained will is retained for both protocols.
// A will the auth hook emptied has no topic and goes nowhere.
func (b *bridge) OnWillSent(cl *mqtt.Client, pk packets.Packet) {
	_, retain := b.retainWills.LoadAndDelete(cl.ID)
	if cl.Net.Inline || pk.TopicName == "" || strings.HasPrefix(pk.TopicName, "$") {
		return
	}
	m := broker.Message{
		Topic:   pk.TopicName,
		Payload: pk.Payload,
		QoS:     pk.FixedHeader.Qos,
		Retain:  pk.FixedHeader.Retain || retain,
		Origin:  Origin,
	}
	m.Identity, _ = b.auth.identityOf(cl)
	if _, err := b.core.Publish(context.Background(), m); err != nil {
		b.Refused.Add(1)
		if r, ok := broker.RefusalOf(err); ok {
			countRefused(b.core, r)
		}
		b.log.Debug("broker refused mqtt will", "client", cl.ID, "topic", pk.TopicName, "error", err)
		return
	}
	if retain {
		// Retained for MQTT subscribers too, as mochi would have.
		out := pk.Copy(false)
		out.FixedHeader.Retain = true
		b.mq.Topics.RetainMessage(out)
		atomic.StoreInt64(&b.mq.Info.Retained, int64(b.mq.Topics.Retained.Len()))
	}
}

// OnSessionEstablished counts an MQTT connection.
func (b *bridge) OnSessionEstablished(*mqtt.Client, packets.Packet) { b.core.ConnOpened(Origin) }

// OnDisconnect counts the end of an MQTT connection.
func (b *bridge) OnDisconnect(*mqtt.Client, error, bool) { b.core.ConnClosed(Origin) }

// OnPacketSent counts deliveries to MQTT subscribers.
func (b *bridge) OnPacketSent(_ *mqtt.Client, pk packets.Packet, _ []byte) {
	if pk.FixedHeader.Type == packets.Publish {
		b.core.CountOut(Origin, 1)
	}
}

// tap queues a broker message for MQTT subscribers; it never blocks.
func (b *bridge) tap(m *broker.Message) {
	if m.Origin == Origin {
		return
	}
	if strings.HasPrefix(m.Topic, "$") {
		b.deny(m)
		return
	}
	size := bridgeSize(m)
	l := &b.auth.limits
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return
	}
	if len(b.queue) >= l.BridgeQueueMessages || b.queueBytes+size > l.BridgeQueueBytes {
		b.mu.Unlock()
		if n := b.Dropped.Add(1); n&(n-1) == 0 { // log at powers of two
			b.log.Warn("mqtt bridge queue full: dropping broker messages", "dropped", n)
		}
		return
	}
	b.queue = append(b.queue, m)
	b.queueBytes += size
	b.mu.Unlock()
	b.cond.Signal()
}

func bridgeSize(m *broker.Message) int64 { return int64(len(m.Topic) + len(m.Payload)) }

// deny counts (and logs at powers of two) a message the bridge refuses.
func (b *bridge) deny(m *broker.Message) {
	if n := b.Denied.Add(1); n&(n-1) == 0 {
		b.log.Warn("mqtt bridge: message not allowed into mqtt", "topic", m.Topic, "identity", m.Identity, "denied", n)
	}
}

func (b *bridge) run() {
	defer close(b.done)
	var batch []*broker.Message
	for {
		b.mu.Lock()
		for len(b.queue) == 0 && !b.closed {
			b.cond.Wait()
		}
		if b.closed {
			b.mu.Unlock()
			return
		}
		batch, b.queue = b.queue, batch[:0]
		b.mu.Unlock()
		for i, m := range batch {
			b.inject(m)
			batch[i] = nil
			b.mu.Lock()
			b.queueBytes -= bridgeSize(m)
			b.mu.Unlock()
		}
	}
}

// inject publishes m into mochi as the inline bridge client, if its
// publisher may publish to its topic.
func (b *bridge) inject(m *broker.Message) {
	if !allow(b.core.Auth(), m.Identity, auth.Publish, m.Topic) {
		b.deny(m)
		return
	}
	qos := m.QoS
	if qos > 1 {
		qos = 1
	}
	pk := packets.Packet{
		FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: qos, Retain: m.Retain},
		TopicName:   m.Topic,
		Payload:     m.Payload,
		PacketID:    uint16(qos),
	}
	if m.Time != 0 {
		pk.Properties.User = []packets.UserProperty{{Key: StampProperty, Val: wire.FormatStamp(m.Time)}}
	}
	if err := b.mq.InjectPacket(b.cl, pk); err != nil {
		b.log.Warn("mqtt bridge: inject failed", "topic", m.Topic, "error", err)
		return
	}
	b.Injected.Add(1)
}

// OnStopped ends the injecting goroutine.
func (b *bridge) OnStopped() { b.stop() }

func (b *bridge) stop() {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	b.cond.Broadcast()
	<-b.done
}

// String describes the bridge's counters.
func (b *bridge) String() string {
	return fmt.Sprintf("injected=%d dropped=%d denied=%d refused=%d", b.Injected.Load(), b.Dropped.Load(), b.Denied.Load(), b.Refused.Load())
}
