package client

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync/atomic"
	"syscall"
)

// outageUDP is the client's UDP socket with one change: once a connection
// is up on it (arm), a send that fails because the device has, for the
// moment, no address or route to the broker (ENETUNREACH, EHOSTUNREACH,
// ENETDOWN, EADDRNOTAVAIL) counts as a datagram lost on the way instead of
// an error. quic-go (v0.65) closes the connection on every write error but
// "message too long", so a handover that removes the device's old address
// before the new one is up, or a modem briefly without a bearer, would end
// the connection and force a reconnect (a new handshake, and over MQTT a
// new session resume) although the broker is still there. Treated as loss,
// quic-go's loss recovery and keep-alive resend once the network is back,
// from whatever address the device then has, and the broker follows the
// connection to it (connection migration: docs/TUNING.md, "NAT bindings and
// connection migration"). A connection that never gets its network back
// ends at its idle timeout, as with any silent path.
//
// It embeds *net.UDPConn so that quic-go still sees a socket it can use
// with ECN, GSO and packet info (quic.OOBCapablePacketConn): WriteMsgUDP
// and WriteTo are quic-go's two send paths, and both filter. Before the
// first connection is up errors pass unchanged, so a dial into a network
// that is down fails at once, as before.
type outageUDP struct {
	*net.UDPConn
	log     *slog.Logger
	armed   atomic.Bool
	dropped atomic.Int64 // datagrams reported as sent while the network was down
	down    atomic.Bool  // the last send failed for want of a network
}

// clientSocket is the socket a client's quic.Transport uses: given (an
// Options.PacketConn) or one it opens (own, to close with the client). A
// UDP socket (udp) is wrapped so that a send failing for lack of a network
// counts as loss (outage) and is watched for address changes (migrate.go).
type clientSocket struct {
	pc     net.PacketConn // what quic-go gets
	own    *net.UDPConn   // opened here; nil for a given one
	udp    *net.UDPConn   // the UDP socket under pc; nil for another kind
	outage *outageUDP     // pc when udp is set
}

// openClientSocket returns given, or a new UDP socket when given is nil,
// wrapped as clientSocket says.
func openClientSocket(given net.PacketConn, log *slog.Logger) (clientSocket, error) {
	var s clientSocket
	s.pc = given
	if s.pc == nil {
		udp, err := net.ListenUDP("udp", nil)
		if err != nil {
			return s, fmt.Errorf("couldn't open a UDP socket: %w", err)
		}
		s.pc, s.own = udp, udp
	}
	if u, ok := s.pc.(*net.UDPConn); ok {
		s.udp = u
		s.outage = newOutageUDP(u, log)
		s.pc = s.outage
	}
	return s, nil
}

// newOutageUDP wraps u; log receives one line when sends start failing and
// one when they succeed again.
func newOutageUDP(u *net.UDPConn, log *slog.Logger) *outageUDP {
	return &outageUDP{UDPConn: u, log: log}
}

// arm starts treating network-down send errors as loss.
func (c *outageUDP) arm() { c.armed.Store(true) }

// WriteTo implements net.PacketConn.
func (c *outageUDP) WriteTo(b []byte, addr net.Addr) (int, error) {
	n, err := c.UDPConn.WriteTo(b, addr)
	if c.lost(err) {
		return len(b), nil
	}
	return n, err
}

// WriteMsgUDP is quic-go's send path on Linux (quic.OOBCapablePacketConn).
func (c *outageUDP) WriteMsgUDP(b, oob []byte, addr *net.UDPAddr) (int, int, error) {
	n, oobn, err := c.UDPConn.WriteMsgUDP(b, oob, addr)
	if c.lost(err) {
		return len(b), len(oob), nil
	}
	return n, oobn, err
}

// lost reports whether err is a network-down error to drop silently, and
// tracks the outage for the log.
func (c *outageUDP) lost(err error) bool {
	if err == nil {
		if c.down.Load() && c.down.CompareAndSwap(true, false) {
			c.log.Info("network back: sending again", "local", c.LocalAddr().String(), "dropped", c.dropped.Load())
		}
		return false
	}
	if !c.armed.Load() || !networkDown(err) {
		return false
	}
	c.dropped.Add(1)
	if c.down.CompareAndSwap(false, true) {
		c.log.Info("network down: datagrams count as lost until it is back", "local", c.LocalAddr().String(), "err", err)
	}
	return true
}

// networkDown reports send errors that mean "no address or route right
// now" rather than a broken socket.
func networkDown(err error) bool {
	for _, e := range []syscall.Errno{syscall.ENETUNREACH, syscall.EHOSTUNREACH, syscall.ENETDOWN, syscall.EADDRNOTAVAIL} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}
