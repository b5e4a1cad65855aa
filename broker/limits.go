package broker

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/quiot/quiot/broker/space"
	"github.com/quiot/quiot/internal/srcvalid"
)

// Bounds on what HTTP clients can make the broker hold (Limits): open
// connections in total, per remote address and per identity, and live
// subscriptions in total and per identity. Each refusal is counted in
// Stats.Refused under the limit's name.
//
// An HTTP/3 connection beyond MaxConns or MaxConnsPerAddr is refused during
// the QUIC handshake (CONNECTION_REFUSED): the client has sent one Initial
// packet and the broker holds nothing for it. A TCP connection beyond them
// is accepted, answered 503 with the reason and closed (a TCP client would
// only see a reset otherwise); at most maxRefusing such connections are
// held at once, each for refuseDeadline at most, and beyond that the
// broker closes new TCP connections at once.

// Names of the limits in Stats.Refused.
const (
	RefusedConns                    = "conns"
	RefusedConnsPerAddr             = "conns_per_addr"
	RefusedConnsPerIdentity         = "conns_per_identity"
	RefusedSubscriptions            = "subscriptions"
	RefusedSubscriptionsPerIdentity = "subscriptions_per_identity"
	RefusedSubscriptionsPerConn     = "subscriptions_per_conn"
)

const (
	// maxRefusing bounds the TCP connections held to be answered 503.
	maxRefusing = 64
	// refuseDeadline bounds the life of such a connection.
	refuseDeadline = 10 * time.Second
)

// Errors of the connection and subscription limits, tested with errors.Is.
var (
	// ErrTooManyConns: Limits.MaxConns, MaxConnsPerAddr or
	// MaxConnsPerIdentity is reached.
	ErrTooManyConns = errors.New("too many connections")
)

// keyedLimiter counts holders by key, in total and per key.
type keyedLimiter struct {
	maxTotal, maxPerKey int

	mu    sync.Mutex
	total int
	byKey map[string]int
}

func newKeyedLimiter(maxTotal, maxPerKey int) *keyedLimiter {
	return &keyedLimiter{maxTotal: maxTotal, maxPerKey: maxPerKey, byKey: map[string]int{}}
}

// acquire takes one slot for key: overTotal or overKey says which bound
// refused it (maxTotal <= 0 means no total bound).
func (l *keyedLimiter) acquire(key string) (overTotal, overKey bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.maxTotal > 0 && l.total >= l.maxTotal {
		return true, false
	}
	if l.byKey[key] >= l.maxPerKey {
		return false, true
	}
	l.total++
	l.byKey[key]++
	return false, false
}

func (l *keyedLimiter) release(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.total--
	if n := l.byKey[key] - 1; n > 0 {
		l.byKey[key] = n
	} else {
		delete(l.byKey, key)
	}
}

// limiters are the broker's HTTP-side bounds.
type limiters struct {
	conns    *keyedLimiter // by remote IP
	idConns  *keyedLimiter // by identity (per key only)
	subs     *keyedLimiter // by identity, or "\x00"+IP for anonymous clients
	refusing atomic.Int32
}

func newLimiters(l Limits) *limiters {
	return &limiters{
		conns:   newKeyedLimiter(l.MaxConns, l.MaxConnsPerAddr),
		idConns: newKeyedLimiter(0, l.MaxConnsPerIdentity),
		subs:    newKeyedLimiter(l.MaxSubscriptions, l.MaxSubscriptionsPerIdentity),
	}
}

// refuse counts a refusal by the named limit.
func (c *counters) refuse(limit string) {
	v, ok := c.refused.Load(limit)
	if !ok {
		v, _ = c.refused.LoadOrStore(limit, new(atomic.Uint64))
	}
	v.(*atomic.Uint64).Add(1)
}

// addrKey is the IP address of a remote address (no port).
func addrKey(a net.Addr) string {
	switch a := a.(type) {
	case *net.UDPAddr:
		return a.IP.String()
	case *net.TCPAddr:
		return a.IP.String()
	case nil:
		return ""
	}
	return hostOf(a.String())
}

func hostOf(hostport string) string {
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return h
	}
	return hostport
}

// admitConn takes a connection slot for a remote address of protocol
// proto, or returns the reason it is refused (counted: by the limit and as
// ReasonTooMany).
func (b *Broker) admitConn(proto, addr string) error {
	overTotal, overAddr := b.lim.conns.acquire(addr)
	if overTotal || overAddr {
		b.stats.countRefused(proto, ReasonTooMany)
	}
	switch {
	case overTotal:
		b.stats.refuse(RefusedConns)
		return fmt.Errorf("%w: the broker holds its limit of %d connections", ErrTooManyConns, b.opts.Limits.MaxConns)
	case overAddr:
		b.stats.refuse(RefusedConnsPerAddr)
		return fmt.Errorf("%w: %d connections from %s, the limit per address", ErrTooManyConns, b.opts.Limits.MaxConnsPerAddr, addr)
	}
	return nil
}

// quicAdmit is the QUIC transport's ConnContext: it admits a connection
// attempt within MaxConns and MaxConnsPerAddr and frees its slot when the
// connection ends (or its handshake fails).
func (b *Broker) quicAdmit(ctx context.Context, ci *quic.ClientInfo) (context.Context, error) {
	addr := addrKey(ci.RemoteAddr)
	if err := b.admitConn(ProtoH3, addr); err != nil {
		b.log.Debug("quic connection refused", "remote", ci.RemoteAddr.String(), "error", err)
		return ctx, err
	}
	context.AfterFunc(ctx, func() { b.lim.conns.release(addr) })
	// Counted as half-open until its handshake completes, when its
	// address is not validated: many such handshakes make new attempts
	// prove their address first (a Retry), so that spoofed Initial
	// packets cannot keep other addresses' slots (srcvalid).
	return b.srcValid.Begin(ctx, ci), nil
}

// validatedListener ends the half-open count of each connection it
// accepts (srcvalid.Established).
type validatedListener struct{ http3.QUICListener }

func (l validatedListener) Accept(ctx context.Context) (*quic.Conn, error) {
	c, err := l.QUICListener.Accept(ctx)
	if err == nil {
		srcvalid.Established(c)
	}
	return c, err
}

// limitListener admits TCP connections within MaxConns and MaxConnsPerAddr.
type limitListener struct {
	net.Listener
	b *Broker
}

func (l limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		addr := addrKey(c.RemoteAddr())
		err = l.b.admitConn(ProtoTCP, addr)
		if err == nil {
			return &limitedConn{Conn: c, release: func() { l.b.lim.conns.release(addr) }}, nil
		}
		if l.b.lim.refusing.Add(1) <= maxRefusing {
			_ = c.SetDeadline(time.Now().Add(refuseDeadline))
			return &limitedConn{Conn: c, refused: err, release: func() { l.b.lim.refusing.Add(-1) }}, nil
		}
		l.b.lim.refusing.Add(-1)
		_ = c.Close()
	}
}

// limitedConn frees its slot once closed; refused, when set, is the reason
// its requests are answered 503.
type limitedConn struct {
	net.Conn
	refused error
	once    sync.Once
	release func()
	// onClose is the connection's state, whose identity slot is freed
	// once the connection is closed.
	onClose atomic.Pointer[connState]
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.release()
		if cs := c.onClose.Load(); cs != nil {
			cs.closed()
		}
	})
	return err
}

// limitedOf returns the limitedConn under a TCP connection, or nil.
func limitedOf(c net.Conn) *limitedConn {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	lc, _ := c.(*limitedConn)
	return lc
}

// bindLocked binds the connection to identity id, within
// MaxConnsPerIdentity. cs.mu held.
func (cs *connState) bindLocked(id string) error {
	if cs.b != nil && !cs.ended {
		if _, over := cs.b.lim.idConns.acquire(id); over {
			cs.b.stats.refuse(RefusedConnsPerIdentity)
			return fmt.Errorf("%w: identity %q has %d connections open, its limit", ErrTooManyConns, id, cs.b.opts.Limits.MaxConnsPerIdentity)
		}
		cs.counted = true
	}
	cs.authed, cs.identity = true, id
	return nil
}

// closed frees the connection's identity slot; a request still running
// on the ended connection binds without taking one.
func (cs *connState) closed() {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cs.ended = true
	if cs.counted {
		cs.counted = false
		cs.b.lim.idConns.release(cs.identity)
	}
}

// admitSubscription takes a subscription slot for the identity (anonymous:
// the remote address), or answers the refusal and returns ok=false.
func (b *Broker) admitSubscription(r *http.Request, id string) (release func(), status int, err error) {
	key := id
	if id == "" {
		key = "\x00" + hostOf(r.RemoteAddr) // no identity holds a NUL
	}
	overTotal, overKey := b.lim.subs.acquire(key)
	switch {
	case overTotal:
		b.stats.refuse(RefusedSubscriptions)
		return nil, http.StatusServiceUnavailable, fmt.Errorf("%w: the broker holds its limit of %d subscriptions", ErrTooManySubscriptions, b.opts.Limits.MaxSubscriptions)
	case overKey:
		b.stats.refuse(RefusedSubscriptionsPerIdentity)
		who := fmt.Sprintf("identity %q", id)
		if id == "" {
			who = "anonymous clients from " + hostOf(r.RemoteAddr)
		}
		return nil, http.StatusTooManyRequests, fmt.Errorf("%w: %s hold %d subscriptions, the limit", ErrTooManySubscriptions, who, b.opts.Limits.MaxSubscriptionsPerIdentity)
	}
	return func() { b.lim.subs.release(key) }, 0, nil
}

// streamInflight bounds the QoS 0 frames of one publish stream that the
// store has not yet committed (Limits.StreamInflight): with a store, a QoS 0
// publish returns once queued for the next commit, so a fast stream could
// queue without end while commits are slow. Every StreamInflight-th such
// frame waits for its commit; commits are in sequence order, so the frames
// before it are then stored too. Without a store a publish is applied before
// it returns and nothing is in flight.
type streamInflight struct {
	b *Broker
	n int // QoS 0 frames published since the last wait
}

// ctx returns the context to publish m with.
func (s *streamInflight) ctx(ctx context.Context, m *Message) context.Context {
	if s.b.opts.Store == nil {
		return ctx
	}
	if m.QoS > 0 {
		s.n = 0 // waits for its commit, and so for the frames before it
		return ctx
	}
	s.n++
	if s.n < s.b.opts.Limits.StreamInflight {
		return ctx
	}
	s.n = 0
	s.b.stats.inflightWaits.Add(1)
	return space.WithCommitWait(ctx)
}
