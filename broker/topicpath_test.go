package broker_test

import (
	"crypto/tls"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/quiot/quiot/broker/brokertest"
)

// rawDo sends one request with the path exactly as given (Go's clients do not
// normalise dot segments) and returns the status and body.
func rawDo(t *testing.T, hc *http.Client, method, u string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, u, strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// TestDotSegmentsRefused: a raw "." or ".." path segment (or its %2E form,
// which WHATWG URL parsers treat the same) names no topic: URL-normalising
// clients could never send it. Over HTTP/3 and HTTP/1.1+2 alike.
func TestDotSegmentsRefused(t *testing.T) {
	b := brokertest.Start(t, nil, nil)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: b.PKI.Pool(), ServerName: "localhost"}, ForceAttemptHTTP2: true}
	t.Cleanup(tr.CloseIdleConnections)
	clients := map[string]*http.Client{"h3": newClient(t, b, nil).c, "tcp": {Transport: tr}}
	paths := []string{
		"/v1/topics/..",
		"/v1/topics/.",
		"/v1/topics/a/../b",
		"/v1/topics/a/./b",
		"/v1/topics/a/..",
		"/v1/topics/../a",
		"/v1/topics/%2E%2E",
		"/v1/topics/%2e%2e",
		"/v1/topics/a/%2E./b",
		"/v1/topics/a/.%2e/b",
		"/v1/topics/%2E",
	}
	for name, hc := range clients {
		for _, p := range paths {
			for _, m := range []string{http.MethodPost, http.MethodGet} {
				t.Run(name+" "+m+" "+p, func(t *testing.T) {
					st, body := rawDo(t, hc, m, b.URL+p)
					if st != http.StatusBadRequest || strings.Count(body, "\n") != 1 || !strings.Contains(body, "dot segment") {
						t.Fatalf("status %d %q, want 400 and a one-line reason naming the dot segment", st, body)
					}
				})
			}
		}
	}
	if s := b.Stats(); s.LastSeq != 0 {
		t.Fatalf("%d messages accepted", s.LastSeq)
	}
}

// TestTopicEncodingRoundTrip: every topic MQTT allows, empty and dot levels
// included, travels as one percent-encoded path segment (or, for "." and
// "..", as ?topic=) and arrives unchanged.
func TestTopicEncodingRoundTrip(t *testing.T) {
	b := brokertest.Start(t, nil, nil)
	c := newClient(t, b, nil)
	s := c.mustSubscribe("#", "", false)
	tests := []struct{ topic, path string }{
		{"/TopicA", "/v1/topics/%2FTopicA"},
		{"a//b", "/v1/topics/a%2F%2Fb"},
		{"a/", "/v1/topics/a%2F"},
		{"/", "/v1/topics/%2F"},
		{"a/../b", "/v1/topics/a%2F..%2Fb"},
		{"a/./b", "/v1/topics/a%2F.%2Fb"},
		{"..", "/v1/topics?topic=.."},
		{".", "/v1/topics?topic=."},
		{"a/b", "/v1/topics/a/b"}, // raw '/' between levels means the same
		{"x/..y", "/v1/topics/x/..y"},
		{"a%2Fb", "/v1/topics/a%252Fb"},
	}
	for _, tt := range tests {
		st, body := rawDo(t, c.c, http.MethodPost, b.URL+tt.path)
		if st != http.StatusNoContent {
			t.Fatalf("POST %s: status %d %q", tt.path, st, body)
		}
		if f := s.mustNext(); f.Topic != tt.topic {
			t.Fatalf("POST %s arrived as %q, want %q", tt.path, f.Topic, tt.topic)
		}
	}
	// Subscribing by the same encoding finds the retained messages.
	for _, topic := range []string{"/TopicA", "a//b", "..", "a/"} {
		c.mustPublish(topic, "r:"+topic, "retain=1")
	}
	for _, tt := range []struct{ filter, want string }{{"/+", "/TopicA"}, {"a/+/b", "a//b"}, {"..", ".."}, {"a/+", "a/"}} {
		f := c.mustSubscribe(tt.filter, "", false).mustNext()
		if f.Topic != tt.want || !f.Retained() || string(f.Payload) != "r:"+tt.want {
			t.Fatalf("subscribe %q: %+v, want the retained message of %q", tt.filter, f, tt.want)
		}
	}
	t.Run("no topic", func(t *testing.T) {
		if st, body := rawDo(t, c.c, http.MethodPost, b.URL+"/v1/topics"); st != http.StatusBadRequest {
			t.Fatalf("status %d %q", st, body)
		}
	})
}
