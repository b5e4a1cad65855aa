// Package probehold holds back a QUIC client's handshake probes on a slow
// link. quic-go (v0.65) probes an unanswered handshake after 200 ms,
// 600 ms, 1.4 s, ... (its PTO is 2 x 100 ms until the connection has an
// RTT sample of its own; an RTT restored from a token or ticket does not
// change it), and each probe is one or two padded 1200-byte datagrams: on
// a 20 kbit/s NB-IoT uplink that is 480 ms of airtime each, queued ahead
// of everything else, for an answer that cannot arrive before the RTT
// measured on earlier connections (docs/TUNING.md). quiot's device
// clients (device/client) and the broker's MQTT over QUIC bridges
// (broker/bridge) dial through it.
//
// A Conn lets one flight of long-header datagrams through and then drops
// (reports as sent) the long-header datagrams quic-go makes within the
// hold of it, unless a datagram from the peer arrived in between: an
// answer opens the next flight at once (the client's Finished after the
// broker's first flight), and a flight really lost goes again at the
// first probe after the hold. This applies to every handshake flight, not
// only the first: quic-go declares a packet lost when it probes
// (QueueProbePacket in its internal/ackhandler), so when the broker
// acknowledges the first flight, the one that went out, quic-go takes no
// RTT sample from it and its Handshake-level probes run on 2 x 100 ms
// again. Short-header (1-RTT) datagrams always pass.
package probehold

import (
	"net"
	"sync"
	"time"

	"github.com/quiot/quiot/internal/sockbuf"
)

// Conn is a net.PacketConn under the hold (see the package
// documentation); quic-go's Transport takes it as its Conn.
type Conn struct {
	sockbuf.Conn // passes quic-go's buffer sizing through
	hold         time.Duration
	now          func() time.Time // nil: time.Now (tests set it)

	mu        sync.Mutex
	answered  bool      // a peer datagram arrived since the current flight began
	flightEnd time.Time // datagrams until then belong to the current flight
	next      time.Time // unanswered probes before then are held back
	held      int       // datagrams held back
}

// flightGap is how long after a flight's first datagram the rest of that
// flight (coalesced 0-RTT data, a second probe packet) still passes.
const flightGap = 20 * time.Millisecond

// New returns pc with handshake probes held for hold after each flight.
func New(pc net.PacketConn, hold time.Duration) *Conn {
	return &Conn{Conn: sockbuf.Wrap(pc), hold: hold}
}

// Hold is the time probes are held after a flight.
func (c *Conn) Hold() time.Duration { return c.hold }

// Held is the number of datagrams held back so far.
func (c *Conn) Held() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.held
}

func (c *Conn) clock() time.Time {
	if c.now != nil {
		return c.now()
	}
	return time.Now()
}

// pass reports whether datagram p may go out now.
func (c *Conn) pass(p []byte) bool {
	if len(p) == 0 || p[0]&0x80 == 0 { // short header: 1-RTT data
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.clock()
	switch {
	case now.Before(c.flightEnd):
		return true
	case !c.answered && now.Before(c.next):
		c.held++
		return false
	}
	c.answered = false
	c.flightEnd = now.Add(flightGap)
	c.next = now.Add(c.hold)
	return true
}

// WriteTo implements net.PacketConn: a held datagram is reported as sent.
func (c *Conn) WriteTo(p []byte, addr net.Addr) (int, error) {
	if !c.pass(p) {
		return len(p), nil
	}
	return c.PacketConn.WriteTo(p, addr)
}

// ReadFrom implements net.PacketConn; a datagram read is the peer's
// answer.
func (c *Conn) ReadFrom(p []byte) (int, net.Addr, error) {
	n, a, err := c.PacketConn.ReadFrom(p)
	if err == nil {
		c.mu.Lock()
		c.answered = true
		c.mu.Unlock()
	}
	return n, a, err
}
