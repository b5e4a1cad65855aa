// Package streamconn adapts one bidirectional QUIC stream, and the QUIC
// connection that carries it, to a net.Conn. It is the "single-stream mode"
// of MQTT over QUIC used by EMQX and NanoMQ: every MQTT packet of a session
// travels on one client-opened bidirectional stream, so an unmodified MQTT
// implementation that reads and writes a net.Conn runs over QUIC unchanged.
package streamconn

import (
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"time"

	"github.com/quic-go/quic-go"
)

// Application error codes carried in CONNECTION_CLOSE by quiot's MQTT over
// QUIC endpoints. The reason phrase says what happened.
const (
	// CodeNoError is a normal close (DISCONNECT or shutdown).
	CodeNoError quic.ApplicationErrorCode = 0
	// CodeProtocolError means the peer sent bytes that are not valid MQTT.
	CodeProtocolError quic.ApplicationErrorCode = 1
	// CodeRefused means the MQTT session was refused or ended with an
	// error other than malformed bytes (authentication, authorization,
	// keep-alive timeout, takeover).
	CodeRefused quic.ApplicationErrorCode = 2
)

// Conn is a net.Conn over one QUIC stream. Writes are serialised, so
// several goroutines may write concurrently without tearing one Write.
//
// A writer that puts one packet on the wire in several Writes (paho.golang
// writes a packet's fixed header and body as separate buffers) holds the
// Conn's Lock around them, so another goroutine's packet cannot land in
// between: paho takes the lock itself when its net.Conn is a sync.Locker,
// as Conn is. Without it a PINGREQ written by paho's pinger could split a
// SUBSCRIBE or PUBLISH, which the server then refuses as malformed.
type Conn struct {
	qc       *quic.Conn
	s        *quic.Stream
	ownsConn bool

	pmu sync.Mutex // held across one packet's writes (Lock, Unlock)

	wmu       sync.Mutex
	closed    bool // under wmu
	closeOnce sync.Once
}

// New wraps stream s of connection qc. When ownsConn is true, Close ends
// the stream (FIN) and closes the QUIC connection (code CodeNoError).
// Otherwise Close only stops reading and writing, and the owner of the
// connection decides how it ends: Finish (FIN, the peer reads everything
// written) or CloseWithError (a reason, immediately).
func New(qc *quic.Conn, s *quic.Stream, ownsConn bool) *Conn {
	return &Conn{qc: qc, s: s, ownsConn: ownsConn}
}

// Read reads from the stream.
func (c *Conn) Read(p []byte) (int, error) { return c.s.Read(p) }

// Lock reserves the stream for one writer until Unlock, so a packet written
// in several Writes stays whole. Write itself does not take this lock.
func (c *Conn) Lock() { c.pmu.Lock() }

// Unlock ends the reservation taken by Lock.
func (c *Conn) Unlock() { c.pmu.Unlock() }

// Write writes p to the stream; concurrent writes do not interleave.
func (c *Conn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.closed {
		return 0, net.ErrClosed
	}
	return c.s.Write(p)
}

// Close stops reading and writing; see New for what else it does. It is
// safe to call more than once.
func (c *Conn) Close() error {
	c.closeOnce.Do(func() {
		c.wmu.Lock()
		c.closed = true
		c.wmu.Unlock()
		c.s.CancelRead(0)
		if c.ownsConn {
			_ = c.s.Close()
			_ = c.qc.CloseWithError(CodeNoError, "")
		}
	})
	return nil
}

// Finish closes the stream's write side (FIN) after what was written, so
// the peer reads it all, and stops reading.
func (c *Conn) Finish() error {
	_ = c.Close()
	return c.s.Close()
}

// CloseWithError closes the QUIC connection with an application error code
// and a reason phrase the peer sees (truncated to 256 bytes).
func (c *Conn) CloseWithError(code quic.ApplicationErrorCode, reason string) error {
	_ = c.Close()
	return c.qc.CloseWithError(code, Truncate(reason, 256))
}

// LocalAddr is the local UDP address of the QUIC connection.
func (c *Conn) LocalAddr() net.Addr { return c.qc.LocalAddr() }

// RemoteAddr is the peer's UDP address.
func (c *Conn) RemoteAddr() net.Addr { return c.qc.RemoteAddr() }

// SetDeadline sets read and write deadlines on the stream.
func (c *Conn) SetDeadline(t time.Time) error { return c.s.SetDeadline(t) }

// SetReadDeadline sets the stream's read deadline.
func (c *Conn) SetReadDeadline(t time.Time) error { return c.s.SetReadDeadline(t) }

// SetWriteDeadline sets the stream's write deadline.
func (c *Conn) SetWriteDeadline(t time.Time) error { return c.s.SetWriteDeadline(t) }

// ConnectionState returns the TLS state of the QUIC handshake, with the
// same signature as (*tls.Conn).ConnectionState so code that reads a peer
// certificate works for MQTT over TLS and over QUIC alike.
func (c *Conn) ConnectionState() tls.ConnectionState { return c.qc.ConnectionState().TLS }

// QUIC returns the underlying QUIC connection.
func (c *Conn) QUIC() *quic.Conn { return c.qc }

// Truncate shortens s to at most n bytes without splitting a UTF-8
// sequence.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n]
}

// CloseReason extracts the application error code and reason phrase from
// an error returned by a closed QUIC connection or stream; ok is false when
// err does not carry a QUIC application close.
func CloseReason(err error) (code quic.ApplicationErrorCode, reason string, ok bool) {
	var ae *quic.ApplicationError
	if errors.As(err, &ae) {
		return ae.ErrorCode, ae.ErrorMessage, true
	}
	return 0, "", false
}
