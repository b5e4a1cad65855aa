package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/quiot/quiot/internal/wire"
)

// Streamed publish (PublishMode "stream"): one long-lived POST /v1/publish
// whose body carries publish frames and whose response carries ack frames
// (see internal/wire). The broker acks every QoS 1 frame once accepted and
// every rejected frame; accepted QoS 0 frames are not acked.

// errStreamEnded is the error of a streamed publish the broker ended.
var errStreamEnded = errors.New("broker ended the publish stream")

// streamCloseWait bounds how long Close waits for the broker to finish a
// streamed publish (so QoS 0 frames already written are not discarded).
const streamCloseWait = 2 * time.Second

// streamPub is one streamed-publish request.
type streamPub struct {
	log    *slog.Logger
	pw     *io.PipeWriter
	cancel context.CancelFunc // cancels the request

	mu      sync.Mutex
	nextID  uint64
	pending map[uint64]chan wire.Ack
	err     error         // why the stream is unusable; set once
	done    chan struct{} // closed when err is set
}

// streamPublisher returns the live streamed-publish request, opening one
// (on the current connection, dialling if needed) when there is none.
func (c *h3Client) streamPublisher(ctx context.Context) (*streamPub, error) {
	c.spMu.Lock()
	defer c.spMu.Unlock()
	c.mu.Lock()
	sp, closed := c.sp, c.closed
	c.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	if sp != nil && sp.usable() {
		return sp, nil
	}
	hc, err := c.conn(ctx)
	if err != nil {
		return nil, err
	}
	pr, pw := io.Pipe()
	sctx, cancel := context.WithCancel(context.Background())
	u := c.baseURL()
	u.Path = wire.PathPublish
	req, err := http.NewRequestWithContext(sctx, http.MethodPost, u.String(), pr)
	if err != nil {
		cancel()
		return nil, err
	}
	req.ContentLength = -1
	req.Header.Set("Content-Type", wire.ContentType)
	authDone, err := c.authorize(ctx, hc, req)
	if err != nil {
		cancel()
		return nil, err
	}
	sp = &streamPub{
		log:     c.log,
		pw:      pw,
		cancel:  cancel,
		pending: map[uint64]chan wire.Ack{},
		done:    make(chan struct{}),
	}
	go sp.run(hc, req, authDone)
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		sp.close(ErrClosed)
		return nil, ErrClosed
	}
	c.sp = sp
	c.mu.Unlock()
	return sp, nil
}

// run sends the request and reads acks until the stream ends.
func (sp *streamPub) run(hc *h3Conn, req *http.Request, authDone func(bool)) {
	resp, err := hc.cc.RoundTrip(req)
	if err != nil {
		authDone(false)
		sp.close(fmt.Errorf("streamed publish: %w", err))
		return
	}
	authDone(authBound(resp.StatusCode))
	if resp.StatusCode != http.StatusOK {
		sp.close(statusError("streamed publish", resp))
		return
	}
	defer resp.Body.Close()
	dec := wire.NewDecoder(resp.Body, 0)
	for {
		a, err := dec.Ack()
		if err != nil {
			if err == io.EOF {
				err = errStreamEnded
			}
			sp.close(fmt.Errorf("streamed publish: %w", err))
			return
		}
		if a.ID == 0 && a.Status != 0 {
			// Frame ids start at 1: id 0 refuses the stream itself (a
			// frame too large or malformed), which the broker then ends.
			// The answer is final (StatusError.Temporary): the same
			// message would be refused again on a new stream.
			sp.close(&StatusError{Op: "streamed publish", Code: int(a.Status), Reason: a.Reason})
			return
		}
		sp.mu.Lock()
		ch, ok := sp.pending[a.ID]
		delete(sp.pending, a.ID)
		sp.mu.Unlock()
		switch {
		case ok:
			ch <- a
		case a.Status != 0:
			// A rejected QoS 0 frame: nobody waits for it.
			sp.log.Warn("qos 0 publish rejected", "id", a.ID, "status", a.Status, "reason", a.Reason)
		}
	}
}

func (sp *streamPub) usable() bool {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	return sp.err == nil
}

// close marks the stream unusable with err, fails its waiters and resets
// the request.
func (sp *streamPub) close(err error) {
	sp.mu.Lock()
	if sp.err != nil {
		sp.mu.Unlock()
		return
	}
	sp.err = err
	close(sp.done)
	sp.mu.Unlock()
	_ = sp.pw.CloseWithError(err)
	sp.cancel()
}

// finish ends the request body cleanly and waits (bounded) for the broker
// to end the response, so frames already written reach it; then closes.
func (sp *streamPub) finish() {
	_ = sp.pw.Close() // safe beside a Write in progress (io.Pipe)
	t := time.NewTimer(streamCloseWait)
	defer t.Stop()
	select {
	case <-sp.done:
	case <-t.C:
	}
	sp.close(ErrClosed)
}

// publish writes one frame and, for QoS 1, waits for its ack.
func (sp *streamPub) publish(ctx context.Context, topicName string, payload []byte, po PublishOptions) (Ack, error) {
	wait, err := sp.send(ctx, topicName, payload, po)
	if err != nil {
		return Ack{}, err
	}
	return wait(ctx)
}

// send writes one frame and returns a function that waits for its ack
// (at once for QoS 0). Frames reach the broker in the order of send calls.
func (sp *streamPub) send(ctx context.Context, topicName string, payload []byte, po PublishOptions) (func(context.Context) (Ack, error), error) {
	op := fmt.Sprintf("publish to %q", topicName)
	sp.mu.Lock()
	if sp.err != nil {
		err := sp.err
		sp.mu.Unlock()
		return nil, err
	}
	sp.nextID++
	id := sp.nextID
	var ch chan wire.Ack
	if po.QoS == 1 {
		ch = make(chan wire.Ack, 1)
		sp.pending[id] = ch
	}
	sp.mu.Unlock()

	p := wire.Publish{ID: id, Time: sendTime(po.Sent).UnixNano(), Topic: topicName, Payload: payload}
	if po.QoS == 1 {
		p.Flags |= wire.PubQoS1
	}
	if po.Retain {
		p.Flags |= wire.PubRetain
	}
	frame := wire.AppendPublish(nil, &p)
	// A write blocks while flow control holds the stream back; if ctx ends
	// meanwhile, the stream (which may now hold half a frame) is given up.
	stop := context.AfterFunc(ctx, func() { sp.close(fmt.Errorf("publish abandoned: %w", context.Cause(ctx))) })
	_, err := sp.pw.Write(frame) // io.Pipe gates parallel writes: frames never interleave
	stop()
	if err != nil {
		sp.forget(id)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		// The broker may have refused the stream (an ack with id 0) and
		// ended it: its answer arrives on the response, give it a moment.
		t := time.NewTimer(streamCloseWait)
		select {
		case <-sp.done:
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
		sp.mu.Lock()
		if sp.err != nil {
			err = sp.err // why the pipe closed
		}
		sp.mu.Unlock()
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	return func(ctx context.Context) (Ack, error) {
		if ch == nil {
			return Ack{Sent: time.Unix(0, p.Time)}, nil
		}
		answer := func(a wire.Ack) (Ack, error) {
			if a.Status != 0 {
				return Ack{}, &StatusError{Op: op, Code: int(a.Status), Reason: a.Reason}
			}
			return Ack{Seq: a.Seq, Sent: time.Unix(0, p.Time)}, nil
		}
		select {
		case a := <-ch:
			return answer(a)
		case <-sp.done:
			select {
			case a := <-ch: // answered just before the stream ended
				return answer(a)
			default:
			}
			sp.forget(id)
			sp.mu.Lock()
			err := sp.err
			sp.mu.Unlock()
			return Ack{}, fmt.Errorf("%s: %w", op, err)
		case <-ctx.Done():
			sp.forget(id)
			return Ack{}, ctx.Err()
		}
	}, nil
}

func (sp *streamPub) forget(id uint64) {
	sp.mu.Lock()
	delete(sp.pending, id)
	sp.mu.Unlock()
}

// publishAsync writes one message on the streamed-publish request (dialling
// and opening it if needed) without waiting for the broker's answer, and
// returns a function that waits for it. Messages written one after another
// reach the broker in that order. No retries: after a failure the caller
// sends the failed message and all later ones again. Only in PublishMode
// "stream" (see pipelined).
func (c *h3Client) publishAsync(ctx context.Context, topicName string, payload []byte, po PublishOptions) (func(context.Context) (Ack, error), error) {
	if topicName == "" {
		return nil, errors.New("publish: empty topic")
	}
	if po.QoS > 1 {
		return nil, fmt.Errorf("publish to %q: qos %d not supported (want 0 or 1)", topicName, po.QoS)
	}
	sp, err := c.streamPublisher(ctx)
	if err != nil {
		return nil, fmt.Errorf("publish to %q: %w", topicName, err)
	}
	return sp.send(ctx, topicName, payload, po)
}

// pipelined reports whether publishAsync keeps order: in PublishMode
// "stream" (one stream, frames in order), not with one request per message.
func (c *h3Client) pipelined() bool { return c.opts.PublishMode == "stream" }

// publishStream publishes one message on the streamed-publish request.
func (c *h3Client) publishStream(ctx context.Context, topicName string, payload []byte, po PublishOptions) (Ack, error) {
	sp, err := c.streamPublisher(ctx)
	if err != nil {
		return Ack{}, fmt.Errorf("publish to %q: %w", topicName, err)
	}
	return sp.publish(ctx, topicName, payload, po)
}
