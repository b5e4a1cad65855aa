package broker_test

import (
	"crypto/tls"
	"net/http"
	"testing"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/auth"
	"github.com/quiot/quiot/broker/brokertest"
)

// TestACLEveryHTTPPath: the ACL's decision holds on the HTTP paths that
// TestEveryMessagePathAuthorized (broker/mqttquic) does not take: a
// publish over TCP (HTTP/2) and an EventSource subscription over HTTP/3
// and TCP to a topic the identity may not use are refused with 403
// (docs/security.md, the rule × path table).
func TestACLEveryHTTPPath(t *testing.T) {
	acl, err := auth.Parse([]byte("[anonymous]\npublish = [\"pub/#\"]\nsubscribe = [\"pub/#\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	b := brokertest.Start(t, nil, &broker.Options{Auth: acl})
	h3 := newClient(t, b, nil)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: b.PKI.Pool(), ServerName: "localhost"}, ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	tcp := &client{t: t, base: b.URL, c: &http.Client{Transport: tr}, hdr: h3.hdr}
	if st, _, body := tcp.publish("pub/ok", []byte("x"), ""); st != http.StatusNoContent {
		t.Fatalf("tcp publish to an allowed topic: %d %s", st, body)
	}
	if st, _, body := tcp.publish("secret/x", []byte("x"), ""); st != http.StatusForbidden {
		t.Errorf("tcp publish to a denied topic: %d %s, want 403", st, body)
	}
	for _, c := range []struct {
		name string
		c    *client
	}{{"h3", h3}, {"tcp", tcp}} {
		req, _ := http.NewRequest(http.MethodGet, b.URL+"/v1/topics/secret/%23?count=1", nil)
		req.Header.Set("Accept", "text/event-stream")
		resp, err := c.c.c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("%s EventSource subscription to a denied filter: %d, want 403", c.name, resp.StatusCode)
		}
	}
}
