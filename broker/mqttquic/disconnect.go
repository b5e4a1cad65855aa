package mqttquic

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"syscall"

	"github.com/mochi-mqtt/server/v2/packets"
)

// DISCONNECT Packet too large (docs/mqtt.md). mochi refuses a packet
// larger than the Maximum Packet Size from its fixed header and closes the
// connection before any hook runs, without the DISCONNECT 0x95 MQTT 5
// allows (4.13); Receive Maximum exceeded (0x93) it sends itself. So each
// connection's byte stream is followed here, packet by packet, with the
// rule mochi applies (remaining length + 1 > the maximum): an MQTT 5
// client whose next packet is too large gets DISCONNECT 0x95 before mochi
// reads that packet's header, and the read ends with errTooLargeSent
// (after the bytes before that header) instead of mochi's own refusal, so
// that MQTT over QUIC lets the client read the DISCONNECT before the
// connection closes (listener.go, classify). An MQTT 3.1.1 client has no
// DISCONNECT from the server and only sees the close, as before.

// disconnectTooLarge is an MQTT 5 DISCONNECT with reason code 0x95
// (Packet too large) and an empty property block (mochi's own decoder,
// as some clients', reads the reason code only when a property length
// follows it).
var disconnectTooLarge = []byte{0xe0, 0x02, 0x95, 0x00}

// errTooLargeSent ends a connection whose MQTT 5 client was sent
// DISCONNECT 0x95.
var errTooLargeSent = fmt.Errorf("%w: DISCONNECT 0x95 sent", packets.ErrPacketTooLarge)

// tooLargeSent reports whether err ended a connection whose client was
// sent DISCONNECT 0x95.
func tooLargeSent(err error) bool { return errors.Is(err, errTooLargeSent) }

// Stream states of sizeWatch.
const (
	swHeader = iota // the first byte of a fixed header is next
	swLength        // a byte of the remaining length is next
	swBody          // body bytes are next
	swDone          // nothing more to watch (a refusal, or a malformed length)
)

// sizeWatch follows an MQTT byte stream from the client: it learns the
// protocol version from the CONNECT and reports the first packet whose
// fixed header announces more than max bytes. It lives as long as the
// connection, so its fields are as narrow as their values: 32 bytes
// (it was 80 with int and uint64 fields and the CONNECT's first bytes
// in a slice; docs/BENCH.md, "Heap per idle client, site by site").
type sizeWatch struct {
	max   uint32 // the Maximum Packet Size; zero: watch nothing
	rem   uint32 // remaining length read so far, then body bytes left (at most 268,435,455)
	mult  uint32 // the next remaining-length byte's weight (at most 128^4)
	start int32  // where the current packet began in the bytes fed last (-1: before them)
	st    uint8
	nlen  uint8 // remaining-length bytes read
	// seen says a complete packet (the CONNECT) has been seen.
	seen bool
	v5   bool // the CONNECT was MQTT 5
	// connect holds the CONNECT's first body bytes (protocol name,
	// level), nconn of them.
	nconn   uint8
	connect [connectPrefix]byte
}

// connectPrefix is how much of the CONNECT body names the version: a
// two-byte length, the protocol name ("MQTT"; "MQIsdp" for 3.1) and the
// level.
const connectPrefix = 2 + 6 + 1

// feed follows p (the next bytes from the client) and reports whether a
// packet in it is too large, and where that packet begins; it reports
// that once.
func (w *sizeWatch) feed(p []byte) (tooLarge bool, at int) {
	if w.max == 0 {
		return false, 0
	}
	for i := 0; i < len(p) && w.st != swDone; {
		switch w.st {
		case swHeader:
			w.st, w.rem, w.mult, w.nlen, w.start = swLength, 0, 1, 0, int32(i)
			i++
		case swLength:
			b := p[i]
			i++
			w.rem += uint32(b&0x7f) * w.mult
			w.mult *= 128
			w.nlen++
			if b&0x80 != 0 {
				if w.nlen == 4 {
					w.st = swDone // malformed: mochi refuses it
				}
				continue
			}
			if uint64(w.rem)+1 > uint64(w.max) { // mochi's rule (Client.ReadFixedHeader)
				w.st = swDone
				return true, int(max(w.start, 0))
			}
			w.st = swBody
			if w.rem == 0 {
				w.ended()
			}
		case swBody:
			n := min(len(p)-i, int(w.rem))
			if !w.seen && w.nconn < connectPrefix {
				w.nconn += uint8(copy(w.connect[w.nconn:], p[i:i+n]))
			}
			i += n
			w.rem -= uint32(n)
			if w.rem == 0 {
				w.ended()
			}
		}
	}
	w.start = -1 // a header begun in p goes on in the next bytes
	return false, 0
}

// refuse answers the feed of p[:n]: when a packet in it is too large and
// the client speaks MQTT 5, send writes DISCONNECT 0x95 and the read ends
// with errTooLargeSent after the bytes before that packet.
func (w *sizeWatch) refuse(p []byte, n int, err error, send func([]byte) (int, error)) (int, error) {
	if tooLarge, at := w.feed(p[:n]); tooLarge && w.v5 {
		_, _ = send(disconnectTooLarge)
		return at, errTooLargeSent
	}
	return n, err
}

// ended notes the end of a packet's body.
func (w *sizeWatch) ended() {
	if !w.seen {
		c := w.connect[:w.nconn]
		if len(c) >= 2 {
			if at := 2 + (int(c[0])<<8 | int(c[1])); at < len(c) {
				w.v5 = c[at] == 5
			}
		}
		w.seen = true
	}
	w.st = swHeader
}

// sizeConn is a connection whose client stream a sizeWatch follows; it
// sends DISCONNECT 0x95 to an MQTT 5 client whose packet is too large.
// Its writes are serialised (mochi writes whole packets, one Write each;
// the DISCONNECT goes between two of them).
type sizeConn struct {
	net.Conn
	w  sizeWatch // read by Read only (mochi's one reading goroutine)
	mu sync.Mutex
}

// Read reads from the connection and follows what it read. Its frame is
// on the stack of the connection's reader while it waits (sessionEnds.Serve):
// it passes no method value, which would take a closure's room in it.
func (c *sizeConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if tooLarge, at := c.w.feed(p[:n]); tooLarge && c.w.v5 {
		return c.sendTooLarge(at)
	}
	return n, err
}

// FollowRead follows a read of the socket that mochi's poller made
// itself (mqtt.ReadFollower; third_party/mochi/QUIOT.md, change 20) as
// Read follows its own, and returns what Read would have.
func (c *sizeConn) FollowRead(p []byte, n int, err error) (int, error) {
	if tooLarge, at := c.w.feed(p[:n]); tooLarge && c.w.v5 {
		return c.sendTooLarge(at)
	}
	return n, err
}

// sendTooLarge sends DISCONNECT 0x95 (sizeWatch.refuse).
//
//go:noinline
func (c *sizeConn) sendTooLarge(at int) (int, error) {
	_, _ = c.Write(disconnectTooLarge)
	return at, errTooLargeSent
}

// Write writes p, one writer at a time.
func (c *sizeConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.Conn.Write(p)
}

// errNoSocket is SyscallConn's answer for a connection with no socket of
// its own to hand out (TLS, QUIC).
var errNoSocket = errors.New("connection has no socket of its own")

// SyscallConn returns the socket of a plain TCP connection, for mochi's
// deliveries written without waiting (third_party/mochi/QUIOT.md, change
// 17); its writes take the same lock as Write, so the DISCONNECT goes
// between two of them. Over TLS or QUIC it returns errNoSocket: bytes
// written to the socket would bypass the encryption.
func (c *sizeConn) SyscallConn() (syscall.RawConn, error) {
	sc, ok := c.Conn.(syscall.Conn)
	if !ok {
		return nil, errNoSocket
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil, err
	}
	return lockedRaw{RawConn: rc, mu: &c.mu}, nil
}

// lockedRaw is a sizeConn's socket whose writes hold the sizeConn's write
// lock.
type lockedRaw struct {
	syscall.RawConn
	mu *sync.Mutex
}

// Write runs f on the socket with the sizeConn's write lock held.
func (r lockedRaw) Write(f func(fd uintptr) bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.RawConn.Write(f)
}

// sizeTLSConn is a sizeConn over TLS (or QUIC): its ConnectionState gives
// the auth hook a verified client certificate.
type sizeTLSConn struct {
	*sizeConn
	ts tlsState
}

// ConnectionState returns the TLS state of the connection.
func (c *sizeTLSConn) ConnectionState() tls.ConnectionState { return c.ts.ConnectionState() }

// watchPacketSize returns c with its client stream followed for packets
// larger than max (sizeConn). MQTT over WebSocket connections follow
// their own (wsConn.Read).
func watchPacketSize(c net.Conn, max uint32) net.Conn {
	if max == 0 {
		return c
	}
	switch c.(type) {
	case *wsConn, *wssConn:
		return c
	}
	sc := &sizeConn{Conn: c, w: sizeWatch{max: max}}
	if ts, ok := c.(tlsState); ok {
		return &sizeTLSConn{sizeConn: sc, ts: ts}
	}
	return sc
}
