// Package sockbuf lets a wrapper of a UDP socket keep quic-go's socket
// buffer sizing. quic-go sizes a connection's receive and send buffers
// (SetReadBuffer, SetWriteBuffer) only when the net.PacketConn it is given
// has those methods; a wrapper that embeds net.PacketConn to override
// ReadFrom or WriteTo hides them. Embedding Conn instead of net.PacketConn
// passes them through.
package sockbuf

import "net"

// Conn is a net.PacketConn whose SetReadBuffer and SetWriteBuffer reach
// the wrapped socket when it has them (a *net.UDPConn does), and do
// nothing otherwise.
type Conn struct{ net.PacketConn }

// Wrap returns pc as a Conn.
func Wrap(pc net.PacketConn) Conn { return Conn{PacketConn: pc} }

// SetReadBuffer sets the wrapped socket's receive buffer size.
func (c Conn) SetReadBuffer(n int) error {
	if s, ok := c.PacketConn.(interface{ SetReadBuffer(int) error }); ok {
		return s.SetReadBuffer(n)
	}
	return nil
}

// SetWriteBuffer sets the wrapped socket's send buffer size.
func (c Conn) SetWriteBuffer(n int) error {
	if s, ok := c.PacketConn.(interface{ SetWriteBuffer(int) error }); ok {
		return s.SetWriteBuffer(n)
	}
	return nil
}
