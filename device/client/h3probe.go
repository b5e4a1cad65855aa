package client

import (
	"net"
	"sync"
	"time"
)

// probeGovernor holds back handshake probes on a slow link. quic-go (v0.65)
// probes an unanswered handshake after 200 ms, 600 ms, 1.4 s, ... (its PTO
// is 2 x 100 ms until the connection has an RTT sample of its own; an RTT
// restored from a token or ticket does not change it), and each probe is
// one or two padded 1200-byte datagrams: on a 20 kbit/s NB-IoT uplink that
// is 480 ms of airtime each, queued ahead of everything else, for a reply
// that cannot arrive before the RTT measured on earlier connections.
//
// The governor lets one flight of long-header datagrams through and then
// drops (reports as sent) the long-header datagrams quic-go makes within
// hold of it, unless a datagram from the peer arrived in between: an
// answer opens the next flight at once (the client's Finished after the
// broker's first flight), and a genuinely lost flight is resent at the
// first probe after hold. This applies to every handshake flight, not only
// the first: quic-go declares a packet lost when it probes (QueueProbePacket
// in internal/ackhandler), so when the broker acknowledges the first flight,
// the one that went out, quic-go takes no RTT sample from it and its
// Handshake-level probes run on 2 x 100 ms again. Short-header (1-RTT)
// datagrams always pass.
type probeGovernor struct {
	net.PacketConn
	hold time.Duration
	now  func() time.Time // nil: time.Now

	mu        sync.Mutex
	answered  bool      // a peer datagram arrived since the current flight began
	flightEnd time.Time // datagrams until then belong to the current flight
	next      time.Time // unanswered probes before then are held back
	held      int       // datagrams held back (tests, logs)
}

// flightGap is how long after a flight's first datagram the rest of that
// flight (coalesced 0-RTT data, a second probe packet) still passes.
const flightGap = 20 * time.Millisecond

func newProbeGovernor(pc net.PacketConn, hold time.Duration) *probeGovernor {
	return &probeGovernor{PacketConn: pc, hold: hold}
}

func (g *probeGovernor) clock() time.Time {
	if g.now != nil {
		return g.now()
	}
	return time.Now()
}

// pass reports whether datagram p may go out now.
func (g *probeGovernor) pass(p []byte) bool {
	if len(p) == 0 || p[0]&0x80 == 0 { // short header: 1-RTT data
		return true
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.clock()
	switch {
	case now.Before(g.flightEnd):
		return true
	case !g.answered && now.Before(g.next):
		g.held++
		return false
	}
	g.answered = false
	g.flightEnd = now.Add(flightGap)
	g.next = now.Add(g.hold)
	return true
}

// WriteTo implements net.PacketConn.
func (g *probeGovernor) WriteTo(p []byte, addr net.Addr) (int, error) {
	if !g.pass(p) {
		return len(p), nil
	}
	return g.PacketConn.WriteTo(p, addr)
}

// ReadFrom implements net.PacketConn.
func (g *probeGovernor) ReadFrom(p []byte) (int, net.Addr, error) {
	n, a, err := g.PacketConn.ReadFrom(p)
	if err == nil {
		g.mu.Lock()
		g.answered = true
		g.mu.Unlock()
	}
	return n, a, err
}

// SetReadBuffer passes quic-go's buffer sizing to the socket.
func (g *probeGovernor) SetReadBuffer(n int) error {
	if s, ok := g.PacketConn.(interface{ SetReadBuffer(int) error }); ok {
		return s.SetReadBuffer(n)
	}
	return nil
}

// SetWriteBuffer passes quic-go's buffer sizing to the socket.
func (g *probeGovernor) SetWriteBuffer(n int) error {
	if s, ok := g.PacketConn.(interface{ SetWriteBuffer(int) error }); ok {
		return s.SetWriteBuffer(n)
	}
	return nil
}

// coldProbeHold is how long the governor holds handshake probes back when
// no RTT to the broker is known (a device's first connection, no
// handshake_rtt). quic-go probes an unanswered handshake at 200 ms, 600 ms,
// 1.4 s and 3 s; on NB-IoT the broker's first flight arrives 1.5 s after
// the client's Initial (1200 bytes up at 20 kbit/s, 1200 down at 25
// kbit/s, 600 ms RTT), so the first three probes, six padded 1200-byte
// datagrams, were 2.9 s of uplink airtime that the client's Finished and
// first request queued behind, and each one let the broker, bound to three
// times what it received until the client's address is validated, send
// probes of its own ahead of its answer on the downlink. Held for 2 s,
// the first probe that goes is quic-go's at 3 s (RFC 9002's second PTO
// with its initial RTT of 333 ms); 2 s leaves its 1.4 s probe held when
// its timer fires late on a loaded host (held for 1.5 s, it went out in 1
// of 20 cold wake-ups on nbiot). A first flight lost on a fast link is resent after 3 s instead of
// 200 ms; handshake_rtt sets the hold for a known link (docs/TUNING.md).
const coldProbeHold = 2 * time.Second

// probeHold is the governor's hold for a client whose hold RTT is rtt
// (handshakeHold): 1.5 x rtt, or coldProbeHold without one.
func probeHold(rtt time.Duration) time.Duration {
	if rtt <= 0 {
		return coldProbeHold
	}
	return rtt * 3 / 2
}

// handshakeHold chooses the RTT of the handshake probe hold for a client
// of broker (host:port): Options.HandshakeRTT, else the profile's
// handshake_rtt, else, when the profile has handshake_rtt_from_session,
// the RTT the session cache remembers of the last connection to broker
// (RTTMemory; fromSession true). Zero means none is known (probeHold
// then holds for coldProbeHold).
func handshakeHold(o *Options, broker string) (rtt time.Duration, fromSession bool) {
	if o.HandshakeRTT > 0 {
		return o.HandshakeRTT, false
	}
	if o.Tuning == nil {
		return 0, false
	}
	if o.Tuning.HandshakeRTT > 0 {
		return time.Duration(o.Tuning.HandshakeRTT), false
	}
	if !o.Tuning.HandshakeRTTFromSession {
		return 0, false
	}
	if m, ok := o.SessionCache.(RTTMemory); ok {
		if rtt := m.LastRTT(broker); rtt > 0 {
			return rtt, true
		}
	}
	return 0, false
}

// HandshakeHold returns the RTT c's handshake probe hold started from
// (probes are held for 1.5 x it; 0: none known, held for 2 s) and whether it came from the
// session cache; zero for clients other than HTTP/3 and MQTT over QUIC and
// before c's first connection.
func HandshakeHold(c Client) (rtt time.Duration, fromSession bool) {
	if m, ok := c.(*mqttClient); ok {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.hold, m.holdFromSession
	}
	h, ok := c.(*h3Client)
	if !ok {
		return 0, false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.hold, h.holdFromSession
}

// SmoothedRTT returns the smoothed RTT of c's current HTTP/3 or MQTT over
// QUIC connection (0 for other clients and without a connection): what a later client of
// the same broker may pass as Options.HandshakeRTT.
func SmoothedRTT(c Client) time.Duration {
	if m, ok := c.(*mqttClient); ok {
		if qc := m.currentQUIC(); qc != nil {
			return qc.ConnectionStats().SmoothedRTT
		}
		return 0
	}
	h, ok := c.(*h3Client)
	if !ok {
		return 0
	}
	h.mu.Lock()
	cur := h.cur
	h.mu.Unlock()
	if cur == nil {
		return 0
	}
	return cur.qc.ConnectionStats().SmoothedRTT
}
