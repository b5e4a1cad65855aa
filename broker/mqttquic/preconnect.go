package mqttquic

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quiot/quiot/broker"
)

// errPreConnectLimit ends a connection refused because its source address
// already holds Limits.MaxPreConnectPerAddr connections without CONNECT.
var errPreConnectLimit = errors.New("too many connections without CONNECT from this address")

// preConnect bounds the connections (MQTT over QUIC, TCP and TLS) that
// have not sent CONNECT yet: each gets Limits.ConnectTimeout to send it
// (TLS handshake included) and is closed otherwise, and one source address
// holds at most Limits.MaxPreConnectPerAddr of them at a time. Without it
// a client that never sends CONNECT holds a socket (a file descriptor)
// for ever, counted nowhere (docs/security.md, Bounds).
type preConnect struct {
	timeout time.Duration
	perAddr int

	mu sync.Mutex
	n  map[netip.Addr]int

	refused, timedOut atomic.Uint64
	// core, when set, counts each refusal and close as
	// quiot_broker_refused_total{proto="mqtt",reason="too_many"}.
	core Core
}

func newPreConnect(l Limits) *preConnect {
	return &preConnect{timeout: l.ConnectTimeout, perAddr: l.MaxPreConnectPerAddr, n: make(map[netip.Addr]int)}
}

// addrOf returns the source address of c (IPv4-mapped addresses
// unmapped), or the zero Addr when it has none.
func addrOf(c net.Conn) netip.Addr {
	ra := c.RemoteAddr()
	if ra == nil {
		return netip.Addr{}
	}
	ap, err := netip.ParseAddrPort(ra.String())
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
}

// admit counts c as waiting for its CONNECT and sets its deadline; it
// returns c's place (release ends it), or an error when c's address is at
// its bound.
func (p *preConnect) admit(c net.Conn) (*pending, error) {
	a := addrOf(c)
	if err := p.take(a); err != nil {
		return nil, err
	}
	w := &pending{p: p, a: a, c: c}
	// The timer closes the connection (a read deadline would leave the
	// counting to whoever sees the error, after the peer saw the close).
	w.timer.Store(time.AfterFunc(p.timeout, w.expire))
	return w, nil
}

// pending is a TCP, TLS or WebSocket connection's place among those
// without CONNECT (admit). It is one allocation that the connection's
// tracking keeps for its life, the timer dropped once released: three
// closures and the stopped timer were kept instead, about 250 bytes per
// connected client (docs/BENCH.md, "Heap per idle client, site by site").
type pending struct {
	p     *preConnect
	a     netip.Addr
	c     net.Conn
	freed atomic.Bool
	timer atomic.Pointer[time.Timer] // nil once released
}

// expire closes the connection when it is still without CONNECT at its
// deadline.
func (w *pending) expire() {
	if w.free() {
		w.p.timedOut.Add(1)
		countRefused(w.p.core, broker.ReasonTooMany)
		_ = w.c.Close()
	}
}

// release frees the connection's place and stops its deadline
// (idempotent); it reports whether it freed the place.
func (w *pending) release() bool {
	if t := w.timer.Swap(nil); t != nil {
		t.Stop()
	}
	return w.free()
}

// free frees the connection's place once; it reports whether this call
// freed it.
func (w *pending) free() bool {
	if !w.freed.CompareAndSwap(false, true) {
		return false
	}
	w.p.put(w.a)
	return true
}

// take counts one connection without CONNECT from a, or returns an error,
// counted as a refusal, when a is at its bound.
func (p *preConnect) take(a netip.Addr) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.n[a] >= p.perAddr {
		p.refused.Add(1)
		countRefused(p.core, broker.ReasonTooMany)
		return fmt.Errorf("%w (%s: %d, Limits.MaxPreConnectPerAddr)", errPreConnectLimit, a, p.perAddr)
	}
	p.n[a]++
	return nil
}

// put frees what take counted.
func (p *preConnect) put(a netip.Addr) {
	p.mu.Lock()
	if p.n[a]--; p.n[a] <= 0 {
		delete(p.n, a)
	}
	p.mu.Unlock()
}

// charge counts one connection without CONNECT from a; it returns the
// function that frees it (idempotent, reports whether it freed), or an
// error, counted as a refusal, when a is at its bound.
func (p *preConnect) charge(a netip.Addr) (free func() bool, err error) {
	if err := p.take(a); err != nil {
		return nil, err
	}
	var once atomic.Bool
	return func() bool {
		if !once.CompareAndSwap(false, true) {
			return false
		}
		p.put(a)
		return true
	}, nil
}

// admitQUIC is ListenerConfig.Admit: an MQTT-over-QUIC connection counts
// among its address's connections without CONNECT from its handshake
// (from its first packet when its address is validated) until its MQTT
// stream reaches the broker, where admit counts it again until CONNECT.
// Without it a connection whose stream sends nothing (the broker never
// sees such a stream) was counted in no per-address bound.
func (p *preConnect) admitQUIC(addr net.Addr) (release func(), err error) {
	a := netip.Addr{}
	if addr != nil {
		if ap, perr := netip.ParseAddrPort(addr.String()); perr == nil {
			a = ap.Addr().Unmap()
		}
	}
	free, err := p.charge(a)
	if err != nil {
		return nil, err
	}
	return func() { free() }, nil
}
