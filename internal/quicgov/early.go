package quicgov

import (
	"bytes"
	"container/list"
	"net"
	"net/netip"
	"time"
)

// This file keeps the client's 0-RTT datagrams that arrive before their
// Initial (its first datagram lost on the uplink) until the Initial comes:
// quic-go v0.65's server keeps such packets only until a packet for the
// server (not for a known connection) arrives more than 100 ms after them
// (server.go, zeroRTTQueue; it drops them after handling that packet, so
// a lone 0-RTT datagram still reaches an Initial that comes later), so on
// a slow uplink the client's next 0-RTT datagram, or another client's
// first datagram, makes quic-go drop them before the client's Initial
// probe arrives seconds later, and the client's request goes again as
// 1-RTT data only once the handshake has completed and quic-go declares
// it lost.

// DefaultEarlyAge is the least time a 0-RTT datagram waits for its
// Initial (Options.EarlyAge).
const DefaultEarlyAge = 3 * time.Second

const (
	// maxEarlyPerConn is how many 0-RTT datagrams are kept for one
	// destination connection ID and address; later ones pass.
	maxEarlyPerConn = 8
	// maxEarlyBytes bounds the bytes of the 0-RTT datagrams kept (and
	// released but not yet read by quic-go); beyond it, they pass.
	maxEarlyBytes = 128 << 10
	// maxEarlyConns bounds the connection IDs with 0-RTT datagrams kept;
	// beyond it, a 0-RTT datagram for another one passes.
	maxEarlyConns = 64
)

// earlyKey is a client's address and the destination connection ID of
// its Initial and 0-RTT packets.
type earlyKey struct {
	ap   netip.AddrPort
	dcid string
}

// early is what the governor knows of the long-header datagrams a client
// sent to one connection ID: whether its Initial came, and the 0-RTT
// datagrams kept until it does.
type early struct {
	key      earlyKey
	seen     bool      // a datagram with an Initial packet came
	deadline time.Time // when the kept datagrams go to quic-go anyway
	held     []inbound
	elem     *list.Element // in Conn.earlyHeld while held is not empty
}

// inbound is a datagram read from the socket, with its control messages
// (packet info, ECN) and flags when read with them.
type inbound struct {
	p, oob []byte
	flags  int
	addr   net.Addr
}

// admit notes datagram p (control messages oob, flags) read from addr
// and reports whether Conn keeps it: a 0-RTT datagram for a connection ID
// whose Initial has not come from addr. A datagram with an Initial packet
// queues what was kept for its connection ID and address, to be read
// right after it.
func (c *Conn) admit(p, oob []byte, flags int, addr net.Addr) bool {
	if len(p) == 0 {
		return false
	}
	c.received(p, addr)
	if p[0]&0x80 == 0 {
		return false
	}
	first := First(p)
	if first != Initial && first != ZeroRTT {
		return false
	}
	if _, err := Parse(p); err != nil {
		return false // quic-go judges it
	}
	ap, ok := addrPort(addr)
	if !ok {
		return false
	}
	key := earlyKey{ap, string(DestConnID(p))}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.early.get(key)
	if first == Initial {
		if !ok {
			e = &early{key: key}
			c.early.put(key, e)
		}
		e.seen = true
		if len(e.held) > 0 {
			c.stats.ZeroRTTMatched += int64(len(e.held))
			c.log.Debug("quicgov: 0-RTT datagrams handed over after their Initial", "peer", ap, "n", len(e.held))
			c.releaseEarly(e)
		}
		return false
	}
	switch {
	case ok && (e.seen || len(e.held) >= maxEarlyPerConn),
		c.earlyBytes+len(p) > maxEarlyBytes,
		(!ok || len(e.held) == 0) && c.earlyHeld.Len() >= maxEarlyConns:
		return false
	}
	if !ok {
		e = &early{key: key}
		c.early.put(key, e)
	}
	if len(e.held) == 0 {
		answer, _ := c.rtts.get(ap.Addr())
		e.deadline = c.now().Add(max(c.opts.EarlyAge, min(2*answer, c.opts.MaxHold)))
		e.elem = c.earlyHeld.PushBack(e)
	}
	e.held = append(e.held, inbound{bytes.Clone(p), bytes.Clone(oob), flags, addr})
	c.earlyBytes += len(p)
	c.earlyN.Add(1)
	c.stats.ZeroRTTHeld++
	c.log.Debug("quicgov: 0-RTT datagram kept until its Initial", "peer", ap)
	return true
}

// releaseEarly queues what e keeps to be read; c.mu is held. The bytes
// stay counted in earlyBytes until read.
func (c *Conn) releaseEarly(e *early) {
	c.pending = append(c.pending, e.held...)
	e.held = nil
	if e.elem != nil {
		c.earlyHeld.Remove(e.elem)
		e.elem = nil
	}
}

// expireEarly releases the 0-RTT datagrams kept past their deadline; c.mu
// is held.
func (c *Conn) expireEarly(now time.Time) {
	for el := c.earlyHeld.Front(); el != nil; {
		next := el.Next()
		if e := el.Value.(*early); !now.Before(e.deadline) {
			c.stats.ZeroRTTExpired += int64(len(e.held))
			c.log.Debug("quicgov: 0-RTT datagrams handed over without their Initial", "peer", e.key.ap, "n", len(e.held))
			c.releaseEarly(e)
		}
		el = next
	}
}

// earlyEvicted is the early table's eviction callback; c.mu is held.
func (c *Conn) earlyEvicted(_ earlyKey, e *early) {
	if len(e.held) > 0 {
		c.stats.ZeroRTTExpired += int64(len(e.held))
		c.releaseEarly(e)
	}
}

// nextPending returns a datagram to hand to quic-go before the socket is
// read: a released 0-RTT datagram.
func (c *Conn) nextPending() (inbound, bool) {
	if c.earlyN.Load() == 0 {
		return inbound{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.expireEarly(c.now())
	if len(c.pending) == 0 {
		return inbound{}, false
	}
	d := c.pending[0]
	c.pending[0] = inbound{}
	c.pending = c.pending[1:]
	c.earlyBytes -= len(d.p)
	c.earlyN.Add(-1)
	return d, true
}

// dropEarly forgets every 0-RTT datagram kept or released; c.mu is held.
func (c *Conn) dropEarly() {
	for el := c.earlyHeld.Front(); el != nil; el = el.Next() {
		e := el.Value.(*early)
		e.held, e.elem = nil, nil
	}
	c.earlyHeld.Init()
	c.pending = nil
	c.earlyBytes = 0
	c.earlyN.Store(0)
}
