package web_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quiot/quiot/broker/brokertest"

	"github.com/quic-go/quic-go/http3"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/auth"
	"github.com/quiot/quiot/broker/web"
	"github.com/quiot/quiot/internal/testutil"
)

// testACL: alice may publish and subscribe under sensors/ and see the
// broker's stats; bob only under bob/; anonymous clients are refused.
const testACL = `
[[user]]
name = "alice"
password = "alice-pw"
token = "alice-acl-token"
publish = ["sensors/#"]
subscribe = ["sensors/#", "$SYS/#"]

[[user]]
name = "bob"
password = "bob-pw"
publish = ["bob/#"]
subscribe = ["bob/#"]
`

type env struct {
	*brokertest.Broker
	logs *testutil.SyncBuffer
	h3   *http.Client
	tcp  *http.Client
}

// start runs a broker with the ACL above (or open when acl is empty), the
// web part with opts, and debug logs captured.
func start(t *testing.T, acl string, opts web.Options) *env {
	t.Helper()
	logs := &testutil.SyncBuffer{}
	o := &broker.Options{Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})), Web: &opts}
	if acl != "" {
		a, err := auth.Parse([]byte(acl))
		if err != nil {
			t.Fatal(err)
		}
		o.Auth = a
	}
	b := brokertest.Start(t, nil, o)
	e := &env{Broker: b, logs: logs, h3: newH3(t, b)}
	e.tcp = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: b.PKI.Pool()}, ForceAttemptHTTP2: true}}
	t.Cleanup(e.tcp.CloseIdleConnections)
	return e
}

// newH3 is a fresh HTTP/3 client (a new QUIC connection, so no identity
// bound by an earlier request).
func newH3(t *testing.T, b *brokertest.Broker) *http.Client {
	c := testutil.H3Client(b.PKI.Pool(), nil)
	t.Cleanup(func() { _ = c.Transport.(*http3.Transport).Close() })
	return c
}

func do(t *testing.T, c *http.Client, method, u string, body string, hdr ...string) (*http.Response, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, u, strings.NewReader(body))
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
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

// session logs in with Basic and returns the token.
func (e *env) session(t *testing.T, user, pw string) string {
	t.Helper()
	resp, body := do(t, newH3(t, e.Broker), http.MethodPost, e.URL+"/v1/session", "", "Authorization", basic(user, pw))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /v1/session: %d %s", resp.StatusCode, body)
	}
	var rep struct {
		Identity, Token, Proto string
		Expires                int64
	}
	if err := json.Unmarshal([]byte(body), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Identity != user || rep.Token == "" || rep.Proto != "HTTP/3.0" {
		t.Fatalf("session reply %+v", rep)
	}
	c := resp.Header.Get("Set-Cookie")
	for _, want := range []string{web.CookieName + "=" + rep.Token, "HttpOnly", "Secure", "SameSite=Strict"} {
		if !strings.Contains(c, want) {
			t.Errorf("Set-Cookie %q lacks %q", c, want)
		}
	}
	return rep.Token
}

func basic(u, p string) string {
	r, _ := http.NewRequest(http.MethodGet, "/", nil)
	r.SetBasicAuth(u, p)
	return r.Header.Get("Authorization")
}

// sse reads SSE events from a subscribe response.
type sse struct {
	resp *http.Response
	sc   *bufio.Scanner
}

type event struct{ id, name, data string }

func (s *sse) next(t *testing.T) event {
	t.Helper()
	var ev event
	for s.sc.Scan() {
		line := s.sc.Text()
		switch {
		case line == "":
			if ev.name != "" || ev.data != "" {
				return ev
			}
		case strings.HasPrefix(line, "id: "):
			ev.id = line[4:]
		case strings.HasPrefix(line, "event: "):
			ev.name = line[7:]
		case strings.HasPrefix(line, "data: "):
			ev.data = line[6:]
		}
	}
	t.Fatalf("stream ended: %v", s.sc.Err())
	return ev
}

func subscribe(t *testing.T, c *http.Client, u string, hdr ...string) *sse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	req.Header.Set("Accept", "text/event-stream")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return &sse{resp: resp, sc: bufio.NewScanner(resp.Body)}
}

// TestSessionTokenSubscribe: a token from POST /v1/session (Basic) lets a
// connection without credentials subscribe with ?access_token= from an
// allowed origin (CORS headers on the stream), over HTTP/3, with the first
// event naming the protocol; the ACL still decides per identity; bad and
// expired tokens are refused with a reason; the token never reaches the
// logs.
func TestSessionTokenSubscribe(t *testing.T) {
	clock := &fakeClock{t: time.Now()}
	e := start(t, testACL, web.Options{CORSOrigins: []string{"http://page.example:8080"}, Now: clock.now, SessionTTL: time.Minute})
	tok := e.session(t, "alice", "alice-pw")

	s := subscribe(t, newH3(t, e.Broker), e.URL+"/v1/topics/sensors%2F%2B?proto=1&"+web.TokenParam+"="+url.QueryEscape(tok), "Origin", "http://page.example:8080")
	if s.resp.StatusCode != http.StatusOK {
		t.Fatalf("subscribe: %d", s.resp.StatusCode)
	}
	if got := s.resp.Header.Get("Access-Control-Allow-Origin"); got != "http://page.example:8080" {
		t.Errorf("Access-Control-Allow-Origin %q", got)
	}
	if got := s.resp.Header.Get("Access-Control-Allow-Credentials"); got != "true" {
		t.Errorf("Access-Control-Allow-Credentials %q", got)
	}
	if ev := s.next(t); ev.name != "proto" || ev.data != `{"proto":"HTTP/3.0"}` {
		t.Fatalf("first event %+v, want proto HTTP/3.0", ev)
	}
	resp, body := do(t, e.h3, http.MethodPost, e.URL+"/v1/topics/sensors%2Ft1", "21.5", "Authorization", "Bearer alice-acl-token")
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("publish: %d %s", resp.StatusCode, body)
	}
	if ev := s.next(t); ev.name != "message" || !strings.Contains(ev.data, `"topic":"sensors/t1"`) {
		t.Fatalf("event %+v", ev)
	}

	tests := []struct {
		name     string
		path     string
		query    string
		want     int
		wantBody string
	}{
		{name: "not alice's filter", path: "/v1/topics/bob%2F%23", query: web.TokenParam + "=" + url.QueryEscape(tok), want: http.StatusForbidden, wantBody: "alice may not subscribe"},
		{name: "forged", path: "/v1/topics/sensors%2F%23", query: web.TokenParam + "=" + strings.Replace(tok, ".", ".x", 1), want: http.StatusUnauthorized, wantBody: "session token"},
		{name: "no token", path: "/v1/topics/sensors%2F%23", want: http.StatusUnauthorized, wantBody: "authentication required"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			u := e.URL + tc.path
			if tc.query != "" {
				u += "?" + tc.query
			}
			resp, body := do(t, newH3(t, e.Broker), http.MethodGet, u, "", "Accept", "text/event-stream")
			if resp.StatusCode != tc.want || !strings.Contains(body, tc.wantBody) {
				t.Fatalf("%d %q, want %d %q", resp.StatusCode, body, tc.want, tc.wantBody)
			}
		})
	}

	clock.add(2 * time.Minute)
	resp, body = do(t, newH3(t, e.Broker), http.MethodGet, e.URL+"/v1/topics/sensors%2F%23?"+web.TokenParam+"="+url.QueryEscape(tok), "", "Accept", "text/event-stream")
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, "expired") {
		t.Fatalf("expired token: %d %q", resp.StatusCode, body)
	}
	if strings.Contains(e.logs.String(), tok) || strings.Contains(e.logs.String(), tok[len(tok)-20:]) {
		t.Fatalf("the token reached the logs:\n%s", e.logs)
	}
}

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// TestPreflight: OPTIONS from an allowed origin gets the CORS answer on
// both listeners; a foreign origin gets 403; no CORS configured refuses.
func TestPreflight(t *testing.T) {
	e := start(t, "", web.Options{CORSOrigins: []string{"https://app.example"}})
	tests := []struct {
		name   string
		c      *http.Client
		origin string
		want   int
	}{
		{"h3 allowed", e.h3, "https://app.example", http.StatusNoContent},
		{"tcp allowed", e.tcp, "https://app.example", http.StatusNoContent},
		{"h3 foreign", e.h3, "https://evil.example", http.StatusForbidden},
		{"tcp foreign", e.tcp, "https://evil.example", http.StatusForbidden},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			u := e.URL
			if tc.c == e.tcp {
				u = "https://" + e.TCPAddr().String()
			}
			resp, body := do(t, tc.c, http.MethodOptions, u+"/v1/topics/a%2Fb", "", "Origin", tc.origin,
				"Access-Control-Request-Method", "GET", "Access-Control-Request-Headers", "last-event-id, authorization")
			if resp.StatusCode != tc.want {
				t.Fatalf("%d %s", resp.StatusCode, body)
			}
			if tc.want != http.StatusNoContent {
				return
			}
			h := resp.Header
			if h.Get("Access-Control-Allow-Origin") != tc.origin || !strings.Contains(h.Get("Access-Control-Allow-Headers"), "Last-Event-ID") ||
				!strings.Contains(h.Get("Access-Control-Allow-Headers"), "Authorization") || !strings.Contains(h.Get("Access-Control-Allow-Methods"), "POST") ||
				!strings.Contains(h.Get("Access-Control-Expose-Headers"), "Quiot-Seq") {
				t.Fatalf("preflight headers %v", h)
			}
			if tc.c == e.tcp && h.Get("Alt-Svc") == "" {
				t.Error("no Alt-Svc on the TCP preflight")
			}
		})
	}
	none := start(t, "", web.Options{})
	resp, _ := do(t, none.h3, http.MethodOptions, none.URL+"/v1/topics/a", "", "Origin", "https://app.example", "Access-Control-Request-Method", "GET")
	if resp.StatusCode != http.StatusForbidden || resp.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Fatalf("no origins configured: %d %v", resp.StatusCode, resp.Header)
	}
}

// TestCookieCSRF: the session cookie publishes from the broker's own
// origin, and is refused on a publish (and a log-out) from a foreign
// origin, as a session token in a Bearer header is; a stale cookie is
// dropped and cleared; a token in a POST URL is refused.
func TestCookieCSRF(t *testing.T) {
	e := start(t, testACL, web.Options{})
	tok := e.session(t, "alice", "alice-pw")
	cookie := web.CookieName + "=" + tok
	own := "https://" + e.Addr().String()
	resp, body := do(t, newH3(t, e.Broker), http.MethodPost, e.URL+"/v1/topics/sensors%2Fx", "1", "Cookie", cookie, "Origin", own)
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("same origin: %d %s", resp.StatusCode, body)
	}
	resp, body = do(t, newH3(t, e.Broker), http.MethodPost, e.URL+"/v1/topics/sensors%2Fx", "1", "Cookie", cookie, "Origin", "https://evil.example")
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "neither this broker nor an allowed CORS origin") {
		t.Fatalf("foreign origin: %d %s", resp.StatusCode, body)
	}
	// A cookie from another broker run is dropped (and cleared), not fatal.
	stale := web.CookieName + "=" + strings.Replace(tok, "qs1.", "qs1.x", 1)
	resp, body = do(t, newH3(t, e.Broker), http.MethodPost, e.URL+"/v1/topics/sensors%2Fx", "1", "Cookie", stale, "Authorization", "Bearer alice-acl-token")
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("stale cookie with an ACL token: %d %s", resp.StatusCode, body)
	}
	resp, body = do(t, newH3(t, e.Broker), http.MethodGet, e.URL+"/v1/session", "", "Cookie", stale)
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(resp.Header.Get("Set-Cookie"), "Max-Age=0") || !strings.Contains(body, "authentication required") {
		t.Fatalf("stale cookie alone: %d %v %s", resp.StatusCode, resp.Header, body)
	}
	resp, body = do(t, newH3(t, e.Broker), http.MethodPost, e.URL+"/v1/topics/sensors%2Fx?"+web.TokenParam+"="+tok, "1")
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, "only accepted on GET") {
		t.Fatalf("token in a POST URL: %d %s", resp.StatusCode, body)
	}
	resp, body = do(t, newH3(t, e.Broker), http.MethodPost, e.URL+"/v1/topics/sensors%2Fx", "1", "Authorization", "Bearer "+tok)
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("session token as Bearer: %d %s", resp.StatusCode, body)
	}
	// A foreign page may not publish whatever the credential (issue 27
	// finding 3), nor log the user out.
	resp, body = do(t, newH3(t, e.Broker), http.MethodPost, e.URL+"/v1/topics/sensors%2Fx", "1", "Authorization", "Bearer "+tok, "Origin", "https://evil.example")
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("session token as Bearer from a foreign origin: %d %s", resp.StatusCode, body)
	}
	resp, body = do(t, newH3(t, e.Broker), http.MethodDelete, e.URL+"/v1/session", "", "Cookie", cookie, "Origin", "https://evil.example")
	if resp.StatusCode != http.StatusForbidden || strings.Contains(resp.Header.Get("Set-Cookie"), "Max-Age=0") {
		t.Fatalf("log-out from a foreign origin: %d %v %s", resp.StatusCode, resp.Header, body)
	}
}

// TestStatsAndTopics: /v1/stats needs $SYS subscribe permission;
// /v1/stats/topics shows only the topics the identity may subscribe to,
// with last value, count and retained flag.
func TestStatsAndTopics(t *testing.T) {
	e := start(t, testACL, web.Options{})
	pub := func(user, pw, topic, payload, q string) {
		resp, body := do(t, e.h3, http.MethodPost, e.URL+"/v1/topics/"+url.PathEscape(topic)+q, payload, "Authorization", basic(user, pw))
		if resp.StatusCode != http.StatusNoContent {
			t.Fatalf("publish %s: %d %s", topic, resp.StatusCode, body)
		}
	}
	pub("alice", "alice-pw", "sensors/t1", "20", "")
	pub("alice", "alice-pw", "sensors/t1", "21", "?retain=1")
	e.h3 = newH3(t, e.Broker)
	pub("bob", "bob-pw", "bob/x", "secret", "")

	var topics struct {
		Topics []web.TopicInfo
		Hidden int
		Proto  string
	}
	resp, body := do(t, newH3(t, e.Broker), http.MethodGet, e.URL+"/v1/stats/topics", "", "Authorization", basic("alice", "alice-pw"))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	if err := json.Unmarshal([]byte(body), &topics); err != nil {
		t.Fatal(err)
	}
	if len(topics.Topics) != 1 || topics.Hidden != 1 || topics.Proto != "HTTP/3.0" {
		t.Fatalf("topics %+v", topics)
	}
	if tp := topics.Topics[0]; tp.Topic != "sensors/t1" || tp.Last != "21" || tp.Count != 2 || !tp.Retained || tp.Origin != "h3" {
		t.Fatalf("topic %+v", tp)
	}

	var stats struct {
		Broker broker.WebStats
		Proto  string
	}
	resp, body = do(t, newH3(t, e.Broker), http.MethodGet, e.URL+"/v1/stats", "", "Authorization", basic("alice", "alice-pw"))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	if err := json.Unmarshal([]byte(body), &stats); err != nil {
		t.Fatal(err)
	}
	if stats.Broker.Protocols["h3"].MessagesIn != 3 || stats.Broker.Retained != 1 || stats.Broker.Epoch == "" || stats.Broker.Goroutines == 0 {
		t.Fatalf("stats %+v", stats)
	}
	resp, body = do(t, newH3(t, e.Broker), http.MethodGet, e.URL+"/v1/stats", "", "Authorization", basic("bob", "bob-pw"))
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "$SYS/#") {
		t.Fatalf("bob's stats: %d %s", resp.StatusCode, body)
	}
}

// TestDashboardAuth: without a session the page asks for Basic; with
// credentials it is served (gzip when asked) and sets the session cookie;
// Dashboard false serves no page.
func TestDashboardAuth(t *testing.T) {
	e := start(t, testACL, web.Options{Dashboard: true})
	resp, body := do(t, newH3(t, e.Broker), http.MethodGet, e.URL+"/", "")
	if resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Basic") {
		t.Fatalf("no credentials: %d %v %s", resp.StatusCode, resp.Header, body)
	}
	resp, body = do(t, newH3(t, e.Broker), http.MethodGet, e.URL+"/", "", "Authorization", basic("bob", "bob-pw"))
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "<title>quiot broker</title>") || !strings.Contains(resp.Header.Get("Set-Cookie"), web.CookieName) {
		t.Fatalf("with credentials: %d %v", resp.StatusCode, resp.Header)
	}
	resp, body = do(t, e.tcp, http.MethodGet, "https://"+e.TCPAddr().String()+"/ui/app.js", "")
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "EventSource") || resp.Header.Get("Alt-Svc") == "" {
		t.Fatalf("app.js over TCP: %d %v", resp.StatusCode, resp.Header)
	}
	off := start(t, "", web.Options{})
	resp, _ = do(t, off.h3, http.MethodGet, off.URL+"/", "")
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("dashboard off: %d", resp.StatusCode)
	}
}

// TestSessionEndsOnACLReload: an ACL reload that takes rights away from an
// identity ends its session tokens (401 with the reason); the tokens of
// identities the reload left alone keep working.
func TestSessionEndsOnACLReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "acl.toml")
	if err := os.WriteFile(path, []byte(testACL), 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := auth.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	b := brokertest.Start(t, nil, &broker.Options{Auth: a, Web: &web.Options{}})
	e := &env{Broker: b, logs: &testutil.SyncBuffer{}, h3: newH3(t, b)}
	alice := e.session(t, "alice", "alice-pw")
	bob := e.session(t, "bob", "bob-pw")
	sub := func(tok, filter string) (int, string) {
		resp, body := do(t, newH3(t, e.Broker), http.MethodGet, e.URL+"/v1/topics/"+url.PathEscape(filter)+"?count=1&since=0&"+web.TokenParam+"="+url.QueryEscape(tok), "", "Accept", "text/event-stream")
		return resp.StatusCode, body
	}
	// Retained messages make each subscription end at once (count=1).
	do(t, e.h3, http.MethodPost, e.URL+"/v1/topics/sensors%2Fx?retain=1", "1", "Authorization", basic("alice", "alice-pw"))
	do(t, newH3(t, e.Broker), http.MethodPost, e.URL+"/v1/topics/bob%2Fa?retain=1", "1", "Authorization", basic("bob", "bob-pw"))
	if code, body := sub(alice, "sensors/#"); code != http.StatusOK {
		t.Fatalf("alice before the reload: %d %s", code, body)
	}
	less := strings.Replace(testACL, `subscribe = ["sensors/#", "$SYS/#"]`, `subscribe = ["sensors/x"]`, 1)
	if err := os.WriteFile(path, []byte(less), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := a.Reload(); err != nil {
		t.Fatal(err)
	}
	if code, body := sub(alice, "sensors/x"); code != http.StatusUnauthorized || !strings.Contains(body, "ACL reload") {
		t.Fatalf("alice's token after a reload that cut her rights: %d %s", code, body)
	}
	if code, body := sub(bob, "bob/#"); code != http.StatusOK {
		t.Fatalf("bob's token after a reload that left him alone: %d %s", code, body)
	}
	if fresh := e.session(t, "alice", "alice-pw"); fresh == alice {
		t.Fatal("a new session gave the old token")
	} else if code, body := sub(fresh, "sensors/x"); code != http.StatusOK {
		t.Fatalf("alice's new token: %d %s", code, body)
	}
}

// TestSessionOpen: GET /v1/session says whether the broker is open (no
// ACL: nothing to log in to), which the dashboard uses to hide its login
// form.
func TestSessionOpen(t *testing.T) {
	for _, tc := range []struct {
		name, acl string
		hdr       []string
		open      bool
	}{
		{"loopback, no ACL", "", nil, true},
		{"ACL, alice", testACL, []string{"Authorization", basic("alice", "alice-pw")}, false},
		{"ACL with anonymous rights, anonymous", testACL + anonSection, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := start(t, tc.acl, web.Options{})
			resp, body := do(t, e.h3, http.MethodGet, e.URL+"/v1/session", "", tc.hdr...)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("GET /v1/session: %d %s", resp.StatusCode, body)
			}
			var rep map[string]any
			if err := json.Unmarshal([]byte(body), &rep); err != nil {
				t.Fatal(err)
			}
			if open, ok := rep["open"].(bool); !ok || open != tc.open {
				t.Errorf("reply %s: want \"open\": %v", body, tc.open)
			}
		})
	}
}

// anonSection gives anonymous clients rights under public/ (appended to
// testACL: an ACL broker where logging in is optional).
const anonSection = `
[anonymous]
publish = ["public/#"]
subscribe = ["public/#"]
`
