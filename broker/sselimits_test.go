package broker_test

import (
	"crypto/tls"
	"net/http"
	"strings"
	"testing"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/brokertest"
)

// tcpClient is a client of the broker's TCP listener with the ALPN
// protocol proto ("h2" or "http/1.1"; HTTP/1.1 opens one connection per
// concurrent request, as a browser's EventSource does).
func tcpClient(t *testing.T, b *brokertest.Broker, proto string) *client {
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: b.PKI.Pool(), ServerName: "localhost", NextProtos: []string{proto}}, ForceAttemptHTTP2: proto == "h2"}
	t.Cleanup(tr.CloseIdleConnections)
	return &client{t: t, base: b.URL, c: &http.Client{Transport: tr}, hdr: http.Header{}}
}

// TestSSEConnectionAndSubscriptionLimits: the connection and subscription
// bounds hold for EventSource subscriptions (Accept: text/event-stream):
// over HTTP/1.1, where each subscription holds a TCP connection, the
// connections per address (503) and per identity (429); subscriptions per
// identity (429) and in total (503) over HTTP/3 and HTTP/2; subscriptions
// per connection over HTTP/2 (429). Each refusal is counted, and a slot is
// free again once a subscription ends.
func TestSSEConnectionAndSubscriptionLimits(t *testing.T) {
	acl := tokenUsersACL(t)
	t.Run("http/1.1 connections per address", func(t *testing.T) {
		b := brokertest.Start(t, nil, &broker.Options{Limits: broker.Limits{MaxConnsPerAddr: 2}})
		connsIdle(t, b)
		c := tcpClient(t, b, "http/1.1")
		first := c.mustSubscribe("s/1", "", true)
		c.mustSubscribe("s/2", "", true)
		if _, st, body := c.subscribe("s/3", "", true); st != http.StatusServiceUnavailable || !strings.Contains(body, "the limit per address") {
			t.Fatalf("third EventSource over HTTP/1.1: %d %q, want 503 per address", st, body)
		}
		if n := b.Stats().Refused[broker.RefusedConnsPerAddr]; n == 0 {
			t.Fatal("refusal not counted")
		}
		first.close()
		freed(t, c, "s/3", true)
	})

	t.Run("http/1.1 connections per identity", func(t *testing.T) {
		b := brokertest.Start(t, nil, &broker.Options{Auth: acl, Limits: broker.Limits{MaxConnsPerIdentity: 1}})
		c := tcpClient(t, b, "http/1.1")
		c.hdr.Set("Authorization", "Bearer tok-a")
		first := c.mustSubscribe("s/1", "", true)
		if _, st, body := c.subscribe("s/2", "", true); st != http.StatusTooManyRequests || !strings.Contains(body, `identity "a"`) {
			t.Fatalf("second EventSource of a over HTTP/1.1: %d %q, want 429 naming the identity", st, body)
		}
		if n := b.Stats().Refused[broker.RefusedConnsPerIdentity]; n == 0 {
			t.Fatal("refusal not counted")
		}
		first.close()
		freed(t, c, "s/2", true)
	})

	t.Run("subscriptions per identity and in total", func(t *testing.T) {
		b := brokertest.Start(t, nil, &broker.Options{Auth: acl, Limits: broker.Limits{MaxSubscriptionsPerIdentity: 2, MaxSubscriptions: 3}})
		checkSubscriptionLimits(t, b, newClient(t, b, nil), tcpClient(t, b, "h2"), true)
	})

	t.Run("subscriptions per connection over h2", func(t *testing.T) {
		b := brokertest.Start(t, nil, &broker.Options{Limits: broker.Limits{MaxSubscriptionsPerConn: 2}})
		c := tcpClient(t, b, "h2")
		first := c.mustSubscribe("s/1", "", true)
		c.mustSubscribe("s/2", "", true)
		if _, st, body := c.subscribe("s/3", "", true); st != http.StatusTooManyRequests || !strings.Contains(body, "on this connection") {
			t.Fatalf("third EventSource on one HTTP/2 connection: %d %q, want 429", st, body)
		}
		if n := b.Stats().Refused[broker.RefusedSubscriptionsPerConn]; n == 0 {
			t.Fatal("refusal not counted")
		}
		first.close()
		freed(t, c, "s/3", true)
	})
}
