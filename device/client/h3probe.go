package client

import (
	"time"

	"github.com/quiot/quiot/internal/probehold"
)

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

// probeHoldOptions are the options of the probe hold of a client whose
// hold RTT is rtt: first-flight copies when the profile has
// first_flight_copies and an RTT is known (a warm wake-up: a first
// connection's Initial carries no 0-RTT data and its answer is the
// broker's certificate chain, seconds away on NB-IoT; docs/TUNING.md).
func probeHoldOptions(o *Options, rtt time.Duration) probehold.Options {
	return probehold.Options{FirstFlightCopies: rtt > 0 && o.Tuning != nil && o.Tuning.FirstFlightCopies}
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
