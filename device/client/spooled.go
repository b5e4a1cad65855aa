package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quiot/quiot/internal/spool"
)

// Store and forward: a Spooled client puts every publish into an on-disk
// spool (internal/spool) and returns at once; one goroutine delivers the
// spool's messages in order through the protocol client, retrying with
// backoff while the broker is unreachable or slow, and acknowledges each
// in the spool once the broker has (QoS 1) or once it is sent (QoS 0).
// What is not delivered when the process ends (Close, kill -9, power loss)
// is delivered by the next Spooled client on the same directory.
//
// At least once: a message whose broker acknowledgement was lost, or
// whose delivery the spool had not yet recorded when the process died, is
// sent again. Each message is stamped with the spool's accept time
// (Quiot-Time header, MQTT "quiot-time" property), strictly increasing per
// spool and the same on every resend, so a subscriber recognises a
// duplicate by (topic, Message.Sent); Deduper drops them.

// SpoolStats are a Spooled client's counters.
type SpoolStats struct {
	spool.Stats
	// Delivered counts messages the broker accepted from the spool since
	// the client was made.
	Delivered uint64
	// Rejected counts messages the broker refused for good (a bad topic, a
	// payload over its limit): logged, dropped from the spool.
	Rejected uint64
	// Retries counts failed delivery attempts that were retried.
	Retries uint64
}

// Spooled is a Client with an on-disk spool in front of its publishes.
// Subscribe and Stats go straight to the protocol client.
type Spooled struct {
	c      Client
	sp     *spool.Spool
	log    *slog.Logger
	bo     Backoff
	window int

	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{} // the deliverer ended

	delivered, rejected, retries atomic.Uint64

	mu      sync.Mutex
	fatal   error
	fatalCh chan struct{} // closed when fatal is set
}

// NewSpooled returns a client for opts.Broker whose publishes go through
// the spool that so describes (so.Dir is required; see spool.Options for
// the defaults of the other fields; so.Logger defaults to opts.Logger).
// Messages an earlier process left in the spool are delivered first.
// The protocol client always reconnects (opts.Reconnect is set): a spool
// outlives any number of connections.
func NewSpooled(opts Options, so spool.Options) (*Spooled, error) {
	opts.Reconnect = true
	if so.Logger == nil {
		so.Logger = opts.Logger
		if so.Logger == nil {
			so.Logger = slog.Default()
		}
	}
	c, err := New(opts)
	if err != nil {
		return nil, err
	}
	sp, err := spool.Open(so)
	if err != nil {
		c.Close()
		return nil, err
	}
	window := opts.SpoolWindow
	if window <= 0 {
		window = 16
	}
	s := &Spooled{
		c: c, sp: sp, log: so.Logger, window: window,
		bo:      Backoff{Max: opts.MaxBackoff},
		done:    make(chan struct{}),
		fatalCh: make(chan struct{}),
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	go s.deliver()
	return s, nil
}

// Publish puts the message into the spool and returns once it is written
// there (synced too with spool.FsyncAlways): Ack.Spooled is true and
// Ack.SpoolID its spool ID. Delivery follows in order. po.Sent is
// replaced by the spool's accept time.
func (s *Spooled) Publish(ctx context.Context, topicName string, payload []byte, po PublishOptions) (Ack, error) {
	if topicName == "" {
		return Ack{}, errors.New("publish: empty topic")
	}
	if po.QoS > 1 {
		return Ack{}, fmt.Errorf("publish to %q: qos %d not supported (want 0 or 1)", topicName, po.QoS)
	}
	if err := s.Err(); err != nil {
		return Ack{}, err
	}
	id, err := s.sp.Append(ctx, spool.Message{Topic: topicName, Payload: payload, QoS: po.QoS, Retain: po.Retain})
	if err != nil {
		return Ack{}, fmt.Errorf("publish to %q: %w", topicName, err)
	}
	return Ack{Spooled: true, SpoolID: id}, nil
}

// Subscribe implements Client through the protocol client.
func (s *Spooled) Subscribe(ctx context.Context, filter string, since uint64, h func(Message)) error {
	return s.c.Subscribe(ctx, filter, since, h)
}

// Stats implements Client: the protocol client's connection figures.
func (s *Spooled) Stats() Stats { return s.c.Stats() }

// SpoolStats returns the spool's and the deliverer's counters.
func (s *Spooled) SpoolStats() SpoolStats {
	return SpoolStats{Stats: s.sp.Stats(), Delivered: s.delivered.Load(), Rejected: s.rejected.Load(), Retries: s.retries.Load()}
}

// Err returns the error that stopped delivery for good (the broker
// refused this client's credentials or certificate, or the spool could
// not be written), or nil.
func (s *Spooled) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fatal
}

// Drain waits until every message in the spool has been delivered (or
// dropped by the spool's bounds). It returns the error that stopped
// delivery, or ctx's error.
func (s *Spooled) Drain(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-s.fatalCh:
			cancel()
		case <-ctx.Done():
		}
	}()
	err := s.sp.WaitEmpty(ctx)
	if ferr := s.Err(); ferr != nil {
		return ferr
	}
	return err
}

// Close stops delivery, records the delivery cursor in the spool, closes
// it and the protocol client. Undelivered messages stay in the spool.
func (s *Spooled) Close() error {
	s.cancel()
	<-s.done
	return errors.Join(s.sp.Close(), s.c.Close())
}

// setFatal stops delivery with err.
func (s *Spooled) setFatal(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fatal == nil {
		s.fatal = err
		close(s.fatalCh)
	}
}

// pipeliner is a protocol client that can write a publish without
// waiting for its acknowledgement, keeping the order of writes (HTTP/3
// streamed publish).
type pipeliner interface {
	pipelined() bool
	publishAsync(ctx context.Context, topic string, payload []byte, po PublishOptions) (func(context.Context) (Ack, error), error)
}

// deliver sends the spool's messages in order until Close.
func (s *Spooled) deliver() {
	defer close(s.done)
	if pl, ok := s.c.(pipeliner); ok && pl.pipelined() && s.window > 1 {
		s.deliverWindow(pl)
		return
	}
	for {
		m, err := s.sp.Next(s.ctx)
		if err != nil {
			if s.ctx.Err() == nil {
				s.setFatal(fmt.Errorf("spool: %w", err))
				s.log.Error("spool delivery stopped", "error", err)
			}
			return
		}
		if !s.deliverOne(&m) {
			return
		}
	}
}

// deliverOne publishes m until the broker takes it, refuses it for good,
// or delivery stops; it reports whether to go on.
func (s *Spooled) deliverOne(m *spool.Message) bool {
	po := PublishOptions{QoS: m.QoS, Retain: m.Retain, Sent: time.Unix(0, m.Time)}
	for attempt := 0; ; attempt++ {
		_, err := s.c.Publish(s.ctx, m.Topic, m.Payload, po)
		if err == nil {
			s.sp.Ack(m.ID)
			s.delivered.Add(1)
			if attempt > 0 {
				s.log.Info("spooled message delivered", "id", m.ID, "topic", m.Topic, "attempts", attempt+1)
			} else {
				s.log.Debug("spooled message delivered", "id", m.ID, "topic", m.Topic)
			}
			return true
		}
		if s.ctx.Err() != nil {
			return false
		}
		switch deliveryVerdict(err) {
		case verdictDrop:
			s.log.Warn("broker refused a spooled message; dropped", "id", m.ID, "topic", m.Topic, "error", err)
			s.rejected.Add(1)
			s.sp.Ack(m.ID)
			return true
		case verdictFatal:
			s.log.Error("spool delivery stopped: the broker refuses this client", "id", m.ID, "error", err)
			s.setFatal(err)
			return false
		}
		s.retries.Add(1)
		d := s.bo.Delay(attempt)
		s.log.Log(s.ctx, retryLevel(attempt), "spool delivery failed; retrying", "id", m.ID, "topic", m.Topic, "error", err, "after", d.Round(time.Millisecond))
		if sleep(s.ctx, d) != nil {
			return false
		}
	}
}

// verdict is what the deliverer does after a failed publish.
type verdict int

const (
	verdictRetry verdict = iota // the link or the broker may recover
	verdictDrop                 // this message will never be accepted
	verdictFatal                // no message of this client will be
)

// deliveryVerdict classifies a publish error.
func deliveryVerdict(err error) verdict {
	if se, ok := errors.AsType[*StatusError](err); ok {
		switch {
		case se.Temporary():
			return verdictRetry
		case se.Code == http.StatusUnauthorized || se.Code == http.StatusForbidden:
			return verdictFatal
		default: // 400 bad topic, 413 too large, ...
			return verdictDrop
		}
	}
	if re, ok := errors.AsType[*mqttRefusal](err); ok {
		switch re.code {
		case 0x87, 0x8A: // not authorized, banned
			return verdictFatal
		case 0x90, 0x97, 0x99: // topic invalid, quota exceeded (too large), payload format
			return verdictDrop
		default:
			return verdictRetry
		}
	}
	if errors.Is(err, ErrMQTTRefused) || errors.Is(err, ErrClosed) {
		return verdictFatal // CONNACK refusal: credentials, client ID
	}
	if !retryable(err) {
		return verdictFatal // TLS verification, ALPN
	}
	return verdictRetry
}

// mqttRefusal is an MQTT 5 PUBACK that refuses a publish; it wraps the
// ErrMQTTRefused error and keeps the reason code.
type mqttRefusal struct {
	code byte
	err  error
}

func (e *mqttRefusal) Error() string { return e.err.Error() }
func (e *mqttRefusal) Unwrap() error { return e.err }

// inflight is a message written to the broker, its answer awaited.
type inflight struct {
	m    spool.Message
	wait func(context.Context) (Ack, error) // nil when the write failed
	err  error                              // why the write failed
}

// deliverWindow keeps up to s.window messages in flight on an ordered
// transport and completes them oldest first. When one fails with an
// error worth retrying, it and every later one in flight are sent again,
// in order, after a backoff (the broker may have some of them: duplicates,
// recognisable by their send time).
func (s *Spooled) deliverWindow(pl pipeliner) {
	var (
		win     []inflight
		resend  []spool.Message
		attempt int
	)
	now, cancel := context.WithCancel(s.ctx)
	cancel() // for a Next that does not wait
	take := func(wait bool) (spool.Message, bool) {
		if len(resend) > 0 {
			m := resend[0]
			resend = resend[1:]
			return m, true
		}
		ctx := now
		if wait {
			ctx = s.ctx
		}
		m, err := s.sp.Next(ctx)
		if err != nil {
			if wait && s.ctx.Err() == nil {
				s.setFatal(fmt.Errorf("spool: %w", err))
				s.log.Error("spool delivery stopped", "error", err)
			}
			return spool.Message{}, false
		}
		return m, true
	}
	for {
		for len(win) < s.window {
			m, ok := take(len(win) == 0)
			if !ok {
				break
			}
			w, err := pl.publishAsync(s.ctx, m.Topic, m.Payload, PublishOptions{QoS: m.QoS, Retain: m.Retain, Sent: time.Unix(0, m.Time)})
			win = append(win, inflight{m: m, wait: w, err: err})
			if err != nil {
				break
			}
		}
		if s.ctx.Err() != nil || len(win) == 0 {
			return
		}
		head := win[0]
		err := head.err
		if err == nil {
			_, err = head.wait(s.ctx)
		}
		if err == nil {
			win = win[1:]
			s.sp.Ack(head.m.ID)
			s.delivered.Add(1)
			s.log.Debug("spooled message delivered", "id", head.m.ID, "topic", head.m.Topic)
			attempt = 0
			continue
		}
		if s.ctx.Err() != nil {
			return
		}
		switch deliveryVerdict(err) {
		case verdictDrop:
			s.log.Warn("broker refused a spooled message; dropped", "id", head.m.ID, "topic", head.m.Topic, "error", err)
			s.rejected.Add(1)
			s.sp.Ack(head.m.ID)
			win = win[1:]
			continue
		case verdictFatal:
			s.log.Error("spool delivery stopped: the broker refuses this client", "id", head.m.ID, "error", err)
			s.setFatal(err)
			return
		}
		// Send the failed one and everything after it again, in order.
		again := make([]spool.Message, 0, len(win)+len(resend))
		for _, f := range win {
			again = append(again, f.m)
		}
		resend = append(again, resend...)
		win = win[:0]
		s.retries.Add(1)
		d := s.bo.Delay(attempt)
		s.log.Log(s.ctx, retryLevel(attempt), "spool delivery failed; retrying", "id", head.m.ID, "topic", head.m.Topic, "resend", len(resend), "error", err, "after", d.Round(time.Millisecond))
		attempt++
		if sleep(s.ctx, d) != nil {
			return
		}
	}
}

// retryLevel is the level of a retry's log line: the first of a series is
// info, later ones (until a delivery succeeds) debug, so an outage does not
// print a line per attempt.
func retryLevel(attempt int) slog.Level {
	if attempt == 0 {
		return slog.LevelInfo
	}
	return slog.LevelDebug
}
