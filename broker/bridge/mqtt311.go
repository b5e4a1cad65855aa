package bridge

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"

	"github.com/eclipse/paho.golang/autopaho"
)

// MQTT 3.1.1 upstreams (mqtt_version = "3.1.1"): paho.golang speaks MQTT 5
// only, so the connection under it is a v311Conn, which rewrites each MQTT
// 5 packet paho writes into its MQTT 3.1.1 form (protocol level 4, no
// properties, subscription options reduced to the QoS, acknowledgements
// without reason codes) and each MQTT 3.1.1 packet the upstream sends into
// the MQTT 5 form paho reads (an empty property list, CONNACK return codes
// as MQTT 5 reason codes). What MQTT 3.1.1 lacks is lost on the way: user
// properties (the quiot-time stamp), No Local (echo.go drops the
// upstream's copies instead), Retain As Published and Retain Handling,
// session expiry.

// MQTT control packet types (the high nibble of the first byte).
const (
	pktConnect     = 1
	pktConnack     = 2
	pktPublish     = 3
	pktPuback      = 4
	pktPubrec      = 5
	pktPubrel      = 6
	pktPubcomp     = 7
	pktSubscribe   = 8
	pktSuback      = 9
	pktUnsubscribe = 10
	pktUnsuback    = 11
	pktDisconnect  = 14
)

// dialMQTT opens the TCP or TLS connection autopaho would (mqtt://,
// mqtts://), for a v311Conn.
func (br *Bridge) dialMQTT(ctx context.Context, u *url.URL) (net.Conn, error) {
	port := u.Port()
	tlsOn := strings.EqualFold(u.Scheme, "mqtts")
	if port == "" {
		port = "1883"
		if tlsOn {
			port = "8883"
		}
	}
	addr := net.JoinHostPort(u.Hostname(), port)
	if tlsOn {
		d := tls.Dialer{Config: br.tlsCfg.Clone()}
		return d.DialContext(ctx, "tcp", addr)
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", addr)
}

// attempt311 is autopaho's AttemptConnection for an MQTT 3.1.1 upstream.
func (br *Bridge) attempt311(ctx context.Context, cc autopaho.ClientConfig, u *url.URL) (net.Conn, error) {
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
	// Under a packetConn: each packet whole (and paho's lock, which the
	// translation needs: a packet's pieces from two goroutines must not
	// interleave).
	return br.dialed(&v311Conn{Conn: c, r: bufio.NewReader(c), clean: br.cfg.CleanStart}), nil
}

// v311Conn translates between paho's MQTT 5 and an MQTT 3.1.1 upstream.
type v311Conn struct {
	net.Conn
	r     *bufio.Reader
	rbuf  []byte // translated packets not read yet
	wmu   sync.Mutex
	wbuf  []byte // bytes paho wrote that do not make a whole packet yet
	rtail []byte
	// clean sets Clean Session on every CONNECT (clean_start = true): paho
	// reconnects with Clean Start off, which in MQTT 5 with a session
	// expiry of 0 keeps nothing, but in MQTT 3.1.1 would leave a session
	// upstream that never expires.
	clean bool
}

// Read returns the upstream's packets in their MQTT 5 form.
func (c *v311Conn) Read(p []byte) (int, error) {
	for len(c.rbuf) == 0 {
		first, body, err := readPacket(c.r)
		if err != nil {
			return 0, err
		}
		body, err = up5(first, body)
		if err != nil {
			return 0, err
		}
		c.rbuf = appendPacket(c.rtail[:0], first, body)
		c.rtail = c.rbuf
	}
	n := copy(p, c.rbuf)
	c.rbuf = c.rbuf[n:]
	return n, nil
}

// Write takes paho's MQTT 5 packets and sends them in their MQTT 3.1.1
// form.
func (c *v311Conn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.wbuf = append(c.wbuf, p...)
	var out []byte
	for {
		first, body, n, ok := splitPacket(c.wbuf)
		if !ok {
			break
		}
		b, err := down311(first, body)
		if err != nil {
			return 0, err
		}
		if first>>4 == pktConnect && c.clean {
			if n, err := str2(b); err == nil && len(b) > n+1 {
				b[n+1] |= 0x02
			}
		}
		if b != nil {
			out = appendPacket(out, first, b)
		}
		c.wbuf = c.wbuf[n:]
	}
	if len(c.wbuf) == 0 {
		c.wbuf = nil
	}
	if len(out) > 0 {
		if _, err := c.Conn.Write(out); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// readPacket reads one packet: its first byte and its body.
func readPacket(r *bufio.Reader) (byte, []byte, error) {
	first, err := r.ReadByte()
	if err != nil {
		return 0, nil, err
	}
	n, err := binary.ReadUvarint(r) // MQTT's remaining length is the same 7-bit varint
	if err != nil {
		return 0, nil, fmt.Errorf("mqtt 3.1.1: remaining length: %w", err)
	}
	if n > 256<<20 {
		return 0, nil, errors.New("mqtt 3.1.1: packet too large")
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return 0, nil, err
	}
	return first, body, nil
}

// splitPacket returns the first whole packet of b and its length.
func splitPacket(b []byte) (first byte, body []byte, n int, ok bool) {
	if len(b) < 2 {
		return 0, nil, 0, false
	}
	l, k := binary.Uvarint(b[1:])
	if k <= 0 || uint64(len(b)-1-k) < l {
		return 0, nil, 0, false
	}
	end := 1 + k + int(l)
	return b[0], b[1+k : end], end, true
}

func appendPacket(dst []byte, first byte, body []byte) []byte {
	dst = append(dst, first)
	dst = binary.AppendUvarint(dst, uint64(len(body)))
	return append(dst, body...)
}

// skipProps returns b without the MQTT 5 property list at its start.
func skipProps(b []byte) ([]byte, error) {
	l, k := binary.Uvarint(b)
	if k <= 0 || uint64(len(b)-k) < l {
		return nil, errors.New("mqtt 3.1.1: bad property length")
	}
	return b[k+int(l):], nil
}

// str2 returns the length of the two-byte-length-prefixed string at b's
// start, prefix included.
func str2(b []byte) (int, error) {
	if len(b) < 2 {
		return 0, errors.New("mqtt 3.1.1: short packet")
	}
	n := 2 + int(binary.BigEndian.Uint16(b))
	if n > len(b) {
		return 0, errors.New("mqtt 3.1.1: short packet")
	}
	return n, nil
}

// down311 rewrites the body of an MQTT 5 packet (first byte first) for
// MQTT 3.1.1; nil drops the packet (AUTH).
func down311(first byte, b []byte) ([]byte, error) {
	switch first >> 4 {
	case pktConnect:
		// Protocol name, level, flags, keep-alive, properties; payload.
		n, err := str2(b)
		if err != nil || len(b) < n+4 {
			return nil, errors.New("mqtt 3.1.1: short CONNECT")
		}
		flags := b[n+1]
		out := append([]byte{}, b[:n+4]...)
		out[n] = 4 // protocol level of MQTT 3.1.1
		rest, err := skipProps(b[n+4:])
		if err != nil {
			return nil, err
		}
		id, err := str2(rest)
		if err != nil {
			return nil, err
		}
		out = append(out, rest[:id]...)
		rest = rest[id:]
		if flags&0x04 != 0 { // will: its properties go
			if rest, err = skipProps(rest); err != nil {
				return nil, err
			}
		}
		return append(out, rest...), nil
	case pktPublish:
		n, err := str2(b)
		if err != nil {
			return nil, err
		}
		if (first>>1)&3 > 0 {
			n += 2
		}
		if n > len(b) {
			return nil, errors.New("mqtt 3.1.1: short PUBLISH")
		}
		rest, err := skipProps(b[n:])
		if err != nil {
			return nil, err
		}
		return append(append([]byte{}, b[:n]...), rest...), nil
	case pktPuback, pktPubrec, pktPubrel, pktPubcomp:
		if len(b) < 2 {
			return nil, errors.New("mqtt 3.1.1: short acknowledgement")
		}
		return b[:2], nil
	case pktSubscribe, pktUnsubscribe:
		if len(b) < 2 {
			return nil, errors.New("mqtt 3.1.1: short SUBSCRIBE")
		}
		rest, err := skipProps(b[2:])
		if err != nil {
			return nil, err
		}
		out := append([]byte{}, b[:2]...)
		for len(rest) > 0 {
			n, err := str2(rest)
			if err != nil {
				return nil, err
			}
			out = append(out, rest[:n]...)
			rest = rest[n:]
			if first>>4 == pktSubscribe {
				if len(rest) == 0 {
					return nil, errors.New("mqtt 3.1.1: SUBSCRIBE without options")
				}
				out = append(out, rest[0]&0x03) // the QoS; no No Local, retain options
				rest = rest[1:]
			}
		}
		return out, nil
	case pktDisconnect:
		return []byte{}, nil
	case 15: // AUTH: not in MQTT 3.1.1
		return nil, nil
	}
	return b, nil // PINGREQ
}

// connackReason maps an MQTT 3.1.1 CONNACK return code to MQTT 5's reason
// code.
var connackReason = map[byte]byte{0: 0x00, 1: 0x84, 2: 0x85, 3: 0x88, 4: 0x86, 5: 0x87}

// up5 rewrites the body of an MQTT 3.1.1 packet from the upstream for
// paho's MQTT 5.
func up5(first byte, b []byte) ([]byte, error) {
	switch first >> 4 {
	case pktConnack:
		if len(b) < 2 {
			return nil, errors.New("mqtt 3.1.1: short CONNACK")
		}
		rc, ok := connackReason[b[1]]
		if !ok {
			rc = 0x80
		}
		return []byte{b[0], rc, 0}, nil
	case pktPublish:
		n, err := str2(b)
		if err != nil {
			return nil, err
		}
		if (first>>1)&3 > 0 {
			n += 2
		}
		if n > len(b) {
			return nil, errors.New("mqtt 3.1.1: short PUBLISH")
		}
		out := make([]byte, 0, len(b)+1)
		out = append(append(append(out, b[:n]...), 0), b[n:]...)
		return out, nil
	case pktSuback, pktUnsuback:
		if len(b) < 2 {
			return nil, errors.New("mqtt 3.1.1: short SUBACK")
		}
		return append(append([]byte{b[0], b[1]}, 0), b[2:]...), nil
	}
	return b, nil // PUBACK, PUBREC, PUBREL, PUBCOMP (two bytes: success), PINGRESP
}
