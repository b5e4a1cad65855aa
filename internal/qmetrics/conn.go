package qmetrics

import (
	"net"
	"sync/atomic"
	"syscall"

	"golang.org/x/net/ipv4"
)

// WireStats are the UDP payload bytes and datagrams a socket sent and
// received.
type WireStats struct {
	// BytesSent and BytesReceived are UDP payload bytes.
	BytesSent     uint64 `json:"bytes_sent"`
	BytesReceived uint64 `json:"bytes_received"`
	// DatagramsSent and DatagramsReceived are UDP datagrams. A GSO write of
	// several segments counts as that many datagrams.
	DatagramsSent     uint64 `json:"datagrams_sent"`
	DatagramsReceived uint64 `json:"datagrams_received"`
	// GSOWrites is the number of writes that used generic segmentation
	// offload (several datagrams in one system call).
	GSOWrites uint64 `json:"gso_writes"`
}

// Bytes returns bytes sent + received (metric 5, wire_bytes).
func (s WireStats) Bytes() uint64 { return s.BytesSent + s.BytesReceived }

// Datagrams returns datagrams sent + received (metric 6, wire_datagrams).
func (s WireStats) Datagrams() uint64 { return s.DatagramsSent + s.DatagramsReceived }

// Sub returns s - o, field by field (for the traffic between two readings).
func (s WireStats) Sub(o WireStats) WireStats {
	return WireStats{
		BytesSent:         s.BytesSent - o.BytesSent,
		BytesReceived:     s.BytesReceived - o.BytesReceived,
		DatagramsSent:     s.DatagramsSent - o.DatagramsSent,
		DatagramsReceived: s.DatagramsReceived - o.DatagramsReceived,
		GSOWrites:         s.GSOWrites - o.GSOWrites,
	}
}

// CountingPacketConn is a net.PacketConn that counts the traffic passing
// through it. Stats may be called at any time, from any goroutine.
type CountingPacketConn interface {
	net.PacketConn
	// Stats returns the counters so far.
	Stats() WireStats
	// Unwrap returns the wrapped connection.
	Unwrap() net.PacketConn
}

// NewCountingPacketConn wraps pc so that every datagram it sends or
// receives is counted. Hand the result to quic.Transport{Conn: ...}.
//
// When pc is a *net.UDPConn, the result implements everything quic-go's
// sys_conn.go probes for (quic.OOBCapablePacketConn: SyscallConn,
// SetReadBuffer, ReadMsgUDP, WriteMsgUDP; plus SetWriteBuffer and
// ReadBatch), so quic-go keeps its fast paths: socket buffer sizing, the DF
// bit and path MTU discovery, ECN, batched receives (recvmmsg) and GSO
// sends. Reads go through our ReadBatch (quic-go would otherwise unwrap the
// file descriptor with ipv4.NewPacketConn and bypass the counting); GSO
// writes are counted as len/segment-size datagrams from the UDP_SEGMENT
// control message.
//
// Any other net.PacketConn gets a plain wrapper (ReadFrom/WriteTo), with
// which quic-go disables those optimizations just as for the original.
func NewCountingPacketConn(pc net.PacketConn) CountingPacketConn {
	if u, ok := pc.(*net.UDPConn); ok {
		return &countingUDPConn{
			countingConn: countingConn{PacketConn: pc},
			udp:          u,
			batch:        ipv4.NewPacketConn(u),
		}
	}
	return &countingConn{PacketConn: pc}
}

// counters are the shared atomic counters (atomic types: safe on 32-bit ARM).
type counters struct {
	bytesSent, bytesRecv, dgSent, dgRecv, gsoWrites atomic.Uint64
}

func (c *counters) sent(n, datagrams int) {
	c.bytesSent.Add(uint64(n))
	c.dgSent.Add(uint64(datagrams))
}

func (c *counters) received(n int) {
	c.bytesRecv.Add(uint64(n))
	c.dgRecv.Add(1)
}

func (c *counters) stats() WireStats {
	return WireStats{
		BytesSent:         c.bytesSent.Load(),
		BytesReceived:     c.bytesRecv.Load(),
		DatagramsSent:     c.dgSent.Load(),
		DatagramsReceived: c.dgRecv.Load(),
		GSOWrites:         c.gsoWrites.Load(),
	}
}

// countingConn counts a generic net.PacketConn.
type countingConn struct {
	net.PacketConn
	c counters
}

// Stats implements CountingPacketConn.
func (c *countingConn) Stats() WireStats { return c.c.stats() }

// Unwrap implements CountingPacketConn.
func (c *countingConn) Unwrap() net.PacketConn { return c.PacketConn }

// ReadFrom implements net.PacketConn.
func (c *countingConn) ReadFrom(p []byte) (int, net.Addr, error) {
	n, addr, err := c.PacketConn.ReadFrom(p)
	if err == nil {
		c.c.received(n)
	}
	return n, addr, err
}

// WriteTo implements net.PacketConn.
func (c *countingConn) WriteTo(p []byte, addr net.Addr) (int, error) {
	n, err := c.PacketConn.WriteTo(p, addr)
	if err == nil {
		c.c.sent(n, 1)
	}
	return n, err
}

// countingUDPConn counts a *net.UDPConn and keeps its optional interfaces.
type countingUDPConn struct {
	countingConn
	udp   *net.UDPConn
	batch *ipv4.PacketConn
}

// SyscallConn returns the raw socket; quic-go uses it only for socket
// options (Control), never to read or write, so counting stays complete.
func (c *countingUDPConn) SyscallConn() (syscall.RawConn, error) { return c.udp.SyscallConn() }

// SetReadBuffer sets the socket receive buffer size.
func (c *countingUDPConn) SetReadBuffer(n int) error { return c.udp.SetReadBuffer(n) }

// SetWriteBuffer sets the socket send buffer size.
func (c *countingUDPConn) SetWriteBuffer(n int) error { return c.udp.SetWriteBuffer(n) }

// ReadMsgUDP reads one datagram with its control messages.
func (c *countingUDPConn) ReadMsgUDP(b, oob []byte) (n, oobn, flags int, addr *net.UDPAddr, err error) {
	n, oobn, flags, addr, err = c.udp.ReadMsgUDP(b, oob)
	if err == nil {
		c.c.received(n)
	}
	return n, oobn, flags, addr, err
}

// WriteMsgUDP writes one datagram, or several with a UDP_SEGMENT (GSO)
// control message.
func (c *countingUDPConn) WriteMsgUDP(b, oob []byte, addr *net.UDPAddr) (n, oobn int, err error) {
	n, oobn, err = c.udp.WriteMsgUDP(b, oob, addr)
	if err == nil {
		d := 1
		if seg := gsoSegmentSize(oob); seg > 0 && n > seg {
			d = (n + seg - 1) / seg
			c.c.gsoWrites.Add(1)
		}
		c.c.sent(n, d)
	}
	return n, oobn, err
}

// ReadBatch reads up to len(ms) datagrams at once (recvmmsg on Linux).
func (c *countingUDPConn) ReadBatch(ms []ipv4.Message, flags int) (int, error) {
	k, err := c.batch.ReadBatch(ms, flags)
	for i := 0; i < k; i++ {
		c.c.received(ms[i].N)
	}
	return k, err
}
