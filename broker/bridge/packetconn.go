package bridge

import (
	"context"
	"net"
	"net/url"
	"sync"

	"github.com/eclipse/paho.golang/autopaho"
)

// packetConn hands its connection each MQTT packet paho writes in one
// Write. paho writes a packet as several buffers (fixed header, variable
// header, properties, payload: net.Buffers), which a *net.TCPConn sends
// with one writev but a TLS connection turns into one record each (22 B
// of overhead and, with TCP_NODELAY, one TCP segment each) and a QUIC
// stream may spread over several packets: on a slow link that is most of
// a small message's cost. packetConn gathers the bytes until they make a
// whole packet.
//
// It is a sync.Locker, as paho asks of a connection it did not dial
// (autopaho.ClientConfig.AttemptConnection): paho holds the lock while it
// writes one packet, so packets from its goroutines never interleave.
//
// It counts the PUBLISH packets written (pubs): the bridge starts a
// publish only once the one before it is on the wire (window.go).
type packetConn struct {
	net.Conn
	mu   sync.Mutex // paho's, held around each packet
	wmu  sync.Mutex // the buffer's
	wbuf []byte     // bytes of a packet not whole yet
	pubs *written   // nil: not counted
}

// Lock and Unlock serialize paho's packet writes.
func (c *packetConn) Lock()   { c.mu.Lock() }
func (c *packetConn) Unlock() { c.mu.Unlock() }

// Write buffers p and sends the whole packets the buffer holds in one
// Write of the connection.
func (c *packetConn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.wbuf = append(c.wbuf, p...)
	whole, pubs := 0, 0
	for {
		first, _, n, ok := splitPacket(c.wbuf[whole:])
		if !ok {
			break
		}
		if first>>4 == pktPublish {
			pubs++
		}
		whole += n
	}
	if whole == 0 {
		return len(p), nil
	}
	_, err := c.Conn.Write(c.wbuf[:whole])
	c.wbuf = append(c.wbuf[:0], c.wbuf[whole:]...)
	if pubs > 0 && c.pubs != nil {
		c.pubs.add(pubs) // written or failed: either way the next may go
	}
	if err != nil {
		return 0, err
	}
	return len(p), nil
}

// attempt5 is autopaho's AttemptConnection for an MQTT 5 upstream over
// mqtt://, mqtts:// and mqtt-quic://.
func (br *Bridge) attempt5(ctx context.Context, cc autopaho.ClientConfig, u *url.URL) (net.Conn, error) {
	var c net.Conn
	var err error
	if br.quic != nil {
		c, err = br.dialQUIC(ctx, cc, u)
	} else {
		c, err = br.dialMQTT(ctx, u)
	}
	if err != nil {
		return nil, err
	}
	return br.dialed(c), nil
}

// dialed wraps a new upstream connection in a packetConn whose PUBLISH
// count the bridge uses once the connection is up (markUp).
func (br *Bridge) dialed(c net.Conn) *packetConn {
	pc := &packetConn{Conn: c, pubs: newWritten()}
	br.mu.Lock()
	br.dialedPubs = pc.pubs
	br.mu.Unlock()
	return pc
}
