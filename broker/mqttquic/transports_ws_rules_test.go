package mqttquic

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/auth"
	"github.com/quiot/quiot/broker/brokertest"
)

// wsNetConn is a net.Conn over a WebSocket connection's binary messages.
type wsNetConn struct {
	*websocket.Conn
	r io.Reader
}

func (c *wsNetConn) Read(p []byte) (int, error) {
	for {
		if c.r != nil {
			n, err := c.r.Read(p)
			if err == io.EOF {
				c.r = nil
				if n > 0 {
					return n, nil
				}
				continue
			}
			return n, err
		}
		_, r, err := c.NextReader()
		if err != nil {
			return 0, err
		}
		c.r = r
	}
}

func (c *wsNetConn) Write(p []byte) (int, error) {
	return len(p), c.WriteMessage(websocket.BinaryMessage, p)
}

func (c *wsNetConn) SetDeadline(t time.Time) error {
	_ = c.SetReadDeadline(t)
	return c.SetWriteDeadline(t)
}

var _ net.Conn = (*wsNetConn)(nil)

// connectWS sends a CONNECT (MQTT 5) over ws://; it returns the client
// and the CONNACK's reason code.
func connectWS(t *testing.T, s *Server, o connectOpts) (*rawClient, byte) {
	t.Helper()
	d := websocket.Dialer{Subprotocols: []string{"mqtt"}, HandshakeTimeout: 10 * time.Second}
	wc, _, err := d.Dial("ws://"+s.WSAddr()+WSPath, nil)
	if err != nil {
		t.Fatal(err)
	}
	nc := &wsNetConn{Conn: wc}
	t.Cleanup(func() { _ = nc.Close() })
	c := &rawClient{t: t, nc: nc, r: bufio.NewReader(nc), v: 5}
	pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connect}, ProtocolVersion: 5,
		Connect: packets.ConnectParams{ProtocolName: []byte("MQTT"), ClientIdentifier: o.id, Clean: o.clean, Keepalive: 60}}
	if o.user != "" {
		pk.Connect.UsernameFlag, pk.Connect.Username = true, []byte(o.user)
	}
	if o.pass != "" {
		pk.Connect.PasswordFlag, pk.Connect.Password = true, []byte(o.pass)
	}
	if o.willTopic != "" {
		pk.Connect.WillFlag, pk.Connect.WillTopic, pk.Connect.WillPayload, pk.Connect.WillRetain = true, o.willTopic, []byte(o.willPayload), o.willRetain
	}
	var buf bytes.Buffer
	if err := pk.ConnectEncode(&buf); err != nil {
		t.Fatal(err)
	}
	if _, err := nc.Write(buf.Bytes()); err != nil {
		t.Fatal(err)
	}
	ack, err := c.read(10 * time.Second)
	if err != nil || ack.FixedHeader.Type != packets.Connack {
		t.Fatalf("connect %q: no CONNACK: %v", o.id, err)
	}
	return c, ack.ReasonCode
}

// TestRulesOverWebSocket: the ACL, the topic limits (SUBSCRIBE filter,
// will topic), client-id ownership and password throttling hold over MQTT over
// WebSocket as over the other transports (TestRulesEveryTransport,
// TestThrottleEveryTransport).
func TestRulesOverWebSocket(t *testing.T) {
	acl, err := auth.Parse([]byte(aclFile + "\n[[user]]\nname = \"bob\"\npassword = \"pw-bob\"\npublish = [\"b/#\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	acl.SetThrottle(auth.Throttle{Failures: 2, Window: time.Hour, Backoff: time.Hour})
	p := newPKI(t)
	h3 := brokertest.Start(t, p, &broker.Options{Auth: acl, ClientCAs: p.Pool()})
	s := startServer(t, p, func(o *Options) {
		o.Broker = h3.Broker
		o.WSAddr = "127.0.0.1:0"
	})
	c, code := connectWS(t, s, connectOpts{id: "rules-ws", clean: true})
	if code != 0 {
		t.Fatalf("CONNACK 0x%02x", code)
	}
	if got := c.subscribe(levels(17)); len(got) != 1 || got[0] != packets.ErrTopicFilterInvalid.Code {
		t.Errorf("subscribe 17 levels: %x, want 0x8f", got)
	}
	// The ACL (anonymous: public/# only).
	if got := c.subscribe("a/#"); len(got) != 1 || got[0] != packets.ErrNotAuthorized.Code {
		t.Errorf("subscribe to a denied filter: %x, want 0x87", got)
	}
	if code, err := c.publish("a/x", "x", 1, false); err != nil || code != packets.ErrNotAuthorized.Code {
		t.Errorf("publish to a denied topic: 0x%02x %v, want 0x87", code, err)
	}
	if _, code := connectWS(t, s, connectOpts{id: "will-ws", clean: true, willTopic: levels(17), willPayload: "x", willRetain: true}); code != packets.ErrTopicNameInvalid.Code {
		t.Errorf("will on 17 levels: CONNACK 0x%02x, want 0x90", code)
	}
	if _, code := connectWS(t, s, connectOpts{id: "alice", clean: true}); code != packets.ErrClientIdentifierNotValid.Code {
		t.Errorf("anonymous CONNECT as client id alice: CONNACK 0x%02x, want 0x85", code)
	}
	for i := range 2 {
		if _, code := connectWS(t, s, connectOpts{id: "g", user: "bob", pass: "guess", clean: true}); code != badCredentials(5) {
			t.Fatalf("wrong password %d: CONNACK 0x%02x", i, code)
		}
	}
	if _, code := connectWS(t, s, connectOpts{id: "g", user: "bob", pass: "pw-bob", clean: true}); code != packets.ErrConnectionRateExceeded.Code {
		t.Errorf("right password after 2 wrong ones: CONNACK 0x%02x, want 0x9f", code)
	}
}
