package broker_test

import (
	"crypto/tls"
	"net/http"
	"strings"
	"testing"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/brokertest"
	"github.com/quiot/quiot/broker/space"
	"github.com/quiot/quiot/internal/wire"
)

// TestRetainedBytesEveryHTTPPath: the retained-bytes bound
// (--retained-bytes, Limits.RetainedBytes) holds on the HTTP paths beside
// the HTTP/3 request of TestRetainedBound: a retained publish over
// HTTP/1.1 and HTTP/2 on TCP, and a retained frame of a publish stream
// (POST /v1/publish), beyond the bound is refused with 507 (the stream:
// an ack with status 507, the stream going on), nothing beyond the bound
// is retained, and replacing or clearing a retained topic frees its
// bytes. (HTTP has no wills: the MQTT tests check retained wills.)
func TestRetainedBytesEveryHTTPPath(t *testing.T) {
	payload := strings.Repeat("r", 1000)
	per := int64(len(payload) + len("r/xx") + space.EntryOverhead)
	const fit = 2
	for _, tc := range []struct {
		name    string
		publish func(t *testing.T, b *brokertest.Broker, c *client) func(topic, payload string) int
	}{
		{"tcp http/1.1", tcpRetained("http/1.1")},
		{"tcp h2", tcpRetained("h2")},
		{"h3 stream", func(t *testing.T, b *brokertest.Broker, c *client) func(topic, payload string) int {
			sp := openStream(t, c.c, b.URL)
			id := uint64(0)
			return func(topic, payload string) int {
				id++
				sp.send(id, topic, []byte(payload), wire.PubQoS1|wire.PubRetain, 0)
				sp.flush(t)
				a, err := sp.dec.Ack()
				if err != nil || a.ID != id {
					t.Fatalf("stream ack %+v %v, want id %d", a, err, id)
				}
				if a.Status == 0 {
					return http.StatusNoContent
				}
				return int(a.Status)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := brokertest.Start(t, nil, &broker.Options{Limits: broker.Limits{RetainedBytes: fit * per}})
			pub := tc.publish(t, b, newClient(t, b, nil))
			for _, topic := range []string{"r/aa", "r/bb", "r/aa"} { // replacing does not add up
				if st := pub(topic, payload); st != http.StatusNoContent {
					t.Fatalf("retained %s within the bound: %d", topic, st)
				}
			}
			if st := pub("r/cc", payload); st != http.StatusInsufficientStorage {
				t.Errorf("third retained topic: %d, want 507", st)
			}
			if s := b.Stats(); s.Retained != fit || s.RetainedBytes > fit*per {
				t.Errorf("retained %d messages, %d bytes; want %d within %d bytes", s.Retained, s.RetainedBytes, fit, fit*per)
			}
			if st := pub("r/aa", ""); st != http.StatusNoContent {
				t.Fatalf("clearing: %d", st)
			}
			if st := pub("r/cc", payload); st != http.StatusNoContent {
				t.Errorf("after clearing: %d, want 204", st)
			}
		})
	}
}

// tcpRetained publishes retained messages by single requests over TCP
// with the ALPN protocol proto ("h2" or "http/1.1").
func tcpRetained(proto string) func(t *testing.T, b *brokertest.Broker, _ *client) func(topic, payload string) int {
	return func(t *testing.T, b *brokertest.Broker, _ *client) func(topic, payload string) int {
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: b.PKI.Pool(), ServerName: "localhost", NextProtos: []string{proto}}, ForceAttemptHTTP2: proto == "h2"}
		t.Cleanup(tr.CloseIdleConnections)
		c := &client{t: t, base: b.URL, c: &http.Client{Transport: tr}, hdr: http.Header{}}
		return func(topic, payload string) int {
			st, _, body := c.publish(topic, []byte(payload), "retain=1")
			if st == http.StatusInsufficientStorage && !strings.Contains(body, "retained") {
				t.Errorf("507 without the reason: %q", body)
			}
			return st
		}
	}
}
