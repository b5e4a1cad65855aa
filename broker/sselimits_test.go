package broker_test

import (
	"crypto/tls"
	"net/http"
	"strings"
	"testing"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/auth"
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
	acl, err := auth.Parse([]byte("[[user]]\nname = \"a\"\ntoken = \"tok-a\"\nsubscribe = [\"#\"]\n[[user]]\nname = \"b\"\ntoken = \"tok-b\"\nsubscribe = [\"#\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	// freed waits until a new subscription of c to filter is served.
	freed := func(t *testing.T, c *client, filter string) {
		t.Helper()
		eventually(t, "a slot after a subscription ended", func() bool {
			s, st, _ := c.subscribe(filter, "", true)
			if s != nil {
				s.close()
			}
			return st == http.StatusOK
		})
	}

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
		freed(t, c, "s/3")
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
		freed(t, c, "s/2")
	})

	t.Run("subscriptions per identity and in total", func(t *testing.T) {
		b := brokertest.Start(t, nil, &broker.Options{Auth: acl, Limits: broker.Limits{MaxSubscriptionsPerIdentity: 2, MaxSubscriptions: 3}})
		ca, cb := newClient(t, b, nil), tcpClient(t, b, "h2")
		ca.hdr.Set("Authorization", "Bearer tok-a")
		cb.hdr.Set("Authorization", "Bearer tok-b")
		a1 := ca.mustSubscribe("s/1", "", true)
		ca.mustSubscribe("s/2", "", true)
		if _, st, body := ca.subscribe("s/3", "", true); st != http.StatusTooManyRequests || !strings.Contains(body, `identity "a"`) {
			t.Fatalf("third EventSource of a (HTTP/3): %d %q, want 429", st, body)
		}
		cb.mustSubscribe("s/4", "", true)
		if _, st, body := cb.subscribe("s/5", "", true); st != http.StatusServiceUnavailable || !strings.Contains(body, "limit of 3 subscriptions") {
			t.Fatalf("fourth EventSource in total (HTTP/2): %d %q, want 503", st, body)
		}
		s := b.Stats()
		if s.Refused[broker.RefusedSubscriptionsPerIdentity] != 1 || s.Refused[broker.RefusedSubscriptions] != 1 {
			t.Fatalf("refusals %v", s.Refused)
		}
		a1.close()
		freed(t, cb, "s/5")
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
		freed(t, c, "s/3")
	})
}
