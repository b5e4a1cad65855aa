// Package space is quiot's topic space: the one place where published
// messages are numbered, kept and handed to subscribers, whatever protocol
// they came in by.
//
// A Space holds, per topic, a bounded resume history and the retained
// message; one sequence counter for all topics with its epoch (the run of
// numbers a subscriber's resume point belongs to); the live subscriptions,
// each with its own bounded queue (Subscriber); and the taps, which see
// every accepted message in order (the MQTT side, the MQTT session store,
// the bridges). Publish accepts a message; Subscribe registers a
// subscription and returns what it must receive first (retained messages,
// or the history after a resume point with gap announcements) so that
// nothing is missed or duplicated before its live messages.
//
// The space talks to what lies outside it through interfaces it defines:
// Store (durable state; broker/store implements it), Federation with
// Sequencer and Coverer (the link to other brokers; broker/cluster), and
// the CountIn callback (the broker's counters). It imports nothing of the
// front ends, so each of them can depend on it:
//
//   - broker, the HTTP/3 front end, creates the Space (broker.New) and
//     exposes it as Broker.Space; broker.Message and the interfaces above
//     are aliases of this package's names.
//   - broker/mqttquic, the MQTT front end, publishes through the broker,
//     reads the space through taps and reports its subscriptions' interest
//     (AddInterest, CoverInterest).
//   - broker/cluster applies the cluster's messages (ApplySequenced,
//     SetRetained, ForgetThrough, MarkEvicted, AnnounceLoss, ...).
//   - broker/store keeps the space on disk and replays it to MQTT sessions
//     (HistoryAfter, RetainedMessages).
//
// # Locking
//
// One mutex guards the whole space: the counter, the topics, history,
// retained messages, the subscription lists and the taps. Whatever the
// space calls with it held must not block and must not call back into the
// space (that would deadlock): taps, Federation.Forward and Interest,
// Store.Append and Forget. A Subscriber's queue has its own lock, taken
// under the space's (never the other way round), so a publisher never waits
// for a reader: enqueueing never blocks, a full queue drops or cuts off
// (QueuePolicy). The store's apply callback and a Coverer's Cover and
// Replay run without the space's lock. Messages are shared once accepted:
// nobody modifies them.
package space
