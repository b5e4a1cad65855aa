package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/eclipse/paho.golang/packets"
	"github.com/eclipse/paho.golang/paho"

	"github.com/quiot/quiot/internal/wire"
)

// MQTT over QUIC wake-ups with 0-RTT (docs/mqtt.md, "0-RTT").
//
// With the profile's allow_0rtt and a session ticket from an earlier
// connection (the session file of `quiot pub --session-file`), the first
// connection of a client is dialled with quic-go's DialEarly, so paho's
// CONNECT goes in 0-RTT data; a QoS 1 publish that starts that connection
// goes right behind it in the same flight, as a PUBLISH carrying a message
// id (user property quiot-msg-id) and its send time (quiot-time). The
// broker publishes an id once (its dedup of HTTP/3's Quiot-Msg-Id), so a
// replay of the flight, or the same PUBLISH sent again after the 0-RTT
// data was rejected or the connection lost, is delivered once.
//
// Without 0-RTT (no allow_0rtt, or no ticket yet: a device's first
// connection) the same PUBLISH follows the CONNECT with the handshake's
// Finished instead of waiting for the CONNACK, which MQTT allows (MQTT 5
// §3.1.4): a first connection's publish is acknowledged with the CONNACK,
// two round trips after the wake-up instead of three.
//
// paho knows nothing of that PUBLISH: it has the packet identifier
// earlyPacketID, which the connection's reader takes out of the stream
// with its PUBACK (earlyConn). paho numbers its own packets from 1 on a
// new session state, so the two do not meet within one wake-up.

// earlyPacketID is the packet identifier of the PUBLISH sent in 0-RTT data.
const earlyPacketID = 0xFFFF

// mqttEarly is a publish offered for the first flight of the client's
// first connection.
type mqttEarly struct {
	id   string // message id
	sent time.Time
	pkt  []byte // the PUBLISH packet

	mu      sync.Mutex
	written bool          // the PUBLISH went out behind the CONNECT
	done    chan struct{} // closed once its PUBACK came or the connection failed
	code    byte          // the PUBACK's reason code
	props   *packets.Properties
	err     error
	closed  bool
}

// newMQTTEarly builds the early PUBLISH of a QoS 1 message.
func newMQTTEarly(topic string, payload []byte, retain bool, sent time.Time) (*mqttEarly, error) {
	e := &mqttEarly{id: newMsgID(), sent: sent, done: make(chan struct{})}
	p := &packets.Publish{
		PacketID: earlyPacketID,
		QoS:      1,
		Retain:   retain,
		Topic:    topic,
		Payload:  payload,
		Properties: &packets.Properties{User: []packets.User{
			{Key: wire.MQTTStampProperty, Value: wire.FormatStamp(sent.UnixNano())},
			{Key: wire.MQTTMsgIDProperty, Value: e.id},
		}},
	}
	var b bytes.Buffer
	if _, err := p.WriteTo(&b); err != nil {
		return nil, fmt.Errorf("mqtt early publish: %w", err)
	}
	e.pkt = b.Bytes()
	return e, nil
}

// wasWritten reports whether the PUBLISH went out.
func (e *mqttEarly) wasWritten() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.written
}

// finish records the outcome once.
func (e *mqttEarly) finish(code byte, props *packets.Properties, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return
	}
	e.closed = true
	e.code, e.props, e.err = code, props, err
	close(e.done)
}

// result returns the outcome once done is closed.
func (e *mqttEarly) result() (byte, *packets.Properties, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.code, e.props, e.err
}

// errEarlyLost ends an early publish whose connection failed before its
// PUBACK: it is sent again, with the same id.
var errEarlyLost = errors.New("connection lost before the 0-RTT publish was acknowledged")

// earlyConn is the MQTT stream of a connection whose first flight carries
// an early PUBLISH: it writes the PUBLISH right after paho's CONNECT and
// takes its PUBACK out of what paho reads.
type earlyConn struct {
	net.Conn
	e *mqttEarly

	wmu     sync.Mutex
	connect int // bytes of the CONNECT still to pass (-1: not known yet)
	head    []byte

	in     []byte // read, not yet parsed into packets
	out    []byte // whole packets for paho
	filter bool   // still looking for the PUBACK
}

func newEarlyConn(c net.Conn, e *mqttEarly) *earlyConn {
	return &earlyConn{Conn: c, e: e, connect: -1, filter: true}
}

// Write passes paho's packets; the early PUBLISH follows the CONNECT (the
// first packet), however paho splits its writes.
func (c *earlyConn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.connect == 0 {
		return c.Conn.Write(p)
	}
	n, err := c.Conn.Write(p)
	if err != nil {
		c.e.finish(0, nil, err)
		return n, err
	}
	if c.connect < 0 {
		c.head = append(c.head, p...)
		total, ok := packetLen(c.head)
		if !ok {
			return n, nil
		}
		c.connect = total - (len(c.head) - len(p))
		c.head = nil
	}
	c.connect -= len(p)
	if c.connect > 0 {
		return n, nil
	}
	// paho writes whole packets, so the CONNECT ended with this write.
	c.connect = 0
	if _, err := c.Conn.Write(c.e.pkt); err != nil {
		c.e.finish(0, nil, err)
		return n, err
	}
	c.e.mu.Lock()
	c.e.written = true
	c.e.mu.Unlock()
	return n, nil
}

// Read returns whole packets to paho, less the early PUBLISH's PUBACK.
func (c *earlyConn) Read(p []byte) (int, error) {
	for {
		if len(c.out) > 0 {
			n := copy(p, c.out)
			c.out = c.out[n:]
			return n, nil
		}
		if !c.filter {
			if len(c.in) > 0 {
				c.out, c.in = c.in, nil
				continue
			}
			return c.Conn.Read(p)
		}
		if total, ok := packetLen(c.in); ok && len(c.in) >= total {
			pkt := c.in[:total:total]
			c.in = c.in[total:]
			if code, props, ok := earlyPuback(pkt); ok {
				c.filter = false
				c.e.finish(code, props, nil)
				continue
			}
			c.out = pkt
			continue
		}
		buf := make([]byte, 4096)
		n, err := c.Conn.Read(buf)
		c.in = append(c.in, buf[:n]...)
		if err != nil {
			c.e.finish(0, nil, errEarlyLost)
			if len(c.in) > 0 && n > 0 {
				continue // whole packets read before the error still go to paho
			}
			return 0, err
		}
	}
}

// packetLen returns the length of the MQTT packet at the start of b (fixed
// header included) once its header is complete.
func packetLen(b []byte) (int, bool) {
	rem, mul := 0, 1
	for i := 1; i < len(b) && i <= 4; i++ {
		rem += int(b[i]&0x7F) * mul
		if b[i]&0x80 == 0 {
			return 1 + i + rem, true
		}
		mul *= 128
	}
	return 0, false
}

// earlyPuback reports whether pkt is the PUBACK of the early PUBLISH, and
// its reason code and properties.
func earlyPuback(pkt []byte) (byte, *packets.Properties, bool) {
	if len(pkt) < 4 || pkt[0] != packets.PUBACK<<4 {
		return 0, nil, false
	}
	cp, err := packets.ReadPacket(bytes.NewReader(pkt))
	if err != nil {
		return 0, nil, false
	}
	pa, ok := cp.Content.(*packets.Puback)
	if !ok || pa.PacketID != earlyPacketID {
		return 0, nil, false
	}
	return pa.ReasonCode, pa.Properties, true
}

// offerEarly offers a QoS 1 publish for the first flight of the client's
// first connection over QUIC when no connection was started yet; nil
// otherwise. It goes right behind the CONNECT: in 0-RTT data when the
// profile allows 0-RTT and the client has a ticket, else with the
// handshake's Finished. Waiting for the CONNACK first would add a round
// trip to every first connection (on NB-IoT 0.7 s, and the PUBACK later on
// a downlink still draining the handshake's probes).
func (c *mqttClient) offerEarly(topic string, payload []byte, opts PublishOptions) *mqttEarly {
	if !c.quic || opts.QoS != 1 {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cm != nil || c.early != nil || c.closed || c.fatal != nil {
		return nil
	}
	sent := opts.Sent
	if sent.IsZero() {
		sent = time.Now() // the message leaves with the first flight
	}
	e, err := newMQTTEarly(topic, payload, opts.Retain, sent)
	if err != nil {
		c.opts.Logger.Debug("no 0-RTT publish", "error", err)
		return nil
	}
	c.early = e
	return e
}

// awaitEarly waits, once the connection is up, for the PUBACK of an early
// publish. done reports that the publish is over (acknowledged, refused,
// or ctx ended); otherwise it goes the ordinary way: it did not go out, or
// its connection was lost before the PUBACK (it is sent again with the
// same message id).
func (c *mqttClient) awaitEarly(ctx context.Context, e *mqttEarly, topic string) (ack Ack, done bool, err error) {
	c.mu.Lock()
	conn := c.connCtx
	c.mu.Unlock()
	select {
	case <-e.done:
	case <-conn.Done():
		return Ack{}, false, nil
	case <-ctx.Done():
		return Ack{}, true, fmt.Errorf("mqtt publish to %q: %w", topic, ctx.Err())
	}
	code, props, err := e.result()
	if err != nil {
		if e.wasWritten() {
			c.opts.Logger.Debug("0-RTT publish not acknowledged; sending it again", "error", err)
		}
		return Ack{}, false, nil
	}
	if code >= 0x80 {
		var rp *paho.PublishResponseProperties
		if props != nil {
			rp = &paho.PublishResponseProperties{ReasonString: props.ReasonString}
		}
		return Ack{}, true, &mqttRefusal{code: code, err: fmt.Errorf("%w: publish to %q: %s (reason 0x%02x)", ErrMQTTRefused, topic, mqttPubackReason(code, rp), code)}
	}
	return Ack{Sent: e.sent}, true, nil
}
