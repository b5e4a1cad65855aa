package broker

import (
	"container/list"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/quiot/quiot/internal/wire"
)

// Idempotent publishing, and with it publishing in 0-RTT data
// (docs/pubsub.md, "Message ids and 0-RTT").
//
// A publish request may carry a client-chosen message id (header
// Quiot-Msg-Id). The broker remembers the answer it gave to each id, per
// identity, for IdemWindow; a request repeating an id it still remembers gets
// the first answer again (the same Quiot-Seq) and is not published a second
// time. A replayed 0-RTT packet is such a repeat, so a publish with an id may
// arrive in early data: the broker accepts it when its Quiot-Time is within
// IdemWindow of the broker's clock (a replay older than the window would be
// forgotten, so it is refused with 425 instead). Without an id a publish in
// early data is still answered 425.

const (
	// HeaderMsgID carries a publish request's client message id: 1 to
	// MaxMsgIDLen characters of [A-Za-z0-9_.-].
	HeaderMsgID = wire.HeaderMsgID
	// MaxMsgIDLen bounds a message id's length.
	MaxMsgIDLen = 64
	// IdemWindow is how long the broker remembers a message id's answer, and
	// how far an early-data publish's Quiot-Time may be from the broker's
	// clock.
	IdemWindow = 10 * time.Minute
	// IdemPerIdentity bounds the ids remembered per identity; the oldest is
	// forgotten first.
	IdemPerIdentity = 1024
	// IdemTotal bounds the ids remembered in total (about 150 bytes each).
	IdemTotal = 65536
)

// validMsgID reports whether s is a well-formed message id.
func validMsgID(s string) error {
	if s == "" || len(s) > MaxMsgIDLen {
		return fmt.Errorf("bad %s %q: want 1 to %d characters", HeaderMsgID, s, MaxMsgIDLen)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return fmt.Errorf("bad %s %q: want only letters, digits, '-', '_' and '.'", HeaderMsgID, s)
		}
	}
	return nil
}

// earlyPublishOK reports whether a request that arrived in 0-RTT data may be
// served: a publish to /v1/topics with a well-formed message id and a
// Quiot-Time within IdemWindow of now. Everything else that is not a GET or
// HEAD is answered 425.
func earlyPublishOK(r *http.Request, now time.Time) bool {
	if r.Method != http.MethodPost && r.Method != http.MethodPut {
		return false
	}
	if r.URL.Path != wire.PathTopics && !strings.HasPrefix(r.URL.Path, wire.PathTopics+"/") {
		return false
	}
	if validMsgID(r.Header.Get(HeaderMsgID)) != nil {
		return false
	}
	ts, err := strconv.ParseInt(r.Header.Get(HeaderTime), 10, 64)
	if err != nil {
		return false
	}
	d := now.Sub(time.Unix(0, ts))
	return d < IdemWindow && d > -IdemWindow
}

// idemEntry is one remembered message id.
type idemEntry struct {
	key   string // identity + "\x00" + id
	ident string
	at    time.Time
	all   *list.Element // in idemWindow.order
	own   *list.Element // in its identity's list
	done  chan struct{} // closed once seq/err are set
	seq   uint64
	err   error
}

// idemWindow remembers message ids' answers; the zero value is ready (with
// the package's bounds).
type idemWindow struct {
	// Bounds; zero means IdemWindow, IdemPerIdentity, IdemTotal (tests set
	// small ones).
	window   time.Duration
	perIdent int
	total    int
	now      func() time.Time // nil: time.Now

	mu     sync.Mutex
	byKey  map[string]*idemEntry
	order  list.List             // all entries, oldest first
	byIdnt map[string]*list.List // identity -> its entries, oldest first
}

func (w *idemWindow) limits() (time.Duration, int, int, time.Time) {
	win, per, tot := w.window, w.perIdent, w.total
	if win == 0 {
		win = IdemWindow
	}
	if per == 0 {
		per = IdemPerIdentity
	}
	if tot == 0 {
		tot = IdemTotal
	}
	now := time.Now()
	if w.now != nil {
		now = w.now()
	}
	return win, per, tot, now
}

// removeLocked forgets e.
func (w *idemWindow) removeLocked(e *idemEntry) {
	if w.byKey[e.key] != e {
		return
	}
	delete(w.byKey, e.key)
	w.order.Remove(e.all)
	if l := w.byIdnt[e.ident]; l != nil {
		l.Remove(e.own)
		if l.Len() == 0 {
			delete(w.byIdnt, e.ident)
		}
	}
}

// size is how many ids are remembered (tests).
func (w *idemWindow) size() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.byKey)
}

// do runs publish once per (ident, id) within the window: a repeat waits for
// the first one's answer and returns it. A failed publish is not remembered
// (its repeat is tried again: nothing was published).
func (w *idemWindow) do(ctx context.Context, ident, id string, publish func() (uint64, error)) (seq uint64, repeat bool, err error) {
	win, per, tot, now := w.limits()
	key := ident + "\x00" + id
	w.mu.Lock()
	if w.byKey == nil {
		w.byKey = map[string]*idemEntry{}
		w.byIdnt = map[string]*list.List{}
	}
	for f := w.order.Front(); f != nil; f = w.order.Front() {
		e := f.Value.(*idemEntry)
		if now.Sub(e.at) < win {
			break
		}
		w.removeLocked(e)
	}
	if e, ok := w.byKey[key]; ok {
		w.mu.Unlock()
		select {
		case <-e.done:
			return e.seq, true, e.err
		case <-ctx.Done():
			return 0, true, ctx.Err()
		}
	}
	e := &idemEntry{key: key, ident: ident, at: now, done: make(chan struct{})}
	l := w.byIdnt[ident]
	if l == nil {
		l = list.New()
		w.byIdnt[ident] = l
	}
	for l.Len() >= per {
		w.removeLocked(l.Front().Value.(*idemEntry))
	}
	for w.order.Len() >= tot {
		w.removeLocked(w.order.Front().Value.(*idemEntry))
	}
	e.all = w.order.PushBack(e)
	e.own = l.PushBack(e)
	w.byKey[key] = e
	w.mu.Unlock()

	e.seq, e.err = publish()
	if e.err != nil {
		w.mu.Lock()
		w.removeLocked(e)
		w.mu.Unlock()
	}
	close(e.done)
	return e.seq, false, e.err
}

// HeaderPayload carries a publish's payload, base64url without padding,
// instead of the body. quic-go's HTTP/3 client (v0.65) cannot send a POST
// body in 0-RTT data: a request stream opened during the handshake always
// declares "content-length: 0" for a body-less POST, and RoundTrip waits
// for the handshake except for GET_0RTT/HEAD_0RTT. A publish in early data
// therefore carries its payload here.
const HeaderPayload = wire.HeaderPayload

// headerPayload returns the payload of Quiot-Payload when the body is empty.
func headerPayload(r *http.Request, body []byte, max int) ([]byte, error) {
	v := r.Header.Get(HeaderPayload)
	if v == "" {
		return body, nil
	}
	if len(body) > 0 {
		return nil, fmt.Errorf("%w: both a body and a %s header", errBadMsgID, HeaderPayload)
	}
	if base64.RawURLEncoding.DecodedLen(len(v)) > max {
		return nil, fmt.Errorf("%w: %s of %d bytes exceeds the limit of %d", ErrTooLarge, HeaderPayload, base64.RawURLEncoding.DecodedLen(len(v)), max)
	}
	p, err := base64.RawURLEncoding.DecodeString(v)
	if err != nil {
		return nil, fmt.Errorf("%w: bad %s (want base64url without padding): %w", errBadMsgID, HeaderPayload, err)
	}
	return p, nil
}

// errBadMsgID wraps a malformed message id (answered 400).
var errBadMsgID = errors.New("bad message id")

// publishOnce publishes m, once per message id when r carries one.
func (b *Broker) publishOnce(r *http.Request, m Message) (uint64, error) {
	id := r.Header.Get(HeaderMsgID)
	if id == "" {
		return b.space.Publish(r.Context(), m)
	}
	if err := validMsgID(id); err != nil {
		return 0, fmt.Errorf("%w: %w", errBadMsgID, err)
	}
	seq, repeat, err := b.idem.do(r.Context(), m.Identity, id, func() (uint64, error) {
		return b.space.Publish(r.Context(), m)
	})
	if repeat && err == nil {
		b.log.Debug("repeated message id answered again", "identity", m.Identity, "id", id, "seq", seq)
	}
	return seq, err
}
