package broker_test

import (
	"crypto/tls"
	"net/http"
	"strings"
	"testing"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/auth"
	"github.com/quiot/quiot/broker/brokertest"
	"github.com/quiot/quiot/internal/wire"
)

// TestDollarTopicsRefusedOverHTTP: no client publishes to a `$` topic,
// whatever the ACL says (docs/security.md): not an ACL user allowed
// `$SYS/#`, not a loopback client of a broker without an ACL; by a single
// request over HTTP/3 and over TCP, and by a streamed publish. A refused
// retained spoof is not stored.
func TestDollarTopicsRefusedOverHTTP(t *testing.T) {
	acl, err := auth.Parse([]byte(`
[[user]]
name = "sys"
token = "tok-sys"
publish = ["$SYS/#", "#"]
subscribe = ["$SYS/#", "#"]
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		acl   *auth.Authenticator
		token string
	}{
		{"acl user allowed $SYS/#", acl, "tok-sys"},
		{"loopback without acl", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := brokertest.Start(t, nil, &broker.Options{Auth: tc.acl})
			c := newClient(t, b, nil)
			if tc.token != "" {
				c.hdr.Set("Authorization", "Bearer "+tc.token)
			}
			c.mustPublish("ok/x", "an ordinary topic")
			for _, q := range []string{"", "retain=1"} {
				for _, topic := range []string{"$SYS/x", "$SYS/broker/uptime"} {
					if st, _, body := c.publish(topic, []byte("spoof"), q); st != http.StatusForbidden || !strings.Contains(body, "belong to the broker") {
						t.Errorf("h3 publish %s ?%s: %d %s, want 403", topic, q, st, body)
					}
				}
			}

			tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: b.PKI.Pool(), ServerName: "localhost"}, ForceAttemptHTTP2: true}
			defer tr.CloseIdleConnections()
			tc2 := &client{t: t, base: b.URL, c: &http.Client{Transport: tr}, hdr: c.hdr}
			if st, _, body := tc2.publish("$SYS/broker/uptime", []byte("spoof"), "retain=1"); st != http.StatusForbidden {
				t.Errorf("tcp publish: %d %s, want 403", st, body)
			}

			sp := openStream(t, c.c, b.URL)
			sp.send(1, "$SYS/x", []byte("spoof"), wire.PubQoS1, 0)
			sp.send(2, "$SYS/broker/uptime", []byte("spoof"), wire.PubQoS1|wire.PubRetain, 0)
			sp.send(3, "ok/y", []byte("fine"), wire.PubQoS1, 0)
			sp.flush(t)
			for _, want := range []uint64{http.StatusForbidden, http.StatusForbidden, 0} {
				a, err := sp.dec.Ack()
				if err != nil || a.Status != want {
					t.Errorf("stream ack %+v %v, want status %d", a, err, want)
				}
			}
			for _, m := range b.Space().RetainedMessages() {
				if strings.HasPrefix(m.Topic, "$") {
					t.Errorf("retained spoof stored: %s %q", m.Topic, m.Payload)
				}
			}
		})
	}
}
