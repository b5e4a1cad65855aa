package broker_test

import (
	"crypto/tls"
	"net/http"
	"strings"
	"testing"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/brokertest"
	"github.com/quiot/quiot/internal/wire"
)

// TestTopicLimitsEveryHTTPPath: a topic or filter beyond the topic limits
// (--max-topic-levels, --max-topic-bytes) is refused with 400 on every
// HTTP path: a single publish over HTTP/3 and over TCP, a streamed
// publish, an EventSource subscription over HTTP/3 and over TCP
// (docs/security.md, the rule × path table).
func TestTopicLimitsEveryHTTPPath(t *testing.T) {
	b := brokertest.Start(t, nil, &broker.Options{Limits: broker.Limits{MaxTopicLevels: 4, MaxTopicLength: 64}})
	c := newClient(t, b, nil)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: b.PKI.Pool(), ServerName: "localhost"}, ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	tcp := &client{t: t, base: b.URL, c: &http.Client{Transport: tr}, hdr: c.hdr}
	deep, long := "a/b/c/d/e", "a/"+strings.Repeat("x", 70)
	for _, tc := range []struct {
		name string
		c    *client
	}{{"h3", c}, {"tcp", tcp}} {
		for _, topic := range []string{deep, long} {
			if st, _, body := tc.c.publish(topic, []byte("x"), ""); st != http.StatusBadRequest {
				t.Errorf("%s publish %d levels, %d bytes: %d %s, want 400", tc.name, strings.Count(topic, "/")+1, len(topic), st, body)
			}
			req, _ := http.NewRequest(http.MethodGet, b.URL+"/v1/topics/"+topic+"?count=1", nil)
			req.Header.Set("Accept", "text/event-stream")
			resp, err := tc.c.c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadRequest {
				t.Errorf("%s EventSource subscription %d levels, %d bytes: %d, want 400", tc.name, strings.Count(topic, "/")+1, len(topic), resp.StatusCode)
			}
		}
	}
	sp := openStream(t, c.c, b.URL)
	sp.send(1, deep, []byte("x"), wire.PubQoS1, 0)
	sp.send(2, long, []byte("x"), wire.PubQoS1, 0)
	sp.send(3, "a/b/c/d", []byte("fine"), wire.PubQoS1, 0)
	sp.flush(t)
	for _, want := range []uint64{http.StatusBadRequest, http.StatusBadRequest, 0} {
		if a, err := sp.dec.Ack(); err != nil || a.Status != want {
			t.Errorf("stream ack %+v %v, want status %d", a, err, want)
		}
	}
}
