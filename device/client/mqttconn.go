package client

import (
	"bufio"
	"net"
	"sync"
)

// mqttReadBuffer is the size of the buffer an MQTT connection is read
// through: room for a dozen 128-byte PUBLISH packets, so a burst of them
// costs one read of the socket or QUIC stream rather than three per packet.
const mqttReadBuffer = 4096

// bufferedConn reads its connection through a buffer. paho.golang reads a
// packet's first byte and its length one byte at a time and then the rest;
// unbuffered, every received packet took three reads of the connection
// (three system calls over TCP, three stream reads over QUIC). As an
// io.ByteReader it also lets paho read those bytes without allocating.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

// lockedBufferedConn is a bufferedConn over a connection that is a
// sync.Locker, which paho holds around the writes of one packet; the lock
// stays visible to paho through the wrapper.
type lockedBufferedConn struct {
	*bufferedConn
	sync.Locker
}

// bufferReads wraps nc so that paho reads it through a buffer (see
// bufferedConn). Writes, deadlines and Close go to nc.
func bufferReads(nc net.Conn) net.Conn {
	b := &bufferedConn{Conn: nc, r: bufio.NewReaderSize(nc, mqttReadBuffer)}
	if l, ok := nc.(sync.Locker); ok {
		return &lockedBufferedConn{bufferedConn: b, Locker: l}
	}
	return b
}

// Read reads buffered bytes, refilling the buffer from the connection.
func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// ReadByte reads one buffered byte.
func (c *bufferedConn) ReadByte() (byte, error) { return c.r.ReadByte() }
