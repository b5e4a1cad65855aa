package mqttquic

import (
	"context"
	"net"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/quic-go/quic-go"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/internal/streamconn"
	"github.com/quiot/quiot/internal/wire"
)

// MQTT over QUIC in 0-RTT data (docs/mqtt.md, "0-RTT").
//
// With the profile's allow_0rtt the QUIC listener accepts early data and
// hands a connection to mochi before its handshake is complete, so a
// resumed client's CONNECT and first PUBLISH, sent in its first flight,
// are served at once and the CONNACK and PUBACK go out with the broker's
// handshake answer. Early data can be replayed by anyone who recorded it,
// so before the handshake completes only what a replay cannot harm is
// served:
//
//   - a PUBLISH carrying a message id (user property quiot-msg-id) and a
//     send time (quiot-time) within broker.IdemWindow of the broker's
//     clock: the broker publishes an id once (Core's PublishOnce, the dedup
//     of HTTP/3's Quiot-Msg-Id), so a replay is acknowledged and dropped;
//   - a CONNECT that takes over no live session.
//
// Anything else waits for the handshake to complete (a replay never
// completes it, having no keys): a PUBLISH without an id or with a stale
// time, every other packet mochi reads after it, and a CONNECT whose
// client id is connected (a replayed CONNECT would otherwise end the
// device's live connection).

// onceCore is implemented by a Core that publishes once per message id
// (*broker.Broker).
type onceCore interface {
	PublishOnce(ctx context.Context, m broker.Message, id string) (seq uint64, repeat bool, err error)
}

var _ onceCore = (*broker.Broker)(nil)

// quicOf returns the QUIC connection under a connection mochi handles, nil
// for other transports.
func quicOf(c net.Conn) *quic.Conn {
	for {
		switch v := c.(type) {
		case *streamconn.Conn:
			return v.QUIC()
		case *sizeTLSConn:
			c = v.sizeConn.Conn
		case *sizeConn:
			c = v.Conn
		default:
			return nil
		}
	}
}

// awaitHandshake returns at once for a connection whose handshake is
// complete (or that is not QUIC); for one still in its handshake (its
// packets came in 0-RTT data) it waits for the handshake and reports
// false if the connection ended first.
func awaitHandshake(cl *mqtt.Client) bool {
	qc := quicOf(cl.Net.Conn)
	if qc == nil {
		return true
	}
	select {
	case <-qc.HandshakeComplete():
		return true
	case <-qc.Context().Done():
		return false
	}
}

// handshakePending reports whether cl's connection is QUIC and still in
// its handshake.
func handshakePending(cl *mqtt.Client) bool {
	qc := quicOf(cl.Net.Conn)
	if qc == nil {
		return false
	}
	select {
	case <-qc.HandshakeComplete():
		return false
	default:
		return true
	}
}

// userProperty returns the value of pk's first user property key, "" if
// none.
func userProperty(pk packets.Packet, key string) string {
	for _, u := range pk.Properties.User {
		if u.Key == key {
			return u.Val
		}
	}
	return ""
}

// sendStamp is the publisher's send time a PUBLISH carries
// (wire.ParseStamp), in Unix nanoseconds; 0: none.
func sendStamp(pk packets.Packet) int64 {
	return wire.ParseStamp(func(key string) string { return userProperty(pk, key) })
}

// earlySafe reports whether a PUBLISH may be served from 0-RTT data: it
// carries a message id and a send time within broker.IdemWindow of now.
func earlySafe(pk packets.Packet, now time.Time) bool {
	if userProperty(pk, wire.MQTTMsgIDProperty) == "" {
		return false
	}
	ns := sendStamp(pk)
	if ns == 0 {
		return false
	}
	d := now.Sub(time.Unix(0, ns))
	return d < broker.IdemWindow && d > -broker.IdemWindow
}

// liveSession reports whether a client other than cl is connected under
// cl's client id.
func liveSession(mq *mqtt.Server, cl *mqtt.Client) bool {
	old, ok := mq.Clients.Get(cl.ID)
	return ok && old != cl && !old.Closed()
}
