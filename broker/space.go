package broker

import (
	"errors"

	"github.com/quiot/quiot/broker/space"
)

// The topic space lives in broker/space; these names keep the broker's
// library API and its callers compiling. New code uses space's names.
type (
	// Message is space.Message.
	Message = space.Message
	// QueuePolicy is space.QueuePolicy.
	QueuePolicy = space.QueuePolicy
	// Store is space.Store: the durable store of the topic space.
	Store = space.Store
	// Commit is space.Commit.
	Commit = space.Commit
	// StoredState is space.StoredState.
	StoredState = space.StoredState
	// ForgetKind is space.ForgetKind.
	ForgetKind = space.ForgetKind
	// ForgetOp is space.ForgetOp.
	ForgetOp = space.ForgetOp
	// Federation is space.Federation: the link to other brokers.
	Federation = space.Federation
	// FederationStatus is space.FederationStatus.
	FederationStatus = space.FederationStatus
	// Sequencer is space.Sequencer.
	Sequencer = space.Sequencer
	// SeqCommit is space.SeqCommit.
	SeqCommit = space.SeqCommit
	// Coverer is space.Coverer.
	Coverer = space.Coverer
	// ClusterReplay is space.ClusterReplay.
	ClusterReplay = space.ClusterReplay
)

const (
	// DropOldest is space.DropOldest.
	DropOldest = space.DropOldest
	// Disconnect is space.Disconnect.
	Disconnect = space.Disconnect
	// ForgetMessage is space.ForgetMessage.
	ForgetMessage = space.ForgetMessage
	// ForgetTopic is space.ForgetTopic.
	ForgetTopic = space.ForgetTopic
	// OriginCluster is space.OriginCluster: the origin of messages another
	// broker accepted.
	OriginCluster = space.OriginCluster

	// entryOverhead is the per-message memory beyond payload and topic
	// that every byte bound counts (space.Cost).
	entryOverhead = space.EntryOverhead
)

// Errors of the topic space (Publish, the cluster operations), tested with
// errors.Is; they are space's values.
var (
	// ErrBadTopic: empty level, wildcard in a topic name, NUL, too long or deep.
	ErrBadTopic = space.ErrBadTopic
	// ErrTooLarge: the payload exceeds Limits.MaxPayload.
	ErrTooLarge = space.ErrTooLarge
	// ErrBadQoS: QoS above 2.
	ErrBadQoS = space.ErrBadQoS
	// ErrShuttingDown: the broker no longer accepts work.
	ErrShuttingDown = space.ErrShuttingDown
	// ErrRetainedFull: keeping the message as retained would exceed
	// Limits.RetainedBytes (clearing retained messages always works).
	ErrRetainedFull = space.ErrRetainedFull
	// ErrOutOfOrder: space.Space.ApplySequenced got a sequence number already
	// applied.
	ErrOutOfOrder = space.ErrOutOfOrder
)

// Errors of the HTTP front end's subscriptions, tested with errors.Is.
var (
	// ErrBadFilter: a malformed subscription filter.
	ErrBadFilter = errors.New("bad filter")
	// ErrTooManySubscriptions: a connection's subscription limit is reached.
	ErrTooManySubscriptions = errors.New("too many subscriptions")
)

// Space returns the broker's topic space, which the other front ends
// (broker/mqttquic), the cluster link (broker/cluster) and the MQTT session
// store share.
func (b *Broker) Space() *space.Space { return b.space }

// spaceLimits are the topic space's part of the limits (defaults applied).
func spaceLimits(l Limits) space.Limits {
	return space.Limits{
		MaxPayload:      l.MaxPayload,
		MaxTopicLength:  l.MaxTopicLength,
		MaxTopicLevels:  l.MaxTopicLevels,
		HistoryPerTopic: l.HistoryPerTopic,
		HistoryBytes:    l.HistoryBytes,
		RetainedBytes:   l.RetainedBytes,
		QueueLength:     l.QueueLength,
		QueueBytes:      l.QueueBytes,
		QueueBytesTotal: l.QueueBytesTotal,
		QueuePolicy:     l.QueuePolicy,
	}
}

// clusterStatus is the federation link's /healthz line ("" without one).
func (b *Broker) clusterStatus() string {
	if s, ok := b.opts.Cluster.(FederationStatus); ok {
		return s.Status()
	}
	return ""
}
