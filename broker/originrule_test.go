package broker_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/quic-go/http3"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/auth"
	"github.com/quiot/quiot/broker/brokertest"
	"github.com/quiot/quiot/broker/web"
	"github.com/quiot/quiot/internal/testutil"
)

const (
	allowedOrigin = "https://app.example"
	foreignOrigin = "https://evil.example"
)

// originACL: bob by password, ACL token or certificate; anonymous clients
// may publish under anon/.
const originACL = `
[[user]]
name = "bob"
password = "bob-pw"
token = "bob-token"
publish = ["bob/#"]
subscribe = ["bob/#"]

[anonymous]
publish = ["anon/#"]
`

// h3Do sends one request over a client and returns the status and body.
func h3Do(t *testing.T, c *http.Client, method, u string, hdr ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, u, strings.NewReader("1"))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// sessionToken logs in as user with Basic over a new connection and
// returns the session token.
func sessionToken(t *testing.T, b *brokertest.Broker, user, pw string) string {
	t.Helper()
	c := testutil.H3Client(b.PKI.Pool(), nil)
	t.Cleanup(func() { _ = c.Transport.(*http3.Transport).Close() })
	req, _ := http.NewRequest(http.MethodPost, b.URL+"/v1/session", nil)
	req.SetBasicAuth(user, pw)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var rep struct{ Token string }
	if err := json.NewDecoder(resp.Body).Decode(&rep); err != nil || resp.StatusCode != http.StatusOK || rep.Token == "" {
		t.Fatalf("POST /v1/session: %d %v", resp.StatusCode, err)
	}
	return rep.Token
}

func basicAuth(user, pw string) string {
	r, _ := http.NewRequest(http.MethodGet, "/", nil)
	r.SetBasicAuth(user, pw)
	return r.Header.Get("Authorization")
}

// TestOriginRuleEveryCredential is issue 27 finding 3: a state-changing
// request (POST, PUT, DELETE) whose Origin is present, foreign and not an
// allowed CORS origin is refused (403, with the reason) whatever the
// credential: Basic (which a browser caches after the dashboard's 401
// prompt), an ACL Bearer token, a client certificate, a session token as
// cookie or Bearer, anonymous access, and the loopback trust of a broker
// without an ACL (with the browser part and without). The same request
// from an allowed origin, from the broker's own, or without Origin
// works. The same holds for a publish stream (POST /v1/publish).
func TestOriginRuleEveryCredential(t *testing.T) {
	acl, err := auth.Parse([]byte(originACL))
	if err != nil {
		t.Fatal(err)
	}
	pki := testutil.NewPKI(t)
	withACL := brokertest.Start(t, pki, &broker.Options{Auth: acl, ClientCAs: pki.Pool(), Web: &web.Options{CORSOrigins: []string{allowedOrigin}}})
	noACL := brokertest.Start(t, nil, &broker.Options{Web: &web.Options{CORSOrigins: []string{allowedOrigin}}})
	noACLNoWeb := brokertest.Start(t, nil, nil)
	tok := sessionToken(t, withACL, "bob", "bob-pw")
	bobCert := pki.Client(t, "bob")

	type credential struct {
		name  string
		b     *brokertest.Broker
		cert  bool
		hdr   []string
		topic string
	}
	creds := []credential{
		{name: "basic", b: withACL, hdr: []string{"Authorization", basicAuth("bob", "bob-pw")}, topic: "bob%2Fx"},
		{name: "acl bearer token", b: withACL, hdr: []string{"Authorization", "Bearer bob-token"}, topic: "bob%2Fx"},
		{name: "client certificate", b: withACL, cert: true, topic: "bob%2Fx"},
		{name: "session cookie", b: withACL, hdr: []string{"Cookie", web.CookieName + "=" + tok}, topic: "bob%2Fx"},
		{name: "session bearer", b: withACL, hdr: []string{"Authorization", "Bearer " + tok}, topic: "bob%2Fx"},
		{name: "anonymous", b: withACL, topic: "anon%2Fx"},
		{name: "loopback trust without ACL", b: noACL, topic: "any%2Fx"},
		{name: "loopback trust without ACL nor web part", b: noACLNoWeb, topic: "any%2Fx"},
	}
	for _, cr := range creds {
		t.Run(cr.name, func(t *testing.T) {
			c := testutil.H3Client(cr.b.PKI.Pool(), nil)
			if cr.cert {
				c = testutil.H3Client(cr.b.PKI.Pool(), &bobCert)
			}
			t.Cleanup(func() { _ = c.Transport.(*http3.Transport).Close() })
			u := cr.b.URL + "/v1/topics/" + cr.topic
			own := "https://" + cr.b.Addr().String()
			for _, method := range []string{http.MethodPost, http.MethodPut} {
				st, body := h3Do(t, c, method, u, append([]string{"Origin", foreignOrigin}, cr.hdr...)...)
				if st != http.StatusForbidden || !strings.Contains(body, "neither this broker nor an allowed CORS origin") {
					t.Errorf("%s from %s: %d %q, want 403 with the reason", method, foreignOrigin, st, body)
				}
				for _, origin := range []string{allowedOrigin, own, ""} {
					if origin == allowedOrigin && cr.b == noACLNoWeb {
						continue // no CORS origin without the browser part
					}
					hdr := cr.hdr
					if origin != "" {
						hdr = append([]string{"Origin", origin}, hdr...)
					}
					if st, body := h3Do(t, c, method, u, hdr...); st != http.StatusNoContent {
						t.Errorf("%s from origin %q: %d %q, want 204", method, origin, st, body)
					}
				}
			}
			// A publish stream (POST /v1/publish) is refused before its
			// first message, and served from the others.
			topic, _ := url.PathUnescape(cr.topic)
			if st, _, body := streamOnce(t, c, cr.b.URL, topic, append([]string{"Origin", foreignOrigin}, cr.hdr...)...); st != http.StatusForbidden || !strings.Contains(body, "neither this broker nor an allowed CORS origin") {
				t.Errorf("publish stream from %s: %d %q, want 403 with the reason", foreignOrigin, st, body)
			}
			for _, origin := range []string{allowedOrigin, own, ""} {
				if origin == allowedOrigin && cr.b == noACLNoWeb {
					continue
				}
				hdr := cr.hdr
				if origin != "" {
					hdr = append([]string{"Origin", origin}, hdr...)
				}
				if st, a, body := streamOnce(t, c, cr.b.URL, topic, hdr...); st != http.StatusOK || a.Status != 0 || a.Seq == 0 {
					t.Errorf("publish stream from origin %q: %d %+v %q, want 200 and the message accepted", origin, st, a, body)
				}
			}
			if cr.b == noACLNoWeb {
				return
			}
			// POST /v1/session (a login) is a state-changing request too.
			st, body := h3Do(t, c, http.MethodPost, cr.b.URL+"/v1/session", append([]string{"Origin", foreignOrigin}, cr.hdr...)...)
			if st != http.StatusForbidden {
				t.Errorf("POST /v1/session from %s: %d %q, want 403", foreignOrigin, st, body)
			}
			if st, body := h3Do(t, c, http.MethodPost, cr.b.URL+"/v1/session", append([]string{"Origin", allowedOrigin}, cr.hdr...)...); st != http.StatusOK {
				t.Errorf("POST /v1/session from %s: %d %q, want 200", allowedOrigin, st, body)
			}
		})
	}
	if n := withACL.Stats().Protocols[broker.ProtoH3].Refused["forbidden"]; n < 6 {
		t.Errorf("refusals counted as forbidden: %d", n)
	}
}
