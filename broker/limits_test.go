package broker_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/quiot/quiot/broker/brokertest"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"golang.org/x/net/http2"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/auth"
	"github.com/quiot/quiot/internal/testutil"
)

// eventually polls cond until it holds (30 s at most): the broker frees a
// connection's slots when it learns that the connection ended, an event the
// test cannot wait on directly.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timeout waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond) // polling interval, not a synchronisation
	}
}

// connsIdle waits until the broker holds no HTTP/3 connection (the
// readiness probe's has ended).
func connsIdle(t *testing.T, b *brokertest.Broker) {
	t.Helper()
	eventually(t, "no open connections", func() bool {
		s := b.Stats()
		return s.Protocols[broker.ProtoH3].ConnsOpen == 0 && s.Protocols[broker.ProtoTCP].ConnsOpen == 0
	})
}

// h3Get does one GET /healthz on a new HTTP/3 client (kept open until the
// test ends unless closed) and returns the client, the status and the error.
func h3Get(t *testing.T, b *brokertest.Broker, hdr ...string) (*http.Client, int, error) {
	t.Helper()
	c := testutil.H3Client(b.PKI.Pool(), nil)
	t.Cleanup(func() { c.Transport.(*http3.Transport).Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, b.URL+"/v1/topics/lim%2Fx?count=1", nil)
	if len(hdr) == 0 {
		req, _ = http.NewRequestWithContext(ctx, http.MethodGet, b.URL+"/healthz", nil)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		return c, 0, err
	}
	resp.Body.Close()
	return c, resp.StatusCode, nil
}

// TestQUICConnectionLimits: HTTP/3 connections beyond MaxConns or
// MaxConnsPerAddr are refused in the handshake (CONNECTION_REFUSED),
// counted, and admitted again once a connection has ended.
func TestQUICConnectionLimits(t *testing.T) {
	for _, tt := range []struct {
		name   string
		limits broker.Limits
		refuse string
	}{
		{"total", broker.Limits{MaxConns: 2}, broker.RefusedConns},
		{"per address", broker.Limits{MaxConnsPerAddr: 2}, broker.RefusedConnsPerAddr},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := brokertest.Start(t, nil, &broker.Options{Limits: tt.limits})
			connsIdle(t, b)
			first, st1, err1 := h3Get(t, b)
			_, st2, err2 := h3Get(t, b)
			if err1 != nil || err2 != nil || st1 != 200 || st2 != 200 {
				t.Fatalf("within the limit: %d %v, %d %v", st1, err1, st2, err2)
			}
			_, _, err := h3Get(t, b)
			var te *quic.TransportError
			if !errors.As(err, &te) || te.ErrorCode != quic.ConnectionRefused {
				t.Fatalf("third connection: %v, want CONNECTION_REFUSED", err)
			}
			if n := b.Stats().Refused[tt.refuse]; n == 0 {
				t.Fatalf("Stats.Refused[%q] = 0", tt.refuse)
			}
			first.Transport.(*http3.Transport).Close()
			eventually(t, "a connection slot after a client left", func() bool {
				_, st, err := h3Get(t, b)
				return err == nil && st == 200
			})
		})
	}
}

// TestTCPConnectionLimit: a TCP connection beyond MaxConns gets 503 with
// the reason, "Connection: close", and is counted.
func TestTCPConnectionLimit(t *testing.T) {
	b := brokertest.Start(t, nil, &broker.Options{Limits: broker.Limits{MaxConns: 1}})
	connsIdle(t, b)
	tcpClient := func() *http.Client {
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: b.PKI.Pool(), ServerName: "localhost"}, ForceAttemptHTTP2: true}
		t.Cleanup(tr.CloseIdleConnections)
		return &http.Client{Transport: tr, Timeout: 30 * time.Second}
	}
	get := func(c *http.Client) (int, string) {
		resp, err := c.Get(b.URL + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	held := tcpClient()
	if st, body := get(held); st != 200 {
		t.Fatalf("first connection: %d %q", st, body)
	}
	st, body := get(tcpClient())
	if st != http.StatusServiceUnavailable || !strings.Contains(body, "too many connections") {
		t.Fatalf("second connection: %d %q, want 503 too many connections", st, body)
	}
	if n := b.Stats().Refused[broker.RefusedConns]; n == 0 {
		t.Fatal("refusal not counted")
	}
	// The held connection still works.
	if st, body := get(held); st != 200 {
		t.Fatalf("first connection after the refusal: %d %q", st, body)
	}
}

// TestConnectionsPerIdentity: a request that would bind one more
// connection than MaxConnsPerIdentity to an identity gets 429.
func TestConnectionsPerIdentity(t *testing.T) {
	acl, err := auth.Parse([]byte("[[user]]\nname = \"dev\"\ntoken = \"tok-dev\"\npublish = [\"#\"]\nsubscribe = [\"#\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	b := brokertest.Start(t, nil, &broker.Options{Auth: acl, Limits: broker.Limits{MaxConnsPerIdentity: 1}})
	publish := func(c *http.Client) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, b.URL+"/v1/topics/id%2Fx", strings.NewReader("x"))
		req.Header.Set("Authorization", "Bearer tok-dev")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	first := testutil.H3Client(b.PKI.Pool(), nil)
	second := testutil.H3Client(b.PKI.Pool(), nil)
	t.Cleanup(func() { first.Transport.(*http3.Transport).Close(); second.Transport.(*http3.Transport).Close() })
	if st, body := publish(first); st != http.StatusNoContent {
		t.Fatalf("first connection: %d %q", st, body)
	}
	if st, body := publish(second); st != http.StatusTooManyRequests || !strings.Contains(body, `identity "dev"`) {
		t.Fatalf("second connection: %d %q, want 429 naming the identity", st, body)
	}
	if n := b.Stats().Refused[broker.RefusedConnsPerIdentity]; n == 0 {
		t.Fatal("refusal not counted")
	}
	first.Transport.(*http3.Transport).Close()
	eventually(t, "the identity's slot after its connection ended", func() bool {
		st, _ := publish(second)
		return st == http.StatusNoContent
	})
}

// TestSubscriptionLimits: subscriptions beyond MaxSubscriptionsPerIdentity
// get 429, beyond MaxSubscriptions 503, each counted; ending one frees its
// slot.
func TestSubscriptionLimits(t *testing.T) {
	b := brokertest.Start(t, nil, &broker.Options{Auth: tokenUsersACL(t), Limits: broker.Limits{MaxSubscriptionsPerIdentity: 2, MaxSubscriptions: 3}})
	checkSubscriptionLimits(t, b, newClient(t, b, nil), newClient(t, b, nil), false)
}

// tokenUsersACL lets users a and b (tokens tok-a and tok-b) subscribe to
// everything.
func tokenUsersACL(t *testing.T) *auth.Authenticator {
	t.Helper()
	acl, err := auth.Parse([]byte("[[user]]\nname = \"a\"\ntoken = \"tok-a\"\nsubscribe = [\"#\"]\n[[user]]\nname = \"b\"\ntoken = \"tok-b\"\nsubscribe = [\"#\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	return acl
}

// checkSubscriptionLimits: on b (tokenUsersACL, MaxSubscriptionsPerIdentity
// 2, MaxSubscriptions 3), a's third subscription gets 429 and the fourth
// in total 503, each counted; ending one frees its slot. ca and cb become
// a's and b's clients; sse subscribes as EventSource.
func checkSubscriptionLimits(t *testing.T, b *brokertest.Broker, ca, cb *client, sse bool) {
	t.Helper()
	ca.hdr.Set("Authorization", "Bearer tok-a")
	cb.hdr.Set("Authorization", "Bearer tok-b")
	a1 := ca.mustSubscribe("s/1", "", sse)
	ca.mustSubscribe("s/2", "", sse)
	if _, st, body := ca.subscribe("s/3", "", sse); st != http.StatusTooManyRequests || !strings.Contains(body, `identity "a"`) {
		t.Fatalf("third subscription of a (sse %v): %d %q, want 429", sse, st, body)
	}
	cb.mustSubscribe("s/4", "", sse)
	if _, st, body := cb.subscribe("s/5", "", sse); st != http.StatusServiceUnavailable || !strings.Contains(body, "limit of 3 subscriptions") {
		t.Fatalf("fourth subscription in total (sse %v): %d %q, want 503", sse, st, body)
	}
	s := b.Stats()
	if s.Refused[broker.RefusedSubscriptionsPerIdentity] != 1 || s.Refused[broker.RefusedSubscriptions] != 1 {
		t.Fatalf("refusals %v", s.Refused)
	}
	a1.close()
	freed(t, cb, "s/5", sse)
}

// freed waits until a new subscription of c to filter is served.
func freed(t *testing.T, c *client, filter string, sse bool) {
	t.Helper()
	eventually(t, "a slot after a subscription ended", func() bool {
		s, st, _ := c.subscribe(filter, "", sse)
		if s != nil {
			s.close()
		}
		return st == http.StatusOK
	})
}

// TestStreamsPerConnection: MaxStreamsPerConn is the QUIC stream limit
// (a client cannot open more request streams) and HTTP/2's
// SETTINGS_MAX_CONCURRENT_STREAMS.
func TestStreamsPerConnection(t *testing.T) {
	b := brokertest.Start(t, nil, &broker.Options{Limits: broker.Limits{MaxStreamsPerConn: 2}})
	t.Run("h3", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		qc, err := quic.DialAddr(ctx, b.Addr().String(), &tls.Config{RootCAs: b.PKI.Pool(), ServerName: "localhost", NextProtos: []string{http3.NextProtoH3}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer qc.CloseWithError(0, "")
		for i := range 2 {
			if _, err := qc.OpenStream(); err != nil {
				t.Fatalf("stream %d: %v", i, err)
			}
		}
		if _, err = qc.OpenStream(); err == nil || !strings.Contains(err.Error(), "too many open streams") {
			t.Fatalf("third stream: %v, want the stream limit", err)
		}
	})
	t.Run("h2", func(t *testing.T) {
		conn, err := tls.Dial("tcp", b.TCPAddr().String(), &tls.Config{RootCAs: b.PKI.Pool(), ServerName: "localhost", NextProtos: []string{"h2"}})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
		if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
			t.Fatal(err)
		}
		fr := http2.NewFramer(conn, conn)
		if err := fr.WriteSettings(); err != nil {
			t.Fatal(err)
		}
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatal(err)
		}
		sf, ok := f.(*http2.SettingsFrame)
		if !ok {
			t.Fatalf("first frame %v", f)
		}
		if v, ok := sf.Value(http2.SettingMaxConcurrentStreams); !ok || v != 2 {
			t.Fatalf("SETTINGS_MAX_CONCURRENT_STREAMS = %d (%v), want 2", v, ok)
		}
	})
}

// TestHeaderLimit: a header section beyond MaxHeaderBytes is refused on
// every listener: 431 on HTTP/3 and HTTP/1.1; Go's HTTP/2 server ends the
// connection (COMPRESSION_ERROR) when one field exceeds the limit.
func TestHeaderLimit(t *testing.T) {
	b := brokertest.Start(t, nil, &broker.Options{Limits: broker.Limits{MaxHeaderBytes: 4096}})
	h2 := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: b.PKI.Pool(), ServerName: "localhost"}, ForceAttemptHTTP2: true}
	h1 := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: b.PKI.Pool(), ServerName: "localhost", NextProtos: []string{"http/1.1"}}}
	t.Cleanup(h2.CloseIdleConnections)
	t.Cleanup(h1.CloseIdleConnections)
	for name, c := range map[string]*http.Client{"h3": newClient(t, b, nil).c, "h2": {Transport: h2}, "h1": {Transport: h1}} {
		t.Run(name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodGet, b.URL+"/healthz", nil)
			req.Header.Set("X-Big", strings.Repeat("x", 8192))
			resp, err := c.Do(req)
			switch {
			case err != nil && name == "h2":
				// the connection was ended: refused
			case err != nil:
				t.Fatal(err)
			default:
				resp.Body.Close()
				if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
					t.Fatalf("status %d, want 431", resp.StatusCode)
				}
			}
			req.Header.Set("X-Big", "small")
			resp, err = c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("small header: status %d", resp.StatusCode)
			}
		})
	}
}

// TestTCPTimeouts: a TCP client that does not finish its request header
// within ReadHeaderTimeout, or stays idle between requests beyond
// IdleTimeout, is disconnected (issue 9.8: no idle timeout on TCP).
func TestTCPTimeouts(t *testing.T) {
	b := brokertest.Start(t, nil, &broker.Options{Limits: broker.Limits{ReadHeaderTimeout: 200 * time.Millisecond, IdleTimeout: 200 * time.Millisecond}})
	dial := func(t *testing.T, b *brokertest.Broker) net.Conn {
		c, err := tls.Dial("tcp", b.TCPAddr().String(), &tls.Config{RootCAs: b.PKI.Pool(), ServerName: "localhost", NextProtos: []string{"http/1.1"}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second)) // bounds a hang only
		return c
	}
	closedByServer := func(t *testing.T, r io.Reader) {
		t.Helper()
		_, err := io.Copy(io.Discard, r)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatal("the broker kept the connection open")
		}
	}
	t.Run("header", func(t *testing.T) {
		c := dial(t, b)
		// On a loaded host the 200 ms may be over before this write,
		// which then fails (broken pipe): the close is what is awaited.
		_, _ = io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: localhost\r\n")
		closedByServer(t, c)
	})
	t.Run("idle", func(t *testing.T) {
		// Only the idle time short: a first request that a loaded host
		// sends more than 200 ms after the handshake is still read.
		bi := brokertest.Start(t, nil, &broker.Options{Limits: broker.Limits{ReadHeaderTimeout: 30 * time.Second, IdleTimeout: 200 * time.Millisecond}})
		c := dial(t, bi)
		if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Close {
			t.Fatalf("status %d close %v", resp.StatusCode, resp.Close)
		}
		closedByServer(t, br)
	})
}
