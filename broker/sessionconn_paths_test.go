package broker_test

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/auth"
	"github.com/quiot/quiot/broker/brokertest"
	"github.com/quiot/quiot/broker/web"
	"github.com/quiot/quiot/internal/wire"
)

// twoUsersACL: alice and bob by password, each on their own topics.
const twoUsersACL = `
[[user]]
name = "alice"
password = "alice-pw"
publish = ["alice/#"]
subscribe = ["alice/#"]

[[user]]
name = "bob"
password = "bob-pw"
publish = ["bob/#"]
subscribe = ["bob/#"]
`

// TestSessionTokenOneIdentityEveryHTTPPath is issue 27 finding 9 on the
// paths TestSessionTokenOneIdentityPerConnection (broker/web, HTTP/3
// requests) does not take: a publish stream over HTTP/3, requests over
// HTTP/1.1 and HTTP/2 on the TCP listener, and EventSource subscriptions
// over HTTP/3 and TCP. On a connection bob's Basic credentials bound,
// alice's session token (Bearer, cookie, and in the URL of an EventSource)
// is refused with 403 and bob's is served; on a connection alice's token
// bound, bob's Basic credentials and bob's token are refused with 403 and
// a request without the token is not authenticated (401). Each
// connection's requests share one connection (TCP: one dial).
func TestSessionTokenOneIdentityEveryHTTPPath(t *testing.T) {
	acl, err := auth.Parse([]byte(twoUsersACL))
	if err != nil {
		t.Fatal(err)
	}
	b := brokertest.Start(t, nil, &broker.Options{Auth: acl, Web: &web.Options{}})
	aliceTok, bobTok := sessionToken(t, b, "alice", "alice-pw"), sessionToken(t, b, "bob", "bob-pw")
	for _, u := range []string{"alice", "bob"} {
		c := newClient(t, b, nil)
		if st, _, body := c.publish(u+"/x", []byte("retained"), "retain=1", "Authorization", basicAuth(u, u+"-pw")); st != http.StatusNoContent {
			t.Fatalf("%s: retained publish: %d %s", u, st, body)
		}
	}

	// A path opens a connection (dials, when it counts them, is its
	// number of TCP connections) and makes one request on it as user's
	// topic user/x with hdr; ok is its success status.
	type path struct {
		name string
		conn func() (c *client, dials *atomic.Int32)
		do   func(c *client, user, query string, hdr ...string) (int, string)
		ok   int
		sse  bool
	}
	h3Conn := func() (*client, *atomic.Int32) { return newClient(t, b, nil), nil }
	tcpConn := func(h2 bool) func() (*client, *atomic.Int32) {
		return func() (*client, *atomic.Int32) { return tcpPathClient(t, b, nil, h2) }
	}
	publish := func(c *client, user, _ string, hdr ...string) (int, string) {
		st, _, body := c.publish(user+"/x", []byte("x"), "", hdr...)
		return st, body
	}
	stream := func(c *client, user, _ string, hdr ...string) (int, string) {
		st, a, body := streamOnce(t, c.c, c.base, user+"/x", hdr...)
		if st == http.StatusOK && a.Status != 0 {
			return int(a.Status), a.Reason
		}
		return st, body
	}
	// eventSource reads a subscription of one message (the retained one)
	// to its end, so that an HTTP/1.1 connection stays open for the next.
	eventSource := func(c *client, user, query string, hdr ...string) (int, string) {
		q := "count=1"
		if query != "" {
			q += "&" + query
		}
		req, err := http.NewRequest(http.MethodGet, topicURL(c.base, user+"/x", q), nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Accept", wire.ContentTypeSSE)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := c.c.Do(req)
		if err != nil {
			t.Fatalf("EventSource %s/x: %v", user, err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("EventSource %s/x: %v", user, err)
		}
		if resp.StatusCode == http.StatusOK && !strings.Contains(string(body), "retained") {
			t.Errorf("EventSource %s/x: %q, want the retained message", user, body)
		}
		return resp.StatusCode, string(body)
	}
	paths := []path{
		{name: "publish stream over HTTP/3", conn: h3Conn, do: stream, ok: http.StatusOK},
		{name: "HTTP/1.1 on TCP", conn: tcpConn(false), do: publish, ok: http.StatusNoContent},
		{name: "HTTP/2 on TCP", conn: tcpConn(true), do: publish, ok: http.StatusNoContent},
		{name: "EventSource over HTTP/3", conn: h3Conn, do: eventSource, ok: http.StatusOK, sse: true},
		{name: "EventSource over HTTP/1.1", conn: tcpConn(false), do: eventSource, ok: http.StatusOK, sse: true},
		{name: "EventSource over HTTP/2", conn: tcpConn(true), do: eventSource, ok: http.StatusOK, sse: true},
	}
	for _, p := range paths {
		t.Run(p.name, func(t *testing.T) {
			type try struct {
				what, user, query string
				hdr               []string
				want              int
				reason            string
			}
			tokenTries := func(user, tok string, want int, reason string) []try {
				tries := []try{
					{user + "'s token as Bearer", user, "", []string{"Authorization", "Bearer " + tok}, want, reason},
					{user + "'s token as cookie", user, "", []string{"Cookie", web.CookieName + "=" + tok}, want, reason},
				}
				if p.sse {
					tries = append(tries, try{user + "'s token in the URL", user, web.TokenParam + "=" + url.QueryEscape(tok), nil, want, reason})
				}
				return tries
			}
			// A connection bob's Basic credentials bind.
			bobConn := []try{{"bob's Basic", "bob", "", []string{"Authorization", basicAuth("bob", "bob-pw")}, p.ok, ""}}
			bobConn = append(bobConn, tokenTries("alice", aliceTok, http.StatusForbidden, `this connection is authenticated as "bob"`)...)
			bobConn = append(bobConn, tokenTries("bob", bobTok, p.ok, "")...)
			// A connection alice's token binds.
			aliceConn := []try{{"alice's token", "alice", "", []string{"Authorization", "Bearer " + aliceTok}, p.ok, ""}}
			aliceConn = append(aliceConn,
				try{"bob's Basic", "bob", "", []string{"Authorization", basicAuth("bob", "bob-pw")}, http.StatusForbidden, `this connection is authenticated as "alice"`},
				try{"no credentials", "alice", "", nil, http.StatusUnauthorized, ""})
			aliceConn = append(aliceConn, tokenTries("bob", bobTok, http.StatusForbidden, `this connection is authenticated as "alice"`)...)
			for _, conn := range []struct {
				name  string
				tries []try
			}{{"bound by bob's Basic", bobConn}, {"bound by alice's token", aliceConn}} {
				c, dials := p.conn()
				for _, tr := range conn.tries {
					st, body := p.do(c, tr.user, tr.query, tr.hdr...)
					if st != tr.want || !strings.Contains(body, tr.reason) {
						t.Errorf("connection %s: %s on %s/x: %d %q, want %d %q", conn.name, tr.what, tr.user, st, body, tr.want, tr.reason)
					}
				}
				if dials != nil && dials.Load() != 1 {
					t.Errorf("connection %s: %d TCP connections, want its requests on one", conn.name, dials.Load())
				}
			}
		})
	}
}
