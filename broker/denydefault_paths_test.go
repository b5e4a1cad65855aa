package broker_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/quic-go/http3"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/brokertest"
	"github.com/quiot/quiot/internal/testutil"
	"github.com/quiot/quiot/internal/wire"
)

// The broker's view of a client bound to natFrom is a client of natTo: a
// non-loopback address, as a client on another host (the broker under test
// listens on loopback, and the host may have no other address).
var (
	natFrom = net.ParseIP("127.0.0.2")
	natTo   = net.ParseIP("203.0.113.2") // TEST-NET-3
)

// natIP maps ip by the rule above (from -> to), or returns nil.
func natIP(ip, from, to net.IP) net.IP {
	if ip.Equal(from) {
		return to
	}
	return nil
}

// natPacketConn is the broker's UDP socket behind an address translation:
// datagrams from natFrom appear to come from natTo, and answers to natTo
// go to natFrom.
type natPacketConn struct{ net.PacketConn }

func (c natPacketConn) ReadFrom(p []byte) (int, net.Addr, error) {
	n, addr, err := c.PacketConn.ReadFrom(p)
	if ua, ok := addr.(*net.UDPAddr); ok {
		if ip := natIP(ua.IP, natFrom, natTo); ip != nil {
			addr = &net.UDPAddr{IP: ip, Port: ua.Port}
		}
	}
	return n, addr, err
}

func (c natPacketConn) WriteTo(p []byte, addr net.Addr) (int, error) {
	if ua, ok := addr.(*net.UDPAddr); ok {
		if ip := natIP(ua.IP, natTo, natFrom); ip != nil {
			addr = &net.UDPAddr{IP: ip, Port: ua.Port}
		}
	}
	return c.PacketConn.WriteTo(p, addr)
}

// SetReadBuffer and SetWriteBuffer let quic-go size the socket's buffers.
func (c natPacketConn) SetReadBuffer(n int) error {
	return c.PacketConn.(*net.UDPConn).SetReadBuffer(n)
}

func (c natPacketConn) SetWriteBuffer(n int) error {
	return c.PacketConn.(*net.UDPConn).SetWriteBuffer(n)
}

// natListener is the broker's TCP listener behind the same translation.
type natListener struct{ net.Listener }

func (l natListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if ta, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		if ip := natIP(ta.IP, natFrom, natTo); ip != nil {
			return natConn{Conn: c, remote: &net.TCPAddr{IP: ip, Port: ta.Port}}, nil
		}
	}
	return c, nil
}

type natConn struct {
	net.Conn
	remote net.Addr
}

func (c natConn) RemoteAddr() net.Addr { return c.remote }

// TestDenyByDefaultStreamAndSSE: a broker without an ACL serves loopback
// clients only (docs/security.md, "Defaults: deny by default") on the
// paths that TestBrokerWithoutACLRefusesOtherNamespaces (device) does not
// take: a streamed publish (POST /v1/publish over HTTP/3) and an
// EventSource subscription (Accept: text/event-stream, over HTTP/3,
// HTTP/2 and HTTP/1.1 on TCP) from a non-loopback address get 403 with
// the one-line reason, and the streamed message is not published; the
// same requests from loopback are served.
func TestDenyByDefaultStreamAndSSE(t *testing.T) {
	udp, tln, err := broker.ListenPair("127.0.0.1:0", true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = udp.Close() })
	b := brokertest.Start(t, nil, &broker.Options{PacketConn: natPacketConn{udp}, TCPListener: natListener{tln}})

	// Clients: from loopback (127.0.0.1) and, through the translation,
	// from a non-loopback address.
	type clients struct{ h3, h2, h1 *http.Client }
	mk := func(t *testing.T, local net.IP) clients {
		pc, err := net.ListenUDP("udp", &net.UDPAddr{IP: local})
		if err != nil {
			t.Skipf("cannot bind %s: %v", local, err)
		}
		t.Cleanup(func() { _ = pc.Close() })
		h3 := testutil.H3ClientConn(b.PKI.Pool(), nil, pc)
		t.Cleanup(func() { h3.Transport.(*http3.Transport).Close() })
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: local}}
		tcp := func(protos ...string) *http.Client {
			tr := &http.Transport{
				TLSClientConfig:   &tls.Config{RootCAs: b.PKI.Pool(), ServerName: "localhost", NextProtos: protos},
				ForceAttemptHTTP2: protos[0] == "h2",
				DialContext:       d.DialContext,
			}
			t.Cleanup(tr.CloseIdleConnections)
			return &http.Client{Transport: tr, Timeout: 30 * time.Second}
		}
		return clients{h3: h3, h2: tcp("h2", "http/1.1"), h1: tcp("http/1.1")}
	}

	streamPublish := func(c *http.Client, topic string) (*http.Response, error) {
		body := wire.AppendPublish(nil, &wire.Publish{ID: 1, Flags: wire.PubQoS1 | wire.PubRetain, Topic: topic, Payload: []byte("x")})
		req, _ := http.NewRequest(http.MethodPost, b.URL+wire.PathPublish, bytes.NewReader(body))
		req.Header.Set("Content-Type", wire.ContentType)
		return c.Do(req)
	}
	sse := func(c *http.Client) (*http.Response, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		t.Cleanup(cancel)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, b.URL+"/v1/topics/deny%2F%23", nil)
		req.Header.Set("Accept", wire.ContentTypeSSE)
		return c.Do(req)
	}

	t.Run("non-loopback refused", func(t *testing.T) {
		c := mk(t, natFrom)
		resp, err := streamPublish(c.h3, "deny/stream")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(body), "serves loopback clients only") {
			t.Errorf("h3 stream publish: %d %q, want 403 loopback only", resp.StatusCode, body)
		}
		for name, hc := range map[string]*http.Client{"h3": c.h3, "h2": c.h2, "h1": c.h1} {
			resp, err := sse(hc)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(body), "serves loopback clients only") {
				t.Errorf("%s EventSource subscription: %d %q, want 403 loopback only", name, resp.StatusCode, body)
			}
		}
		if st := b.Stats(); st.LastSeq != 0 || st.Retained != 0 {
			t.Errorf("the refused stream published: last seq %d, %d retained", st.LastSeq, st.Retained)
		}
	})

	t.Run("loopback served", func(t *testing.T) {
		c := mk(t, net.ParseIP("127.0.0.1"))
		resp, err := streamPublish(c.h3, "deny/stream")
		if err != nil {
			t.Fatal(err)
		}
		a, err := wire.NewDecoder(resp.Body, 0).Ack()
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || err != nil || a.Status != 0 || a.Seq == 0 {
			t.Errorf("h3 stream publish: %d, ack %+v %v", resp.StatusCode, a, err)
		}
		for name, hc := range map[string]*http.Client{"h3": c.h3, "h2": c.h2, "h1": c.h1} {
			resp, err := sse(hc)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			// The retained message published above comes first.
			ev, err := wire.NewSSEReader(resp.Body).Next()
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || err != nil || ev.Event != "message" {
				t.Errorf("%s EventSource subscription: %d, first event %+v %v", name, resp.StatusCode, ev, err)
			}
		}
	})
}
