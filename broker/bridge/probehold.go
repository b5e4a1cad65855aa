package bridge

import (
	"net"
	"sync"
	"time"
)

// probeHold holds back the handshake probes of the bridge's MQTT over
// QUIC dials on a slow link (docs/bridge.md, "MQTT over QUIC"). quic-go
// (v0.65) probes an unanswered handshake after 200 ms, 600 ms, 1.4 s, ...
// (2 x 100 ms until the connection has an RTT sample of its own), each
// probe one or two padded 1200-byte datagrams: on a 20 kbit/s NB-IoT
// uplink 480 ms of airtime each, queued ahead of the handshake they
// repeat, for an answer that cannot come before the round trip the
// bridge's last connection measured.
//
// It lets one flight of long-header datagrams through and then drops
// (reports as sent) the long-header datagrams quic-go makes within hold of
// it, unless a datagram from the upstream arrived in between: an answer
// opens the next flight at once, and a flight really lost goes again at
// the first probe after hold. Short-header (1-RTT) datagrams always pass.
// (The same rule as quiot's device clients.)
type probeHold struct {
	net.PacketConn
	hold time.Duration
	now  func() time.Time // nil: time.Now

	mu        sync.Mutex
	answered  bool      // a datagram from the peer arrived since the flight began
	flightEnd time.Time // datagrams until then belong to the current flight
	next      time.Time // unanswered probes before then are held back
	held      int       // datagrams held back
}

// holdFlightGap is how long after a flight's first datagram the rest of
// that flight still passes.
const holdFlightGap = 20 * time.Millisecond

func newProbeHold(pc net.PacketConn, hold time.Duration) *probeHold {
	return &probeHold{PacketConn: pc, hold: hold}
}

func (g *probeHold) clock() time.Time {
	if g.now != nil {
		return g.now()
	}
	return time.Now()
}

// pass reports whether datagram p may go out now.
func (g *probeHold) pass(p []byte) bool {
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
	g.flightEnd = now.Add(holdFlightGap)
	g.next = now.Add(g.hold)
	return true
}

// WriteTo implements net.PacketConn.
func (g *probeHold) WriteTo(p []byte, addr net.Addr) (int, error) {
	if !g.pass(p) {
		return len(p), nil
	}
	return g.PacketConn.WriteTo(p, addr)
}

// ReadFrom implements net.PacketConn.
func (g *probeHold) ReadFrom(p []byte) (int, net.Addr, error) {
	n, a, err := g.PacketConn.ReadFrom(p)
	if err == nil {
		g.mu.Lock()
		g.answered = true
		g.mu.Unlock()
	}
	return n, a, err
}

// SetReadBuffer passes quic-go's buffer sizing to the socket.
func (g *probeHold) SetReadBuffer(n int) error {
	if s, ok := g.PacketConn.(interface{ SetReadBuffer(int) error }); ok {
		return s.SetReadBuffer(n)
	}
	return nil
}

// SetWriteBuffer passes quic-go's buffer sizing to the socket.
func (g *probeHold) SetWriteBuffer(n int) error {
	if s, ok := g.PacketConn.(interface{ SetWriteBuffer(int) error }); ok {
		return s.SetWriteBuffer(n)
	}
	return nil
}
