package client

import (
	"context"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/quic-go/quic-go"
)

// probeTimeout bounds one path validation after an address change:
// four smoothed RTTs, at least 1 s. quic-go (v0.65) answers a PATH_CHALLENGE
// only when it comes from an address other than the connection's current
// one, so when the broker has already moved the connection to the new
// address (the device sent something from it first) the probe goes
// unanswered, and the connection is already where it should be.
func probeTimeout(qc *quic.Conn) time.Duration {
	return max(time.Second, 4*qc.ConnectionStats().SmoothedRTT)
}

// migrator makes the broker follow the client's current QUIC connection
// to the device's new address as soon as the source address the device
// would send from to the broker changes (connection migration, RFC 9000 §9;
// docs/TUNING.md, "NAT bindings and connection migration"). The client's
// socket is not bound to an address, so after a change the kernel already
// sends from the new address, and the broker would follow at the
// connection's next datagram; but a device that only receives sends
// nothing until its next acknowledgement or keep-alive (up to the
// keep-alive period), and the broker's messages meanwhile go to the old
// address. The migrator sends at once: quic-go's Conn.AddPath on the same
// socket and Path.Probe, a PATH_CHALLENGE under a new connection ID from
// the new address, which the broker answers and validates; it moves the
// connection at the client's next packet (the acknowledgement of its
// answer).
type migrator struct {
	log     *slog.Logger
	tr      *quic.Transport
	watch   *addrWatch
	current func() *quic.Conn // the live connection, nil if none
	kick    chan struct{}

	mu     sync.Mutex
	conn   *quic.Conn   // the connection src belongs to
	remote *net.UDPAddr // its broker address, read once
	src    netip.Addr   // the source address towards the broker; invalid: no route
}

// startMigrator watches the addresses of the namespace of u's socket and
// migrates current() after each change of its source address, until ctx
// ends. Without an address watch (not Linux, or netlink refused) it
// returns nil: the broker then follows the device at its next datagram.
func startMigrator(ctx context.Context, log *slog.Logger, u *net.UDPConn, tr *quic.Transport, current func() *quic.Conn) *migrator {
	m := &migrator{log: log, tr: tr, current: current, kick: make(chan struct{}, 1)}
	w, err := watchAddresses(ctx, u, m.changed)
	if err != nil {
		log.Debug("no address watch: a connection moves at its next datagram after an address change", "error", err)
		return nil
	}
	m.watch = w
	go m.run(ctx)
	return m
}

// connected records the source address of a new connection qc.
func (m *migrator) connected(qc *quic.Conn) {
	if m == nil {
		return
	}
	ra, _ := qc.RemoteAddr().(*net.UDPAddr)
	var src netip.Addr
	if ra != nil {
		src, _ = m.watch.source(ra)
	}
	m.mu.Lock()
	m.conn, m.remote, m.src = qc, ra, src
	m.mu.Unlock()
}

// changed is the address watch's callback: it coalesces changes.
func (m *migrator) changed() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

func (m *migrator) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.kick:
		}
		qc := m.current()
		if qc == nil || qc.Context().Err() != nil {
			continue
		}
		m.mu.Lock()
		ra, same := m.remote, m.conn == qc
		m.mu.Unlock()
		if !same || ra == nil {
			continue
		}
		src, err := m.watch.source(ra)
		m.mu.Lock()
		from := m.src
		if m.conn == qc {
			m.src = src // invalid while there is no route
		}
		m.mu.Unlock()
		if err != nil || src == from {
			continue
		}
		m.migrate(ctx, qc, ra, from, src)
	}
}

// migrate probes a new path for qc on the same socket, then closes it.
func (m *migrator) migrate(ctx context.Context, qc *quic.Conn, broker *net.UDPAddr, from, to netip.Addr) {
	select {
	case <-qc.HandshakeComplete():
	default:
		return // a connection migrates only once its handshake is done (RFC 9000 §9)
	}
	p, err := qc.AddPath(m.tr)
	if err != nil {
		m.log.Info("local address changed; no migration", "from", from, "to", to, "error", err)
		return
	}
	m.log.Info("local address changed; probing the broker from the new address", "from", from, "to", to)
	pctx, cancel := context.WithTimeout(ctx, probeTimeout(qc))
	defer cancel()
	received := qc.ConnectionStats().PacketsReceived
	if err := p.Probe(pctx); err != nil {
		_ = p.Close()
		if followed(received, qc.ConnectionStats().PacketsReceived, qc.Context().Err()) {
			// Unanswered because the broker already moved the connection
			// (probeTimeout): it answered the device's other packets,
			// which can only reach it at the new address now.
			m.log.Info("local address changed; the broker already follows the new address", "from", from, "to", to, "broker", broker.String())
			return
		}
		m.log.Debug("new path not validated: the broker already follows the new address, or it is not reachable yet", "to", to, "error", err)
		return
	}
	// The probe has done its work: the broker saw the connection at the
	// new address and validated it, and moves the connection there at the
	// client's next packet, which goes out from that address anyway (the
	// socket is unbound). quic-go's Path.Switch would move the client to
	// the path's connection ID too, but in v0.65 it replaces the
	// connection's socket without synchronisation against Conn.RemoteAddr,
	// LocalAddr and ConnectionState, which http3 reads on every request (a
	// data race), so the path is closed instead.
	_ = p.Close()
	m.log.Info("local address changed; the broker validated the new address", "from", from, "to", to, "broker", broker.String())
}

// followed reports whether a connection whose probe of a new path went
// unanswered still hears from the broker: packets received during the
// probe (before, after: the connection's count of received packets) on a
// connection still open. The old address is gone when a probe starts (the
// source address towards the broker changed), so they came to the new one.
func followed(before, after uint64, closed error) bool {
	return closed == nil && after > before
}
