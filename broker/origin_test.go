package broker_test

import (
	"crypto/tls"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/quiot/quiot/broker/brokertest"

	"github.com/quiot/quiot/broker"
)

// TestOriginByListener: a publish is counted, and its Message.Origin named,
// by the listener it came in by: "h3" for HTTP/3, "tcp" for HTTP/1.1 and
// HTTP/2 (issue 10.6: they were all counted as "h3").
func TestOriginByListener(t *testing.T) {
	b := brokertest.Start(t, nil, nil)
	var mu sync.Mutex
	origins := map[string]string{}
	b.AddTap(func(m *broker.Message) {
		mu.Lock()
		origins[m.Topic] = m.Origin
		mu.Unlock()
	})
	h2 := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: b.PKI.Pool(), ServerName: "localhost"}, ForceAttemptHTTP2: true}
	h1 := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: b.PKI.Pool(), ServerName: "localhost", NextProtos: []string{"http/1.1"}}}
	t.Cleanup(h2.CloseIdleConnections)
	t.Cleanup(h1.CloseIdleConnections)
	clients := []struct {
		topic, proto, want string
		hc                 *http.Client
	}{
		{"o/h3", "HTTP/3.0", broker.ProtoH3, newClient(t, b, nil).c},
		{"o/h2", "HTTP/2.0", broker.ProtoTCP, &http.Client{Transport: h2}},
		{"o/h1", "HTTP/1.1", broker.ProtoTCP, &http.Client{Transport: h1}},
	}
	for _, c := range clients {
		resp, err := c.hc.Post(b.URL+"/v1/topics/"+strings.ReplaceAll(c.topic, "/", "%2F"), "application/octet-stream", strings.NewReader("x"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent || resp.Proto != c.proto {
			t.Fatalf("%s: %d over %s, want 204 over %s", c.topic, resp.StatusCode, resp.Proto, c.proto)
		}
	}
	mu.Lock()
	for _, c := range clients {
		if origins[c.topic] != c.want {
			t.Errorf("%s over %s: origin %q, want %q", c.topic, c.proto, origins[c.topic], c.want)
		}
	}
	mu.Unlock()
	st := b.Stats()
	if in := st.Protocols[broker.ProtoH3].MessagesIn; in != 1 {
		t.Errorf("h3 messages in = %d, want 1", in)
	}
	if in := st.Protocols[broker.ProtoTCP].MessagesIn; in != 2 {
		t.Errorf("tcp messages in = %d, want 2", in)
	}
}
