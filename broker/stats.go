package broker

import (
	"errors"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/quiot/quiot/broker/auth"
	"github.com/quiot/quiot/broker/space"
)

// ProtoStats are the counters of one protocol: ProtoH3 ("h3", HTTP/3),
// ProtoTCP ("tcp", HTTP/1.1 and HTTP/2 on the TCP fallback), "mqtt", ...
type ProtoStats struct {
	// ConnsOpen is the number of open connections.
	ConnsOpen int64
	// ConnsTotal is the number of connections ever opened.
	ConnsTotal uint64
	// MessagesIn counts messages accepted from publishers of this protocol.
	MessagesIn uint64
	// MessagesOut counts deliveries to subscribers of this protocol.
	MessagesOut uint64
	// Refused counts the refusals of this protocol's clients by reason:
	// every name of Reasons is a key, zero when never refused.
	Refused map[string]uint64
}

// Reason is why the broker refused a client's connection, request, publish
// or subscription: the reason label of quiot_broker_refused_total. The set
// is fixed (Reasons) so the metric's label values stay few.
type Reason uint8

// The reasons of refusals, with their HTTP status and MQTT answer.
const (
	// ReasonUnauthenticated: no or bad credentials (HTTP 401; MQTT
	// CONNACK Bad user name or password), or rights removed by an ACL
	// reload.
	ReasonUnauthenticated Reason = iota
	// ReasonForbidden: the identity or address may not do this (HTTP 403;
	// MQTT Not authorized: a PUBLISH or SUBSCRIBE the ACL denies, a
	// CONNECT from an address not admitted, with a will topic not allowed
	// or a client id of another identity).
	ReasonForbidden
	// ReasonPayloadTooLarge: the payload exceeds Limits.MaxPayload (HTTP
	// 413; MQTT PUBACK Packet too large).
	ReasonPayloadTooLarge
	// ReasonBadTopic: the topic name or filter is not valid (HTTP 400).
	ReasonBadTopic
	// ReasonTooMany: a limit on connections, sessions or subscriptions
	// (HTTP 429 or 503, QUIC CONNECTION_REFUSED; MQTT Quota exceeded).
	// Stats.Refused names the HTTP side's limit.
	ReasonTooMany
	// ReasonShuttingDown: the broker is stopping (HTTP 503).
	ReasonShuttingDown
	// ReasonStorageFull: the retained messages hold Limits.RetainedBytes
	// (HTTP 507).
	ReasonStorageFull
	// ReasonThrottled: a password attempt from an address that sent too
	// many wrong ones (auth.Throttle; HTTP 429; MQTT CONNACK Connection
	// rate exceeded).
	ReasonThrottled
	numReasons
)

var reasonNames = [numReasons]string{"unauthenticated", "forbidden", "payload_too_large", "bad_topic", "too_many", "shutting_down", "storage_full", "throttled"}

// String is the reason's label value ("forbidden", ...).
func (r Reason) String() string {
	if r < numReasons {
		return reasonNames[r]
	}
	return "unknown"
}

// Reasons returns every reason, in a fixed order.
func Reasons() []Reason {
	rs := make([]Reason, numReasons)
	for i := range rs {
		rs[i] = Reason(i)
	}
	return rs
}

// RefusalOf returns the reason of a refusal error of Publish, a
// subscription or the authenticator, and false for an error that is no
// refusal (an I/O error, a cancelled request, ...).
func RefusalOf(err error) (Reason, bool) {
	switch {
	case errors.Is(err, ErrBadTopic), errors.Is(err, ErrBadFilter):
		return ReasonBadTopic, true
	case errors.Is(err, ErrTooLarge):
		return ReasonPayloadTooLarge, true
	case errors.Is(err, ErrShuttingDown):
		return ReasonShuttingDown, true
	case errors.Is(err, ErrRetainedFull):
		return ReasonStorageFull, true
	case errors.Is(err, ErrTooManySubscriptions), errors.Is(err, ErrTooManyConns):
		return ReasonTooMany, true
	case errors.Is(err, auth.ErrDenied):
		return ReasonForbidden, true
	}
	return 0, false
}

// Stats is a snapshot of the broker's counters.
type Stats struct {
	// Protocols holds the counters by protocol name.
	Protocols map[string]ProtoStats
	// Stats holds the topic space's sizes and counters (subscriptions,
	// queues, history, retained messages, the last sequence number); in
	// JSON its fields sit beside the others.
	space.Stats
	// Refused counts refusals by the HTTP side's limits, by limit name
	// (RefusedConns, RefusedConnsPerAddr, RefusedConnsPerIdentity,
	// RefusedSubscriptions, RefusedSubscriptionsPerIdentity,
	// RefusedSubscriptionsPerConn); a limit never reached is absent.
	Refused map[string]uint64
	// Requests is the number of HTTP requests being handled now
	// (subscriptions and publish streams included).
	Requests int
	// QUICRetries counts the HTTP/3 connection attempts asked to prove
	// their source address (a Retry; Limits.QUICRetryAbove), and
	// QUICHalfOpen is the handshakes in progress from unvalidated
	// addresses.
	QUICRetries  uint64
	QUICHalfOpen int64
	// StreamInflightWaits counts the times a publish stream waited for its
	// QoS 0 frames to be stored before reading more (Limits.StreamInflight).
	StreamInflightWaits uint64
	// Bridges are the states of the bridges to upstream brokers
	// (AddBridge), by name; absent without bridges.
	Bridges []BridgeStatus `json:",omitempty"`
}

type protoCounters struct {
	open  atomic.Int64
	total atomic.Uint64
	in    atomic.Uint64
	out   atomic.Uint64
	// refused counts refusals by Reason.
	refused [numReasons]atomic.Uint64
}

type counters struct {
	protos  sync.Map // string -> *protoCounters
	refused sync.Map // limit name -> *atomic.Uint64
	// inflightWaits counts Limits.StreamInflight waits.
	inflightWaits atomic.Uint64
	// bridges report their state (bridgestatus.go).
	bridges bridgeSet
}

func (c *counters) proto(name string) *protoCounters {
	if name == "" {
		name = "unknown"
	}
	if p, ok := c.protos.Load(name); ok {
		return p.(*protoCounters)
	}
	p, _ := c.protos.LoadOrStore(name, &protoCounters{})
	return p.(*protoCounters)
}

// CountIn counts one message accepted from protocol proto. Publish already
// counts by Message.Origin; other protocols' messages that bypass Publish
// can use it.
func (b *Broker) CountIn(proto string) { b.stats.proto(proto).in.Add(1) }

// CountOut counts n deliveries to subscribers of protocol proto.
func (b *Broker) CountOut(proto string, n int) { b.stats.proto(proto).out.Add(uint64(n)) }

// CountRefused counts one refusal of a client of protocol proto, for
// reason r (quiot_broker_refused_total). The HTTP side counts its own;
// other protocols (MQTT) count theirs where they decide them. A reason
// outside Reasons is not counted.
func (b *Broker) CountRefused(proto string, r Reason) { b.stats.countRefused(proto, r) }

func (c *counters) countRefused(proto string, r Reason) {
	if r < numReasons {
		c.proto(proto).refused[r].Add(1)
	}
}

// ConnOpened counts a new connection of protocol proto.
func (b *Broker) ConnOpened(proto string) {
	p := b.stats.proto(proto)
	p.open.Add(1)
	p.total.Add(1)
}

// ConnClosed counts the end of a connection of protocol proto.
func (b *Broker) ConnClosed(proto string) { b.stats.proto(proto).open.Add(-1) }

// Stats returns a snapshot of the counters.
func (b *Broker) Stats() Stats {
	s := Stats{Protocols: map[string]ProtoStats{}}
	b.stats.protos.Range(func(k, v any) bool {
		p := v.(*protoCounters)
		ps := ProtoStats{ConnsOpen: p.open.Load(), ConnsTotal: p.total.Load(), MessagesIn: p.in.Load(), MessagesOut: p.out.Load(),
			Refused: make(map[string]uint64, numReasons)}
		for r := range p.refused {
			ps.Refused[reasonNames[r]] = p.refused[r].Load()
		}
		s.Protocols[k.(string)] = ps
		return true
	})
	s.Refused = map[string]uint64{}
	b.stats.refused.Range(func(k, v any) bool {
		s.Refused[k.(string)] = v.(*atomic.Uint64).Load()
		return true
	})
	s.Requests = b.active.running()
	s.StreamInflightWaits = b.stats.inflightWaits.Load()
	if b.srcValid != nil {
		s.QUICRetries, s.QUICHalfOpen = b.srcValid.Retries(), b.srcValid.HalfOpen()
	}
	s.Bridges = b.bridgeStatuses()
	s.Stats = b.space.Stats()
	return s
}

// ProtocolNames returns the protocols with counters, sorted.
func (s Stats) ProtocolNames() []string {
	names := make([]string, 0, len(s.Protocols))
	for n := range s.Protocols {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
