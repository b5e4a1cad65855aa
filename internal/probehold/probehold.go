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
// broker's first flight) and drops what is held, and when the hold ends
// without an answer the newest probe held (a datagram that does not begin
// with a 0-RTT packet) goes out at once, opening
// the next flight and hold (a flight really lost goes again then, not at
// quic-go's next probe, up to 2 x the hold later; quic-go's own probe
// then falls inside the new hold, so this costs no datagram). This applies to every handshake flight, not
// only the first: quic-go declares a packet lost when it probes
// (QueueProbePacket in its internal/ackhandler), so when the broker
// acknowledges the first flight, the one that went out, quic-go takes no
// RTT sample from it and its Handshake-level probes run on 2 x 100 ms
// again. Short-header (1-RTT) datagrams always pass.
//
// With Options.FirstFlightCopies, a Conn also sends one copy of each
// datagram of a connection's first flight (its Initial and the 0-RTT
// datagrams within flightGap of it) when the flight gap has passed,
// unless a datagram from the peer came first: on a slow uplink the copies
// queue behind the flight and go out while the client waits for the
// answer anyway, and when the flight's first datagram is lost its copy
// arrives one flight's airtime later instead of a probe after the hold
// (docs/TUNING.md, "First-flight copies"). quic-go's server drops the
// duplicate packets (a duplicate packet number is dropped unacknowledged;
// the client's first destination connection ID stays routed to its
// connection until the handshake is complete).
package probehold

import (
	"bytes"
	"encoding/binary"
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
	// afterFunc runs f after d and returns what stops it; nil:
	// time.AfterFunc (tests set it).
	afterFunc func(d time.Duration, f func()) (stop func())

	mu        sync.Mutex
	answered  bool      // a peer datagram arrived since the current flight began
	flightEnd time.Time // datagrams until then belong to the current flight
	next      time.Time // unanswered probes before then are held back
	held      int       // datagrams held back
	released  int       // held datagrams sent when their hold ended
	last      []byte    // the newest datagram held in the current hold
	lastTo    net.Addr  // ... and its destination
	stop      func()    // stops the timer that sends last when the hold ends

	opts     Options
	seen     [][]byte   // recent connection keys (connKey; maxSeen)
	copyKey  []byte     // connection key of the first flight being copied
	copies   []datagram // its datagrams, sent again when the flight gap has passed
	copyStop func()     // stops the timer that sends copies
	copyGen  int        // counts first flights copied (a timer sends its own flight's)
	copied   int        // copies sent
}

// Options configure a Conn; the zero value is New's.
type Options struct {
	// FirstFlightCopies sends one copy of each datagram of a connection's
	// first flight (see the package documentation) after the flight,
	// unless the peer answered first. Default off: New's Conn sends no
	// copies; quiot's clients turn it on with the tuning profile's
	// first_flight_copies (lean) when they know an RTT to the broker.
	FirstFlightCopies bool
}

// datagram is a datagram to copy and its destination.
type datagram struct {
	p  []byte
	to net.Addr
}

// maxSeen is how many connections a Conn remembers to tell a new
// connection's first Initial from a later one (a probe, the Initial
// that acknowledges the peer's).
const maxSeen = 8

// flightGap is how long after a flight's first datagram the rest of that
// flight (coalesced 0-RTT data, a second probe packet) still passes.
const flightGap = 20 * time.Millisecond

// New returns pc with handshake probes held for hold after each flight.
func New(pc net.PacketConn, hold time.Duration) *Conn {
	return NewWithOptions(pc, hold, Options{})
}

// NewWithOptions returns pc with handshake probes held for hold after
// each flight, and the options o.
func NewWithOptions(pc net.PacketConn, hold time.Duration, o Options) *Conn {
	return &Conn{Conn: sockbuf.Wrap(pc), hold: hold, opts: o}
}

// FirstFlightCopies reports whether c copies first flights
// (Options.FirstFlightCopies).
func (c *Conn) FirstFlightCopies() bool { return c.opts.FirstFlightCopies }

// Copied is the number of first-flight copies sent so far.
func (c *Conn) Copied() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.copied
}

// Hold is the time probes are held after a flight.
func (c *Conn) Hold() time.Duration { return c.hold }

// Held is the number of datagrams held back so far.
func (c *Conn) Held() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.held
}

// Released is the number of held datagrams sent when their hold ended
// without an answer.
func (c *Conn) Released() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.released
}

func (c *Conn) clock() time.Time {
	if c.now != nil {
		return c.now()
	}
	return time.Now()
}

// after runs f after d (afterFunc, or time.AfterFunc).
func (c *Conn) after(d time.Duration, f func()) func() {
	if c.afterFunc != nil {
		return c.afterFunc(d, f)
	}
	t := time.AfterFunc(d, f)
	return func() { t.Stop() }
}

// pass reports whether datagram p to addr may go out now; a datagram
// held becomes the one sent when the hold ends unanswered.
func (c *Conn) pass(p []byte, addr net.Addr) bool {
	if len(p) == 0 || p[0]&0x80 == 0 { // short header: 1-RTT data
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.clock()
	switch {
	case now.Before(c.flightEnd):
		if c.copyStop != nil && bytes.Equal(connKey(p), c.copyKey) {
			c.copies = append(c.copies, datagram{bytes.Clone(p), addr})
		}
		return true
	case !c.answered && now.Before(c.next):
		c.held++
		if zeroRTT(p) {
			return false // not a probe: quic-go probes with Initial and Handshake packets
		}
		c.last = append(c.last[:0], p...)
		c.lastTo = addr
		if c.stop == nil {
			end := c.next
			c.stop = c.after(end.Sub(now), func() { c.release(end) })
		}
		return false
	}
	c.dropLast() // a probe of quic-go's own after the hold takes its place
	c.answered = false
	c.flightEnd = now.Add(flightGap)
	c.next = now.Add(c.hold)
	if c.opts.FirstFlightCopies && c.hold > 0 {
		c.firstFlight(p, addr)
	}
	return true
}

// firstFlight starts copying the flight that p opens when p is the first
// Initial of a new connection (a connection key not seen before); c.mu is
// held.
func (c *Conn) firstFlight(p []byte, addr net.Addr) {
	if !initial(p) {
		return
	}
	key := connKey(p)
	if key == nil || c.seenID(key) {
		return
	}
	c.remember(key)
	c.dropCopies()
	c.copyKey = key
	c.copies = []datagram{{bytes.Clone(p), addr}}
	c.copyGen++
	gen := c.copyGen
	c.copyStop = c.after(flightGap, func() { c.sendCopies(gen) })
}

// sendCopies sends the copies of first flight gen, which has ended
// without an answer.
func (c *Conn) sendCopies(gen int) {
	c.mu.Lock()
	if gen != c.copyGen {
		c.mu.Unlock()
		return
	}
	cs := c.copies
	c.copies, c.copyStop = nil, nil
	c.copied += len(cs)
	c.mu.Unlock()
	for _, d := range cs {
		_, _ = c.PacketConn.WriteTo(d.p, d.to) // as quic-go's own write would, unreported
	}
}

// dropCopies forgets the copies not sent and stops their timer; c.mu is
// held.
func (c *Conn) dropCopies() {
	if c.copyStop != nil {
		c.copyStop()
		c.copyStop = nil
	}
	c.copies = nil
}

// seenID reports whether connection key id is among those remembered;
// c.mu is held.
func (c *Conn) seenID(id []byte) bool {
	for _, s := range c.seen {
		if bytes.Equal(s, id) {
			return true
		}
	}
	return false
}

// remember adds connection key id to those remembered (the oldest goes
// beyond maxSeen); c.mu is held.
func (c *Conn) remember(id []byte) {
	if id == nil || c.seenID(id) {
		return
	}
	if len(c.seen) >= maxSeen {
		c.seen = append(c.seen[:0], c.seen[1:]...)
	}
	c.seen = append(c.seen, bytes.Clone(id))
}

// release sends the newest datagram held when the hold that ended at end
// ended without an answer; it opens the next flight and hold (the
// datagram is that flight, alone).
func (c *Conn) release(end time.Time) {
	c.mu.Lock()
	if c.last == nil || c.answered || !c.next.Equal(end) {
		c.mu.Unlock()
		return
	}
	p, to := c.last, c.lastTo
	c.last, c.lastTo, c.stop = nil, nil, nil
	now := c.clock()
	c.flightEnd = now
	c.next = now.Add(c.hold)
	c.released++
	c.mu.Unlock()
	_, _ = c.PacketConn.WriteTo(p, to) // as quic-go's own write would, unreported
}

// zeroRTT reports whether long-header datagram p begins with a 0-RTT
// packet (QUIC version 1 or 2, RFC 9369).
func zeroRTT(p []byte) bool {
	if len(p) < 5 {
		return false
	}
	switch binary.BigEndian.Uint32(p[1:5]) {
	case 1:
		return p[0]&0x30 == 0x10
	case 0x6b3343cf:
		return p[0]&0x30 == 0x20
	}
	return false
}

// initial reports whether long-header datagram p begins with an Initial
// packet (QUIC version 1 or 2).
func initial(p []byte) bool {
	if len(p) < 5 || p[0]&0x80 == 0 {
		return false
	}
	switch binary.BigEndian.Uint32(p[1:5]) {
	case 1:
		return p[0]&0x30 == 0x00
	case 0x6b3343cf:
		return p[0]&0x30 == 0x10
	}
	return false
}

// destConnID returns the destination connection ID of the long-header
// packet at the start of p (nil: none, or malformed).
func destConnID(p []byte) []byte {
	if len(p) < 6 || p[0]&0x80 == 0 || int(p[5]) > 20 || len(p) < 6+int(p[5]) {
		return nil
	}
	return p[6 : 6+int(p[5])]
}

// connKey identifies the connection of the client's long-header
// datagram p (nil: malformed): its source connection ID, which a client
// keeps for the connection's long-header packets, or, when that is
// empty, its destination connection ID with a different first byte. The
// destination ID alone will not do: quic-go's client sends the Initial
// that acknowledges the server's to an ID of the server's, and may
// already have moved to one the server issued in its first flight.
func connKey(p []byte) []byte {
	d, s := destConnID(p), srcConnID(p)
	switch {
	case d == nil || s == nil:
		return nil
	case len(s) > 0:
		return append([]byte{'s'}, s...)
	}
	return append([]byte{'d'}, d...)
}

// srcConnID returns the source connection ID of the long-header packet at
// the start of p (nil: none, or malformed).
func srcConnID(p []byte) []byte {
	d := destConnID(p)
	if d == nil {
		return nil
	}
	o := 6 + len(d)
	if len(p) < o+1 || int(p[o]) > 20 || len(p) < o+1+int(p[o]) {
		return nil
	}
	return p[o+1 : o+1+int(p[o])]
}

// dropLast forgets the datagram held and stops its timer; c.mu is held.
func (c *Conn) dropLast() {
	if c.stop != nil {
		c.stop()
		c.stop = nil
	}
	c.last, c.lastTo = nil, nil
}

// WriteTo implements net.PacketConn: a held datagram is reported as sent.
func (c *Conn) WriteTo(p []byte, addr net.Addr) (int, error) {
	if !c.pass(p, addr) {
		return len(p), nil
	}
	return c.PacketConn.WriteTo(p, addr)
}

// ReadFrom implements net.PacketConn; a datagram read is the peer's
// answer, and drops what is held and the first flight's copies not sent.
func (c *Conn) ReadFrom(p []byte) (int, net.Addr, error) {
	n, a, err := c.PacketConn.ReadFrom(p)
	if err == nil {
		c.mu.Lock()
		c.answered = true
		c.dropLast()
		c.dropCopies()
		if c.opts.FirstFlightCopies && n > 0 {
			// The peer's connection ID: a client without connection IDs
			// of its own sends its later Initials to it (connKey).
			if s := srcConnID(p[:n]); len(s) > 0 {
				c.remember(append([]byte{'d'}, s...))
			}
		}
		c.mu.Unlock()
	}
	return n, a, err
}

// Close drops what is held and closes the socket.
func (c *Conn) Close() error {
	c.mu.Lock()
	c.dropLast()
	c.dropCopies()
	c.mu.Unlock()
	return c.PacketConn.Close()
}
