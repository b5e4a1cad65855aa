package mqttquic

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quiot/quiot/broker/brokertest"

	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/quic-go/quic-go"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/auth"
	"github.com/quiot/quiot/device/client"
	"github.com/quiot/quiot/internal/streamconn"
)

// A raw MQTT client on mochi's packet codec: every field of CONNECT
// (will, clean start, client id, 3.1.1 or 5) under the test's control,
// and the broker's answers as they are on the wire.

// rawClient is one MQTT connection.
type rawClient struct {
	t      testing.TB
	nc     net.Conn
	r      *bufio.Reader
	v      byte
	nextID uint16
	// pending are deliveries read while waiting for an acknowledgement.
	pending []packets.Packet
}

// connectOpts is a CONNECT.
type connectOpts struct {
	version     byte // 4 (3.1.1) or 5; zero means 5
	id          string
	user, pass  string
	clean       bool
	expiry      uint32 // MQTT 5 session expiry interval
	willTopic   string
	willPayload string
	willRetain  bool
	willQoS     byte
	cert        *tls.Certificate // client certificate (QUIC and TLS)
	local       string           // source address over TCP (a loopback address), "" = any
}

// secDial opens a connection to s over "tcp", "tls" or "quic", with
// client certificate cert if not nil.
func secDial(t testing.TB, s *Server, p *testPKI, transport string, cert ...*tls.Certificate) net.Conn {
	t.Helper()
	return secDialFrom(t, s, p, transport, "", cert...)
}

// secDialFrom is secDial from source address local over TCP ("" = any).
func secDialFrom(t testing.TB, s *Server, p *testPKI, transport, local string, cert ...*tls.Certificate) net.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tc := &tls.Config{RootCAs: p.Pool(), ServerName: "localhost", MinVersion: tls.VersionTLS13}
	if len(cert) > 0 && cert[0] != nil {
		tc.Certificates = []tls.Certificate{*cert[0]}
	}
	if transport == "tls" {
		d := tls.Dialer{Config: tc}
		nc, err := d.DialContext(ctx, "tcp", s.TLSAddr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = nc.Close() })
		return nc
	}
	if transport == "tcp" {
		var d net.Dialer
		if local != "" {
			d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(local)}
		}
		nc, err := d.DialContext(ctx, "tcp", s.TCPAddr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = nc.Close() })
		return nc
	}
	tc.NextProtos = []string{"mqtt"}
	qc, err := quic.DialAddr(ctx, s.QUICAddr().String(), tc, &quic.Config{})
	if err != nil {
		t.Fatal(err)
	}
	st, err := qc.OpenStreamSync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	nc := streamconn.New(qc, st, true)
	t.Cleanup(func() { _ = nc.Close() })
	return nc
}

// connectRaw dials and sends CONNECT; it returns the client and the
// CONNACK's reason code (3.1.1: return code).
func connectRaw(t testing.TB, s *Server, p *testPKI, transport string, o connectOpts) (*rawClient, byte) {
	t.Helper()
	if o.version == 0 {
		o.version = 5
	}
	return connectOn(t, secDialFrom(t, s, p, transport, o.local, o.cert), o)
}

// connectOn sends CONNECT on nc; it returns the client and the CONNACK's
// reason code (3.1.1: return code).
func connectOn(t testing.TB, nc net.Conn, o connectOpts) (*rawClient, byte) {
	t.Helper()
	if o.version == 0 {
		o.version = 5
	}
	c := &rawClient{t: t, nc: nc, v: o.version}
	c.r = bufio.NewReader(c.nc)
	pk := packets.Packet{
		FixedHeader:     packets.FixedHeader{Type: packets.Connect},
		ProtocolVersion: o.version,
		Connect: packets.ConnectParams{
			ProtocolName:     []byte("MQTT"),
			ClientIdentifier: o.id,
			Clean:            o.clean,
			Keepalive:        60,
		},
	}
	if o.user != "" {
		pk.Connect.UsernameFlag, pk.Connect.Username = true, []byte(o.user)
	}
	if o.pass != "" {
		pk.Connect.PasswordFlag, pk.Connect.Password = true, []byte(o.pass)
	}
	if o.version == 5 && o.expiry > 0 {
		pk.Properties.SessionExpiryInterval, pk.Properties.SessionExpiryIntervalFlag = o.expiry, true
	}
	if o.willTopic != "" {
		pk.Connect.WillFlag = true
		pk.Connect.WillTopic, pk.Connect.WillPayload = o.willTopic, []byte(o.willPayload)
		pk.Connect.WillRetain, pk.Connect.WillQos = o.willRetain, o.willQoS
	}
	c.write(pk, (*packets.Packet).ConnectEncode)
	ack, err := c.read(30 * time.Second)
	if err != nil {
		t.Fatalf("connect %q: no CONNACK: %v", o.id, err)
	}
	if ack.FixedHeader.Type != packets.Connack {
		t.Fatalf("connect %q: got packet type %d, want CONNACK", o.id, ack.FixedHeader.Type)
	}
	return c, ack.ReasonCode
}

// mustConnect connects and fails the test unless the broker accepts.
func mustConnect(t testing.TB, s *Server, p *testPKI, transport string, o connectOpts) *rawClient {
	t.Helper()
	c, code := connectRaw(t, s, p, transport, o)
	if code != 0 {
		t.Fatalf("connect %q refused: 0x%02x", o.id, code)
	}
	return c
}

func (c *rawClient) write(pk packets.Packet, enc func(*packets.Packet, *bytes.Buffer) error) {
	c.t.Helper()
	pk.ProtocolVersion = c.v
	var buf bytes.Buffer
	if err := enc(&pk, &buf); err != nil {
		c.t.Fatalf("encode: %v", err)
	}
	if _, err := c.nc.Write(buf.Bytes()); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

// read returns the next packet, or an error (io.EOF when the broker closed
// the connection, a timeout after d).
func (c *rawClient) read(d time.Duration) (packets.Packet, error) {
	_ = c.nc.SetReadDeadline(time.Now().Add(d))
	b, err := c.r.ReadByte()
	if err != nil {
		return packets.Packet{}, err
	}
	var fh packets.FixedHeader
	if err := fh.Decode(b); err != nil {
		return packets.Packet{}, err
	}
	n, _, err := packets.DecodeLength(c.r)
	if err != nil {
		return packets.Packet{}, err
	}
	fh.Remaining = n
	body := make([]byte, n)
	if _, err := io.ReadFull(c.r, body); err != nil {
		return packets.Packet{}, err
	}
	pk := packets.Packet{FixedHeader: fh, ProtocolVersion: c.v}
	switch fh.Type {
	case packets.Connack:
		err = pk.ConnackDecode(body)
	case packets.Publish:
		err = pk.PublishDecode(body)
	case packets.Puback:
		err = pk.PubackDecode(body)
	case packets.Suback:
		err = pk.SubackDecode(body)
	case packets.Pubrec:
		err = pk.PubrecDecode(body)
	case packets.Disconnect:
		err = pk.DisconnectDecode(body)
	case packets.Pingresp:
	default:
		err = fmt.Errorf("unexpected packet type %d", fh.Type)
	}
	return pk, err
}

// subscribe subscribes to filters at QoS 1 and returns the SUBACK codes.
func (c *rawClient) subscribe(filters ...string) []byte {
	c.t.Helper()
	c.nextID++
	pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Subscribe, Qos: 1}, PacketID: c.nextID}
	for _, f := range filters {
		pk.Filters = append(pk.Filters, packets.Subscription{Filter: f, Qos: 1})
	}
	c.write(pk, (*packets.Packet).SubscribeEncode)
	for {
		ack, err := c.read(30 * time.Second)
		if err != nil {
			c.t.Fatalf("subscribe %v: %v", filters, err)
		}
		if ack.FixedHeader.Type == packets.Suback {
			return ack.ReasonCodes
		}
		c.keep(ack)
	}
}

// publish sends a publish; at QoS 1 it returns the PUBACK's reason code,
// or an error when the broker closed the connection instead.
func (c *rawClient) publish(topic, payload string, qos byte, retain bool) (byte, error) {
	c.t.Helper()
	return c.publishProps(topic, payload, qos, retain, nil)
}

// publishProps is publish with MQTT 5 user properties.
func (c *rawClient) publishProps(topic, payload string, qos byte, retain bool, user []packets.UserProperty) (byte, error) {
	c.t.Helper()
	pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: qos, Retain: retain}, TopicName: topic, Payload: []byte(payload)}
	pk.Properties.User = user
	if qos > 0 {
		c.nextID++
		pk.PacketID = c.nextID
	}
	c.write(pk, (*packets.Packet).PublishEncode)
	if qos == 0 {
		return 0, nil
	}
	for {
		ack, err := c.read(30 * time.Second)
		if err != nil {
			return 0, err
		}
		if ack.FixedHeader.Type == packets.Puback && ack.PacketID == pk.PacketID {
			return ack.ReasonCode, nil
		}
		c.keep(ack)
	}
}

// keep acknowledges a delivery read while waiting for something else and
// keeps it for next.
func (c *rawClient) keep(pk packets.Packet) {
	if pk.FixedHeader.Type == packets.Publish {
		c.ack(pk)
		c.pending = append(c.pending, pk)
	}
}

// ack acknowledges a QoS 1 delivery.
func (c *rawClient) ack(pk packets.Packet) {
	if pk.FixedHeader.Type == packets.Publish && pk.FixedHeader.Qos > 0 {
		c.write(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Puback}, PacketID: pk.PacketID}, (*packets.Packet).PubackEncode)
	}
}

// next returns the next delivery (acknowledged), failing after 30 s.
func (c *rawClient) next() packets.Packet {
	c.t.Helper()
	if len(c.pending) > 0 {
		pk := c.pending[0]
		c.pending = c.pending[1:]
		return pk
	}
	for {
		pk, err := c.read(30 * time.Second)
		if err != nil {
			c.t.Fatalf("waiting for a delivery: %v", err)
		}
		if pk.FixedHeader.Type == packets.Publish {
			c.ack(pk)
			return pk
		}
	}
}

// expectNoPublish fails if any PUBLISH arrives before a sync message the
// client sends itself through public/sync/<id> (it must be allowed to
// publish and subscribe there): mochi queues a client's deliveries in
// order, so whatever was queued for it before comes first.
func (c *rawClient) expectNoPublish(id, what string) {
	c.t.Helper()
	topic := "public/sync/" + id
	if codes := c.subscribe(topic); codes[0] > 2 {
		c.t.Fatalf("%s: subscribe %s: 0x%02x", what, topic, codes[0])
	}
	if code, err := c.publish(topic, "sync", 1, false); err != nil || code != 0 {
		c.t.Fatalf("%s: sync publish: 0x%02x %v", what, code, err)
	}
	for {
		pk := c.next()
		if pk.TopicName == topic {
			return
		}
		c.t.Fatalf("%s: received %q on %q", what, pk.Payload, pk.TopicName)
	}
}

// disconnect sends DISCONNECT (no will) and closes.
func (c *rawClient) disconnect() {
	c.write(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Disconnect}}, (*packets.Packet).DisconnectEncode)
	_ = c.nc.Close()
}

// waitForCond polls cond (cheap state reads) until it holds, failing after
// 30 s: it waits for an event the broker does not announce, it does not
// time anything.
func waitForCond(t testing.TB, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timeout waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// sessionOffline reports whether mochi holds no connected client with id
// (after an abrupt close: the will, if any, has been handled).
func sessionOffline(s *Server, id string) bool {
	cl, ok := s.MQTT().Clients.Get(id)
	return !ok || cl.Closed()
}

// queued is the number of messages mochi holds for client id.
func queued(s *Server, id string) int {
	cl, ok := s.MQTT().Clients.Get(id)
	if !ok {
		return -1
	}
	return cl.State.Inflight.Len()
}

// swapCore is the HTTP/3 broker as Core with an authenticator the test
// can replace (an ACL reload as the MQTT side sees it).
type swapCore struct {
	*broker.Broker
	a atomic.Pointer[auth.Authenticator]
}

func (c *swapCore) Auth() *auth.Authenticator { return c.a.Load() }

// startSecure starts an HTTP/3 broker with ACL file acl and an MQTT server
// joined to it through a swapCore, QUIC and TCP listeners on loopback.
func startSecure(t testing.TB, acl string, mod func(*Options)) (*bridged, *swapCore) {
	t.Helper()
	a, err := auth.Parse([]byte(acl))
	if err != nil {
		t.Fatal(err)
	}
	p := newPKI(t)
	h3 := brokertest.Start(t, p, &broker.Options{Auth: a, ClientCAs: p.Pool()})
	core := &swapCore{Broker: h3.Broker}
	core.a.Store(a)
	s := startServer(t, p, func(o *Options) {
		o.Broker = core
		o.TCPAddr = "127.0.0.1:0"
		o.TLSAddr = "127.0.0.1:0"
		if mod != nil {
			mod(o)
		}
	})
	return &bridged{pki: p, h3: h3, mqtt: s}, core
}

// hook returns the server's auth hook.
func (s *Server) hook() *authHook { return s.br.auth }

// recvLong waits up to 30 s for a message.
func recvLong(t testing.TB, ch <-chan client.Message, what string) client.Message {
	t.Helper()
	select {
	case m := <-ch:
		return m
	case <-time.After(30 * time.Second):
		t.Fatalf("timeout waiting for %s", what)
	}
	return client.Message{}
}

// afterShort is the interval of a retry loop (publish again until a
// subscription is in place), never an assertion's timeout.
func afterShort() <-chan time.Time { return time.After(200 * time.Millisecond) }

// brokerMsg is a QoS 1 message as the HTTP/3 side would publish it for
// alice.
func brokerMsg(topic, payload string) broker.Message {
	return broker.Message{Topic: topic, Payload: []byte(payload), QoS: 1, Origin: "h3", Identity: "alice"}
}
