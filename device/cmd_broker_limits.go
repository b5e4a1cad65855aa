package main

import (
	"flag"
	"fmt"
	"time"

	"github.com/quiot/quiot/broker"
)

// HTTP-side bounds of `quiot broker` (broker.Limits): connections in total,
// per remote address and per identity, subscriptions per identity and in
// total, streams per connection, header bytes, subscriber queue bytes per
// subscription and in total, the TCP idle timeout, the bytes and levels of
// topics and filters (which the MQTT side applies too). 0 keeps
// the library's documented default.

type limitFlags struct {
	conns, connsPerAddr, connsPerIdentity int
	subsPerIdentity, subsTotal            int
	streams, headerBytes, inflight        int
	idle                                  time.Duration
	queueBytes, queueBytesTotal           int64
	quicRetryAbove                        int
	topicBytes, topicLevels               int
}

func (f *limitFlags) register(fs *flag.FlagSet) {
	fs.IntVar(&f.conns, "max-conns", 0, "open HTTP/3 and TCP connections in all (0 = 1024); beyond it QUIC connections are refused, TCP ones answered 503")
	fs.IntVar(&f.connsPerAddr, "max-conns-per-addr", 0, "open connections from one IP address (0 = 128)")
	fs.IntVar(&f.connsPerIdentity, "max-conns-per-identity", 0, "open connections of one identity (0 = 128); beyond it 429")
	fs.IntVar(&f.subsPerIdentity, "max-subscriptions-per-identity", 0, "live subscriptions of one identity, anonymous clients by IP address (0 = 1000); beyond it 429")
	fs.IntVar(&f.subsTotal, "max-subscriptions-total", 0, "live HTTP subscriptions in all (0 = 10000); beyond it 503")
	fs.IntVar(&f.streams, "max-streams", 0, "concurrent requests per connection (0 = the QUIC profile's stream limit; 100 on HTTP/2)")
	fs.IntVar(&f.headerBytes, "max-header-bytes", 0, "bytes of a request's header section (0 = 64KiB); beyond it 431")
	fs.IntVar(&f.inflight, "stream-inflight", 0, "QoS 0 frames of one publish stream the store may hold uncommitted (0 = 64); then the stream waits")
	fs.Int64Var(&f.queueBytes, "queue-bytes", 0, "bytes one HTTP subscriber's queue holds, the batch being written included (0 = 4MiB); beyond it the queue is full, as beyond --queue")
	fs.Int64Var(&f.queueBytesTotal, "queue-bytes-total", 0, "bytes all HTTP subscribers' queues hold together (0 = 64MiB); beyond it a subscriber's queue is full")
	fs.IntVar(&f.quicRetryAbove, "quic-retry-above", 0, "QUIC handshakes in progress from unvalidated addresses (each listener: HTTP/3, MQTT over QUIC) from which new connections must first prove their address (a Retry, one round trip) before they count per address (0 = 64; -1 = always)")
	fs.IntVar(&f.topicBytes, "max-topic-bytes", 0, "bytes of a topic or filter, on every protocol: HTTP publish and subscribe, MQTT PUBLISH, SUBSCRIBE, UNSUBSCRIBE and will (0 = 256); beyond it HTTP 400, MQTT Topic Name invalid or Topic Filter invalid")
	fs.IntVar(&f.topicLevels, "max-topic-levels", 0, "levels of a topic or filter, on every protocol as --max-topic-bytes (0 = 16); beyond it HTTP 400, MQTT Topic Name invalid or Topic Filter invalid")
	fs.DurationVar(&f.idle, "idle-timeout", 0, "close a TCP (HTTP/1.1, HTTP/2) connection idle this long, and end a cut-off subscriber that stopped reading (0 = 2m)")
}

// apply sets the given limits; zero keeps the default, negative is an error.
func (f *limitFlags) apply(l *broker.Limits) error {
	for name, v := range map[string]int{"max-conns": f.conns, "max-conns-per-addr": f.connsPerAddr, "max-conns-per-identity": f.connsPerIdentity,
		"max-subscriptions-per-identity": f.subsPerIdentity, "max-subscriptions-total": f.subsTotal, "max-streams": f.streams, "max-header-bytes": f.headerBytes, "stream-inflight": f.inflight,
		"max-topic-bytes": f.topicBytes, "max-topic-levels": f.topicLevels} {
		if v < 0 {
			return fmt.Errorf("%w: --%s %d (want a positive number, or 0 for the default)", errUsage, name, v)
		}
	}
	if f.queueBytes < 0 || f.queueBytesTotal < 0 {
		return fmt.Errorf("%w: --queue-bytes and --queue-bytes-total want a positive size, or 0 for the default", errUsage)
	}
	if f.quicRetryAbove < -1 {
		return fmt.Errorf("%w: --quic-retry-above %d (want a positive number, 0 for the default or -1 for always)", errUsage, f.quicRetryAbove)
	}
	if f.idle < 0 {
		return fmt.Errorf("%w: --idle-timeout %v is negative", errUsage, f.idle)
	}
	l.MaxConns, l.MaxConnsPerAddr, l.MaxConnsPerIdentity = f.conns, f.connsPerAddr, f.connsPerIdentity
	l.MaxSubscriptionsPerIdentity, l.MaxSubscriptions = f.subsPerIdentity, f.subsTotal
	l.MaxStreamsPerConn, l.MaxHeaderBytes, l.IdleTimeout, l.StreamInflight = f.streams, f.headerBytes, f.idle, f.inflight
	l.QueueBytes, l.QueueBytesTotal = f.queueBytes, f.queueBytesTotal
	l.QUICRetryAbove = f.quicRetryAbove
	l.MaxTopicLength, l.MaxTopicLevels = f.topicBytes, f.topicLevels
	return nil
}
