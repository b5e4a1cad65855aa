package broker_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quiot/quiot/broker/brokertest"
	"github.com/quiot/quiot/internal/wire"
)

// Helpers of the rule × path tests (docs/security.md): a client of the TCP
// listener, HTTP/1.1 or HTTP/2, and a one-message publish stream.

// tcpPathClient is a client of b's TCP listener speaking HTTP/2 (h2) or
// HTTP/1.1, presenting cert when non-nil. dials counts the TCP connections
// it opened, so that a test can check its requests shared one.
func tcpPathClient(t *testing.T, b *brokertest.Broker, cert *tls.Certificate, h2 bool) (c *client, dials *atomic.Int32) {
	t.Helper()
	tc := &tls.Config{RootCAs: b.PKI.Pool(), ServerName: "localhost"}
	if cert != nil {
		tc.Certificates = []tls.Certificate{*cert}
	}
	dials = &atomic.Int32{}
	var d net.Dialer
	tr := &http.Transport{TLSClientConfig: tc, ForceAttemptHTTP2: h2,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			dials.Add(1)
			return d.DialContext(ctx, network, addr)
		}}
	if !h2 {
		tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{} // HTTP/1.1 only
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &client{t: t, base: b.URL, c: &http.Client{Transport: tr}, hdr: http.Header{}}, dials
}

// tcpProto is the protocol a TCP path client speaks.
func tcpProto(h2 bool) string {
	if h2 {
		return "HTTP/2"
	}
	return "HTTP/1.1"
}

// streamOnce publishes one QoS 1 message on a POST /v1/publish stream of
// c's connection, with hdr as request headers, and returns the status,
// the message's acknowledgement (when the status is 200) and the body of a
// refusal.
func streamOnce(t *testing.T, c *http.Client, base, topic string, hdr ...string) (int, wire.Ack, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	frame := wire.AppendPublish(nil, &wire.Publish{ID: 1, Flags: wire.PubQoS1, Topic: topic, Payload: []byte("x")})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+wire.PathPublish, bytes.NewReader(frame))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", wire.ContentType)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", wire.PathPublish, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, wire.Ack{}, string(body)
	}
	a, err := wire.NewDecoder(resp.Body, 0).Ack()
	if err != nil {
		t.Fatalf("POST %s: reading the acknowledgement: %v", wire.PathPublish, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, a, ""
}
