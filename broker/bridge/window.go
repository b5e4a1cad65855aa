package bridge

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"

	"github.com/eclipse/paho.golang/paho"

	"github.com/quiot/quiot/internal/wire"
)

// Going up with a window of publishes in flight (docs/bridge.md, "Going
// up: QoS, order, the queue"): up to Config.MaxInflight QoS 1 publishes
// await their PUBACK at once, so a long round trip carries more than one
// message. paho's Publish blocks until the PUBACK and writes the PUBLISH
// packet in the calling goroutine: the publishes run one goroutine each,
// and the next one starts only once the one before has written its
// PUBLISH packet (packetConn counts them: written), so the packets go out
// in order. paho's session state blocks a publish beyond the upstream's
// Receive Maximum until a PUBACK frees a slot.
//
// The queue or the store learns of a message only once it and every
// message before it are answered (PUBACK, or refused); after a cut every
// message not answered is sent again, in order, on the next connection:
// at most the window's messages arrive twice.

// written counts the PUBLISH packets written on one connection.
type written struct {
	mu sync.Mutex
	n  uint64
	ch chan struct{} // closed and replaced on every add
}

func newWritten() *written { return &written{ch: make(chan struct{})} }

func (w *written) add(k int) {
	w.mu.Lock()
	w.n += uint64(k)
	close(w.ch)
	w.ch = make(chan struct{})
	w.mu.Unlock()
}

// state returns the count and a channel closed at the next change.
func (w *written) state() (uint64, <-chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n, w.ch
}

// errConnLost is the cut of a connection lost with no publish failing.
var errConnLost = errors.New("connection lost")

// upMsg is a message on its way up.
type upMsg struct {
	id      uint64 // in the queue (item.id) or the store (spool.Message.ID)
	topic   string // remote topic
	payload []byte
	retain  bool
	time    int64 // the publisher's send time (the quiot-time stamp); 0: none
}

// A flight is a message of the window: taken from the queue or the store
// and not yet acknowledged to it.
type flight struct {
	m     upMsg
	state int // flightWaiting, flightRunning, flightDone
	// res and err are the publish's outcome (flightDone).
	res int
	err error
}

const (
	flightWaiting = iota // to be sent on this connection
	flightRunning        // its publish runs
	flightDone           // its publish returned
)

// Outcomes of a publish.
const (
	upSent    = iota // the upstream has it
	upRefused        // the upstream refused it: give it up
	upRetry          // cut: send it again
	upStopped        // the bridge is closing
)

// upSource is where messages going up come from: the memory queue or the
// store.
type upSource interface {
	// feed sends the messages on ch, in order, each once, until the bridge
	// closes.
	feed(ch chan<- upMsg)
	// ack takes every message up to id out: the upstream has them (or
	// refused them).
	ack(id uint64)
	// gone reports whether a message not acknowledged yet has been dropped
	// from the source since (a full queue drops its oldest): it is not
	// sent again.
	gone(id uint64) bool
}

// sendUp publishes src's messages up, in order, with up to MaxInflight
// publishes in flight, until the bridge closes.
func (br *Bridge) sendUp(src upSource) {
	defer close(br.done)
	msgs := make(chan upMsg)
	go src.feed(msgs)
	var win []*flight
	for {
		conn, pubs := br.connection()
		if conn == nil {
			return
		}
		var stop bool
		if win, stop = br.sendOn(conn, pubs, src, msgs, win); stop {
			return
		}
	}
}

// sendOn sends on the connection conn (pubs counts its PUBLISH packets;
// nil: one publish at a time) the window's messages win, then src's, until
// the connection is cut (it returns the messages not acknowledged, to
// send again) or the bridge closes (stop).
func (br *Bridge) sendOn(conn context.Context, pubs *written, src upSource, msgs <-chan upMsg, win []*flight) (_ []*flight, stop bool) {
	limit := br.cfg.MaxInflight
	if pubs == nil || br.h3 != nil {
		limit = 1
	}
	limit = max(limit, 1)
	ctx, abort := context.WithCancel(br.ctx)
	defer abort()
	unhook := context.AfterFunc(conn, abort)
	defer unhook()
	r := &windowRun{br: br, ctx: ctx, pubs: pubs, src: src, win: win, fin: make(chan *flight, limit+len(win))}
	for _, f := range r.win {
		f.state = flightWaiting
	}
	for {
		r.ackFront()
		if ctx.Err() != nil {
			if br.ctx.Err() != nil {
				r.stop = true
			} else if r.cutErr == nil {
				r.cutErr = errConnLost
			}
		}
		if r.cutErr != nil || r.stop {
			break
		}
		// The first message not started on this connection.
		if next := slices.IndexFunc(r.win, func(f *flight) bool { return f.state == flightWaiting }); next >= 0 {
			r.start(next)
			continue
		}
		var in <-chan upMsg
		if len(r.win) < limit {
			in = msgs
		}
		select {
		case g := <-r.fin:
			r.finish(g)
		case m := <-in:
			r.win = append(r.win, &flight{m: m})
		case <-ctx.Done(): // the loop's top sees it
		}
	}
	// Cut or closing: end the publishes still running (paho keeps a
	// written one in its session state; with a session present upstream
	// it sends it again itself on the next connection, before these).
	abort()
	for r.running > 0 {
		r.finish(<-r.fin)
	}
	r.ackFront()
	if r.stop || br.ctx.Err() != nil {
		return r.win, true
	}
	if br.cut(conn, r.cutTopic, r.cutErr) == upStopped {
		return r.win, true
	}
	return r.win, false
}

// windowRun is sendOn's state on one connection: the window, the
// publishes running and how the connection ended.
type windowRun struct {
	br      *Bridge
	ctx     context.Context // ends with the connection
	pubs    *written
	src     upSource
	win     []*flight
	fin     chan *flight // publishes that returned
	running int
	// cutErr and cutTopic: the first publish that found the connection
	// lost; stop: the bridge stops.
	cutErr   error
	cutTopic string
	stop     bool
}

// finish records a publish that returned.
func (r *windowRun) finish(f *flight) {
	f.state = flightDone
	r.running--
	switch f.res {
	case upRetry:
		if r.cutErr == nil {
			r.cutErr, r.cutTopic = f.err, f.m.topic
		}
	case upStopped:
		r.stop = true
	}
}

// ackFront acknowledges, in order, the messages at the front the upstream
// answered.
func (r *windowRun) ackFront() {
	n := 0
	for n < len(r.win) && r.win[n].state == flightDone && (r.win[n].res == upSent || r.win[n].res == upRefused) {
		if r.win[n].res == upSent {
			r.br.sent.Add(1) // before ack, which notifies
		}
		n++
	}
	if n > 0 {
		r.src.ack(r.win[n-1].m.id)
		r.win = slices.Delete(r.win, 0, n)
	}
}

// start publishes the window's message at next (one the source dropped
// meanwhile leaves the window) and returns once its PUBLISH packet is
// written or it returned: paho's writes from concurrent publishes go out
// in no set order, so the next publish waits for that.
func (r *windowRun) start(next int) {
	f := r.win[next]
	if r.src.gone(f.m.id) {
		r.win = slices.Delete(r.win, next, next+1)
		return
	}
	var before uint64
	if r.pubs != nil {
		before, _ = r.pubs.state()
	}
	f.state = flightRunning
	r.running++
	go func() {
		f.res, f.err = r.br.publishOne(r.ctx, f.m)
		r.fin <- f
	}()
	for f.state == flightRunning && r.cutErr == nil && r.ctx.Err() == nil {
		var wrote <-chan struct{}
		if r.pubs != nil {
			n, ch := r.pubs.state()
			if n > before {
				return
			}
			wrote = ch
		}
		select {
		case g := <-r.fin:
			r.finish(g)
		case <-wrote:
		case <-r.ctx.Done():
		}
	}
}

// publishOne publishes m on the current connection (ctx ends with it)
// and waits for the upstream's answer.
func (br *Bridge) publishOne(ctx context.Context, m upMsg) (int, error) {
	if br.echo != nil && matchAny(br.echoIn, m.topic) {
		br.echo.sent(m.topic, m.payload)
	}
	if br.h3 != nil {
		return br.publishH3(ctx, m)
	}
	p := &paho.Publish{Topic: m.topic, Payload: m.payload, QoS: br.cfg.QoS, Retain: m.retain}
	if m.time > 0 && !br.v311 { // the publisher's send time, as quiot's MQTT clients carry it
		p.Properties = &paho.PublishProperties{User: paho.UserProperties{{Key: wire.MQTTStampProperty, Value: wire.FormatStamp(m.time)}}}
	}
	br.mu.Lock()
	aliases := br.aliases
	br.mu.Unlock()
	aliases.apply(p)
	pr, err := br.cm.Publish(ctx, p)
	if err != nil {
		aliases.reset()
	}
	switch {
	case err == nil:
		return upSent, nil
	case pr != nil && pr.ReasonCode >= 0x80:
		return br.refuse(m.topic, fmt.Sprintf("reason 0x%02x", pr.ReasonCode)), nil
	case br.ctx.Err() != nil:
		return upStopped, nil
	}
	// The connection was lost (or the publish could not be written): send
	// it again on the next connection.
	return upRetry, err
}

// queueSource is the memory queue as an upSource.
type queueSource struct{ br *Bridge }

func (s queueSource) feed(ch chan<- upMsg) {
	var last uint64
	for {
		it := s.br.after(last)
		if it == nil {
			return
		}
		select {
		case ch <- upMsg{id: it.id, topic: it.topic, payload: it.msg.Payload, retain: it.msg.Retain, time: it.msg.Time}:
			last = it.id
		case <-s.br.ctx.Done():
			return
		}
	}
}

func (s queueSource) ack(id uint64) { s.br.popThrough(id) }

func (s queueSource) gone(id uint64) bool {
	s.br.mu.Lock()
	defer s.br.mu.Unlock()
	return len(s.br.q) == 0 || s.br.q[0].id > id
}

// after returns the oldest queued message newer than id, waiting for one
// (nil once the bridge is closing).
func (br *Bridge) after(id uint64) *item {
	for {
		br.mu.Lock()
		if i := sort.Search(len(br.q), func(i int) bool { return br.q[i].id > id }); i < len(br.q) {
			it := br.q[i]
			br.mu.Unlock()
			return it
		}
		br.mu.Unlock()
		select {
		case <-br.wake:
		case <-br.ctx.Done():
			return nil
		}
	}
}

// popThrough removes the messages up to id from the front of the queue
// (those dropped meanwhile are gone already).
func (br *Bridge) popThrough(id uint64) {
	br.mu.Lock()
	n := 0
	for n < len(br.q) && br.q[n].id <= id {
		br.qBytes -= br.q[n].cost
		br.q[n] = nil
		n++
	}
	br.q = br.q[n:]
	if len(br.q) == 0 {
		br.q = nil // let the backing array go
	}
	if len(br.q) < br.cfg.QueueMessages && br.qBytes < br.cfg.QueueBytes {
		br.dropping = false
	}
	br.notifyLocked()
	br.mu.Unlock()
}

// spoolSource is the store (Config.StoreDir) as an upSource: Next hands
// each message out once, Ack takes every message up to an id.
type spoolSource struct{ br *Bridge }

func (s spoolSource) feed(ch chan<- upMsg) {
	br := s.br
	for {
		m, err := br.sp.Next(br.ctx)
		if err != nil {
			if br.ctx.Err() == nil {
				br.setErr("store: " + err.Error())
				br.log.Error("bridge: reading the store failed; nothing more goes up until a restart", "store_dir", br.cfg.StoreDir, "error", err)
			}
			return
		}
		select {
		case ch <- upMsg{id: m.ID, topic: m.Topic, payload: m.Payload, retain: m.Retain, time: m.Time}:
		case <-br.ctx.Done():
			return
		}
	}
}

func (s spoolSource) ack(id uint64) {
	s.br.sp.Ack(id)
	s.br.notify()
}

func (s spoolSource) gone(uint64) bool { return false }
