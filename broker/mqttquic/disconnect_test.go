package mqttquic

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"unsafe"

	"github.com/gorilla/websocket"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/brokertest"
)

// startSizeServer starts an MQTT server with a Maximum Packet Size of
// 1024 bytes on every transport: QUIC, TCP, TLS, ws, wss and the broker's
// port.
func startSizeServer(t *testing.T) (*bridged, func(transport string) net.Conn) {
	t.Helper()
	p := newPKI(t)
	h3 := brokertest.Start(t, p, &broker.Options{ClientCAs: p.Pool()})
	s := startServer(t, p, func(o *Options) {
		o.Broker = h3.Broker
		o.TCPAddr = "127.0.0.1:0"
		o.TLSAddr = "127.0.0.1:0"
		o.WSAddr = "127.0.0.1:0"
		o.WSSAddr = "127.0.0.1:0"
		o.WSOnBroker = true
		o.MaxPacketSize = 1024
	})
	b := &bridged{pki: p, h3: h3, mqtt: s}
	dial := func(transport string) net.Conn {
		var url string
		switch transport {
		case "ws":
			url = "ws://" + s.WSAddr() + WSPath
		case "wss":
			url = "wss://" + s.WSSAddr() + WSPath
		case "broker":
			url = "wss://" + h3.Broker.TCPAddr().String() + broker.MQTTWebSocketPath
		default:
			return secDial(t, s, p, transport)
		}
		d := websocket.Dialer{Subprotocols: []string{"mqtt"}, TLSClientConfig: &tls.Config{RootCAs: p.Pool()}, HandshakeTimeout: rawTimeout}
		c, _, err := d.Dial(url, nil)
		if err != nil {
			t.Fatalf("dial %s: %v", url, err)
		}
		wc := &wsConn{c: c}
		t.Cleanup(func() { _ = wc.Close() })
		return wc
	}
	return b, dial
}

// TestDisconnectPacketTooLarge: a PUBLISH larger than the Maximum Packet
// Size (1024 here) gets an MQTT 5 client DISCONNECT 0x95 Packet too large
// before the connection closes, on every transport (over WebSocket the
// packet comes in messages within the size, so the WebSocket layer passes
// it on; a larger message is refused with close 1009, TestWebSocketFrames).
// A 3.1.1 client sees the connection close with no packet. A packet of
// exactly the size passes.
func TestDisconnectPacketTooLarge(t *testing.T) {
	_, dial := startSizeServer(t)
	for _, tr := range []string{"quic", "tcp", "tls", "ws", "wss", "broker"} {
		for _, v := range []byte{5, 4} {
			t.Run(fmt.Sprintf("%s/v%d", tr, v), func(t *testing.T) {
				c, code := connectOn(t, dial(tr), connectOpts{version: v, id: fmt.Sprintf("big-%s-%d", tr, v), clean: true})
				if code != 0 {
					t.Fatalf("CONNACK 0x%02x", code)
				}
				// The largest packet mochi passes: remaining length
				// 1023 (it counts remaining + 1 against the size).
				fits := publishBytes(t, v, "big/t", 1023-2-len("big/t")-2-propsLen(v))
				// In chunks of 512 bytes: a WebSocket client's messages
				// stay within the size.
				send := func(b []byte) {
					for off := 0; off < len(b); off += 512 {
						if _, err := c.nc.Write(b[off:min(off+512, len(b))]); err != nil {
							return // closed already
						}
					}
				}
				send(fits)
				if ack, err := c.read(rawTimeout); err != nil || ack.FixedHeader.Type != packets.Puback {
					t.Fatalf("a packet within the size: got packet type %d %v, want PUBACK", ack.FixedHeader.Type, err)
				}
				send(publishBytes(t, v, "big/t", 2000))
				pk, err := c.read(rawTimeout)
				if v == 4 {
					if err == nil {
						t.Fatalf("3.1.1: got packet type %d, want the connection closed", pk.FixedHeader.Type)
					}
				} else {
					if err != nil {
						t.Fatalf("no DISCONNECT 0x95 before the close: %v", err)
					}
					if pk.FixedHeader.Type != packets.Disconnect || pk.ReasonCode != packets.ErrPacketTooLarge.Code {
						t.Fatalf("got packet type %d reason 0x%02x, want DISCONNECT 0x95", pk.FixedHeader.Type, pk.ReasonCode)
					}
					_, err = c.read(rawTimeout)
				}
				if err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
					t.Fatalf("after the refusal: %v, want the connection closed", err)
				}
			})
		}
	}
}

// propsLen is the length of a PUBLISH's empty property block (MQTT 5).
func propsLen(v byte) int {
	if v == 5 {
		return 1
	}
	return 0
}

// publishBytes encodes a QoS 1 PUBLISH (packet id 1) to topic with a
// payload of n bytes.
func publishBytes(t *testing.T, v byte, topic string, n int) []byte {
	t.Helper()
	pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}, ProtocolVersion: v, TopicName: topic, PacketID: 1, Payload: bytes.Repeat([]byte("x"), n)}
	var buf bytes.Buffer
	if err := pk.PublishEncode(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestReceiveMaximumOverWebSocket: mochi's own DISCONNECT 0x93 Receive
// Maximum exceeded (TestServerReceiveMaximum, MQTT/TCP) reaches an MQTT 5
// client over WebSocket too: 1024 QoS 2 PUBLISHes left without PUBREL,
// then one more.
func TestReceiveMaximumOverWebSocket(t *testing.T) {
	_, dial := startSizeServer(t)
	c, code := connectOn(t, dial("ws"), connectOpts{id: "rm-ws", clean: true})
	if code != 0 {
		t.Fatalf("CONNACK 0x%02x", code)
	}
	send := func(id uint16) {
		pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 2}, TopicName: "rm/t", PacketID: id, Payload: []byte("x")}
		c.write(pk, (*packets.Packet).PublishEncode)
	}
	for i := 1; i <= 1024; i++ {
		send(uint16(i))
		pk, err := c.read(rawTimeout)
		if err != nil || pk.FixedHeader.Type != packets.Pubrec {
			t.Fatalf("PUBLISH %d: got packet type %d %v, want PUBREC", i, pk.FixedHeader.Type, err)
		}
	}
	send(1025)
	pk, err := c.read(rawTimeout)
	if err != nil || pk.FixedHeader.Type != packets.Disconnect || pk.ReasonCode != packets.ErrReceiveMaximum.Code {
		t.Fatalf("got packet type %d reason 0x%02x %v, want DISCONNECT 0x93", pk.FixedHeader.Type, pk.ReasonCode, err)
	}
}

// TestSizeWatch follows byte streams fed in pieces of every size: the
// version comes from the CONNECT (MQTT 5, 3.1.1, 3.1 "MQIsdp"), and the
// first packet over the size is found where its header begins.
func TestSizeWatch(t *testing.T) {
	connect := func(v byte) []byte {
		pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connect}, ProtocolVersion: v,
			Connect: packets.ConnectParams{ProtocolName: []byte("MQTT"), Clean: true, Keepalive: 30, ClientIdentifier: "w"}}
		if v == 3 {
			pk.Connect.ProtocolName = []byte("MQIsdp")
		}
		var buf bytes.Buffer
		if err := pk.ConnectEncode(&buf); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	tests := []struct {
		name    string
		v       byte
		payload int  // of the PUBLISH after a small one
		big     bool // over the size (100)
	}{
		{"v5 fits", 5, 80, false},
		{"v5 too large", 5, 200, true},
		{"v3.1.1 too large", 4, 200, true},
		{"v3.1 too large", 3, 200, true},
		{"v5 huge", 5, 1 << 20, true},
	}
	for _, tt := range tests {
		pv := tt.v
		if pv == 3 {
			pv = 4
		}
		small := publishBytes(t, pv, "s", 3)
		stream := append(append(connect(tt.v), small...), publishBytes(t, pv, "t", tt.payload)...)
		begin := len(stream) - len(publishBytes(t, pv, "t", tt.payload))
		for _, piece := range []int{1, 2, 3, 7, len(stream)} {
			t.Run(fmt.Sprintf("%s/%d", tt.name, piece), func(t *testing.T) {
				w := sizeWatch{max: 100}
				found, where := false, -1
				for off := 0; off < len(stream); off += piece {
					if big, at := w.feed(stream[off:min(off+piece, len(stream))]); big {
						found, where = true, off+at
						break
					}
				}
				if found != tt.big {
					t.Fatalf("too large: %v, want %v", found, tt.big)
				}
				if w.v5 != (tt.v == 5) {
					t.Fatalf("v5 %v for version %d", w.v5, tt.v)
				}
				// The header's first byte or, when the header came in
				// pieces, the start of the piece that completed it (the
				// bytes before went to mochi already): within the five
				// header bytes.
				if found && (where < begin || where >= begin+5) {
					t.Fatalf("found at %d, the packet begins at %d", where, begin)
				}
			})
		}
	}
}

// FuzzSizeWatch feeds arbitrary bytes in pieces: no panic, and a packet
// is reported too large at most once, at an offset within its piece.
func FuzzSizeWatch(f *testing.F) {
	f.Add([]byte{0x10, 0x0c, 0, 4, 'M', 'Q', 'T', 'T', 5, 2, 0, 30, 0, 0x30, 0xff, 0xff, 0x7f}, uint8(3), uint16(100))
	f.Add([]byte{0x10, 0xff, 0xff, 0xff, 0xff, 0x01}, uint8(1), uint16(10))
	f.Add([]byte{0x10, 0x02, 0xff, 0xff, 0x30, 0x00}, uint8(2), uint16(0))
	f.Fuzz(func(t *testing.T, stream []byte, piece uint8, limit uint16) {
		w := sizeWatch{max: uint32(limit)}
		n := max(int(piece), 1)
		found := 0
		for off := 0; off < len(stream); off += n {
			p := stream[off:min(off+n, len(stream))]
			if big, at := w.feed(p); big {
				found++
				if at < 0 || at > len(p) {
					t.Fatalf("offset %d outside a piece of %d bytes", at, len(p))
				}
			}
		}
		if found > 1 {
			t.Fatalf("reported %d times", found)
		}
	})
}

// TestSocketOnlyForPlainTCP: mochi writes a delivery straight to the
// socket of a connection that hands it out (third_party/mochi/QUIOT.md,
// change 17); a watched plain TCP connection hands out its socket, under
// its write lock, and a watched TLS connection none: bytes written there
// would bypass the encryption.
func TestSocketOnlyForPlainTCP(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	dial := func() net.Conn {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}

	sc, ok := watchPacketSize(dial(), 1024).(syscall.Conn)
	if !ok {
		t.Fatal("a watched TCP connection hands out no socket")
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		t.Fatalf("watched TCP connection: %v", err)
	}
	if _, ok := rc.(lockedRaw); !ok {
		t.Fatalf("the socket's writes do not take the write lock: %T", rc)
	}

	tc := tls.Client(dial(), &tls.Config{InsecureSkipVerify: true})
	if sc, ok := watchPacketSize(tc, 1024).(syscall.Conn); ok {
		if rc, err := sc.SyscallConn(); !errors.Is(err, errNoSocket) {
			t.Fatalf("a watched TLS connection handed out %v, %v; want errNoSocket", rc, err)
		}
	}
}

// TestTCPDeliveryWrittenAtOnce: a delivery to an MQTT/TCP subscriber with
// room is written by the goroutine delivering it (mochi's
// Info.InlineWrites), and over QUIC by the writer goroutine. A delivery
// that finds the subscriber's writer still running (it wrote the SUBACK
// or a PINGRESP and has not yet given its role back) is queued for it, as
// it should be, so over TCP the test publishes until one delivery is
// written at once, each after the one before has arrived; it fails if
// none of them is.
func TestTCPDeliveryWrittenAtOnce(t *testing.T) {
	b := startBridged(t, nil)
	for _, tc := range []struct {
		transport string
		inline    bool
	}{{"tcp", true}, {"quic", false}} {
		t.Run(tc.transport, func(t *testing.T) {
			sub := dialTransport(t, b, tc.transport, 5)
			sub.connect("at-once-sub-"+tc.transport, true, nil)
			sub.subscribe(1, 0, "at-once/"+tc.transport)
			pub := dialTransport(t, b, "tcp", 5)
			pub.connect("at-once-pub-"+tc.transport, true, nil)
			const tries = 50
			var inline int64
			for i := 0; i < tries && (inline == 0 || !tc.inline); i++ {
				before := atomic.LoadInt64(&b.mqtt.mq.Info.InlineWrites)
				pub.publish(0, 0, "at-once/"+tc.transport, []byte("x"), nil)
				awaitTopic(t, sub, "at-once/"+tc.transport)
				inline += atomic.LoadInt64(&b.mqtt.mq.Info.InlineWrites) - before
				if !tc.inline && i == 2 {
					break
				}
			}
			if (inline > 0) != tc.inline {
				t.Fatalf("%d deliveries written at once, want inline=%v", inline, tc.inline)
			}
		})
	}
}

// TestSizeConnFootprint: a sizeConn lives as long as its connection, so it
// stays within the allocator's 64-byte size class (112 with sizeWatch's
// int and uint64 fields and its slice of the CONNECT's first bytes).
func TestSizeConnFootprint(t *testing.T) {
	if got := unsafe.Sizeof(sizeConn{}); got > 64 {
		t.Errorf("sizeConn is %d bytes, want at most 64", got)
	}
}
