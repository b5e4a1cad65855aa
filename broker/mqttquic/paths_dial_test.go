package mqttquic

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/quic-go/quic-go"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/internal/streamconn"
)

// Dialing every path an MQTT client reaches the broker by (docs/security.md,
// the rule × path table): MQTT over QUIC, MQTT/TCP, MQTT/TLS, MQTT over
// WebSocket on its own listener (ws, wss) and on the HTTP broker's port
// (broker), to a chosen host and from a chosen source address.

// pathTransports are the transports pathDial knows.
var pathTransports = []string{"quic", "tcp", "tls", "ws", "wss", "broker"}

// pathOpts says where a connection goes and comes from.
type pathOpts struct {
	host  string           // the host dialled; "" means the listener's own address
	local string           // the source IP; "" means any
	cert  *tls.Certificate // the client certificate (quic, tls, wss, broker)
}

// pathAddr is the address of transport's listener of s (or of the broker
// h3, for "broker").
func pathAddr(s *Server, h3 *broker.Broker, transport string) string {
	switch transport {
	case "quic":
		return s.QUICAddr().String()
	case "tcp":
		return s.TCPAddr()
	case "tls":
		return s.TLSAddr()
	case "ws":
		return s.WSAddr()
	case "wss":
		return s.WSSAddr()
	case "broker":
		return h3.TCPAddr().String()
	}
	panic("unknown transport " + transport)
}

// pathDial opens an MQTT connection over transport; it is closed on
// cleanup.
func pathDial(t testing.TB, s *Server, h3 *broker.Broker, p *testPKI, transport string, o pathOpts) net.Conn {
	t.Helper()
	addr := pathAddr(s, h3, transport)
	if o.host != "" {
		_, port, err := net.SplitHostPort(addr)
		if err != nil {
			t.Fatal(err)
		}
		addr = net.JoinHostPort(o.host, port)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tc := &tls.Config{RootCAs: p.Pool(), ServerName: "localhost", MinVersion: tls.VersionTLS13}
	if o.cert != nil {
		tc.Certificates = []tls.Certificate{*o.cert}
	}
	d := net.Dialer{}
	if o.local != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(o.local)}
	}
	var nc net.Conn
	switch transport {
	case "quic":
		la := &net.UDPAddr{}
		if o.local != "" {
			la.IP = net.ParseIP(o.local)
		}
		pc, err := net.ListenUDP("udp", la)
		if err != nil {
			t.Fatal(err)
		}
		ra, err := net.ResolveUDPAddr("udp", addr)
		if err != nil {
			t.Fatal(err)
		}
		tr := &quic.Transport{Conn: pc}
		t.Cleanup(func() { _ = tr.Close(); _ = pc.Close() })
		tc.NextProtos = []string{"mqtt"}
		qc, err := tr.Dial(ctx, ra, tc, &quic.Config{})
		if err != nil {
			t.Fatalf("dial %s over quic: %v", addr, err)
		}
		st, err := qc.OpenStreamSync(ctx)
		if err != nil {
			t.Fatal(err)
		}
		nc = streamconn.New(qc, st, true)
	case "tcp":
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			t.Fatalf("dial %s over tcp: %v", addr, err)
		}
		nc = c
	case "tls":
		c, err := (&tls.Dialer{NetDialer: &d, Config: tc}).DialContext(ctx, "tcp", addr)
		if err != nil {
			t.Fatalf("dial %s over tls: %v", addr, err)
		}
		nc = c
	case "ws", "wss", "broker":
		scheme := "wss"
		if transport == "ws" {
			scheme = "ws"
		}
		wd := websocket.Dialer{Subprotocols: []string{"mqtt"}, TLSClientConfig: tc, HandshakeTimeout: 30 * time.Second, NetDialContext: d.DialContext}
		wc, resp, err := wd.DialContext(ctx, fmt.Sprintf("%s://%s%s", scheme, addr, WSPath), nil)
		if err != nil {
			status := 0
			if resp != nil {
				status = resp.StatusCode
			}
			t.Fatalf("dial %s over %s: %v (HTTP %d)", addr, transport, err, status)
		}
		nc = &wsNetConn{Conn: wc}
	default:
		t.Fatalf("unknown transport %q", transport)
	}
	t.Cleanup(func() { _ = nc.Close() })
	return nc
}

// pathConnect dials transport and sends CONNECT o; it returns the client
// and the CONNACK's reason code (3.1.1: return code).
func pathConnect(t testing.TB, s *Server, h3 *broker.Broker, p *testPKI, transport string, po pathOpts, o connectOpts) (*rawClient, byte) {
	t.Helper()
	return connectOn(t, pathDial(t, s, h3, p, transport, po), o)
}

// mustPathConnect is pathConnect failing the test unless the broker
// accepts.
func mustPathConnect(t testing.TB, s *Server, h3 *broker.Broker, p *testPKI, transport string, po pathOpts, o connectOpts) *rawClient {
	t.Helper()
	c, code := pathConnect(t, s, h3, p, transport, po, o)
	if code != 0 {
		t.Fatalf("%s: connect %q refused: 0x%02x", transport, o.id, code)
	}
	return c
}
