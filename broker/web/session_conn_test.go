package web_test

import (
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/auth"
	"github.com/quiot/quiot/broker/brokertest"
	"github.com/quiot/quiot/broker/web"
	"github.com/quiot/quiot/internal/testutil"
)

// TestSessionTokenOneIdentityPerConnection is issue 27 finding 9: a session
// token is refused (403) on a connection bound to another identity, by
// credentials or by another token; a connection a token binds serves
// requests that carry it only, and refuses other credentials.
func TestSessionTokenOneIdentityPerConnection(t *testing.T) {
	e := start(t, testACL, web.Options{})
	aliceTok, bobTok := e.session(t, "alice", "alice-pw"), e.session(t, "bob", "bob-pw")

	c := newH3(t, e.Broker)
	if resp, body := do(t, c, http.MethodPost, e.URL+"/v1/topics/bob%2Fx", "1", "Authorization", basic("bob", "bob-pw")); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("bob with Basic: %d %s", resp.StatusCode, body)
	}
	for _, hdr := range [][]string{{"Authorization", "Bearer " + aliceTok}, {"Cookie", web.CookieName + "=" + aliceTok}} {
		for _, u := range []string{e.URL + "/v1/session", e.URL + "/v1/topics/sensors%2Fx?count=1&since=0&" + web.TokenParam + "=x"} {
			if strings.Contains(u, web.TokenParam) {
				u = e.URL + "/v1/topics/sensors%2Fx?count=1&since=0&" + web.TokenParam + "=" + url.QueryEscape(aliceTok)
				hdr = nil
			}
			resp, body := do(t, c, http.MethodGet, u, "", hdr...)
			if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, `this connection is authenticated as "bob"`) {
				t.Errorf("alice's token (%v) on bob's connection, GET %s: %d %q, want 403 with the reason", hdr, u, resp.StatusCode, body)
			}
		}
	}
	if resp, body := do(t, c, http.MethodGet, e.URL+"/v1/session", "", "Authorization", "Bearer "+bobTok); resp.StatusCode != http.StatusOK || !strings.Contains(body, `"identity":"bob"`) {
		t.Errorf("bob's token on bob's connection: %d %s", resp.StatusCode, body)
	}

	// A connection bound by alice's token.
	c2 := newH3(t, e.Broker)
	if resp, body := do(t, c2, http.MethodPost, e.URL+"/v1/topics/sensors%2Fx", "1", "Authorization", "Bearer "+aliceTok); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("alice's token: %d %s", resp.StatusCode, body)
	}
	if resp, body := do(t, c2, http.MethodPost, e.URL+"/v1/topics/sensors%2Fx", "1"); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("no token on the connection alice's token bound: %d %s, want 401", resp.StatusCode, body)
	}
	if resp, body := do(t, c2, http.MethodPost, e.URL+"/v1/topics/bob%2Fx", "1", "Authorization", basic("bob", "bob-pw")); resp.StatusCode != http.StatusForbidden {
		t.Errorf("bob's Basic on the connection alice's token bound: %d %s, want 403", resp.StatusCode, body)
	}
	if resp, body := do(t, c2, http.MethodGet, e.URL+"/v1/session", "", "Authorization", "Bearer "+bobTok); resp.StatusCode != http.StatusForbidden {
		t.Errorf("bob's token on the connection alice's token bound: %d %s, want 403", resp.StatusCode, body)
	}
}

// TestSessionCountsAgainstConnsPerIdentity is issue 27 finding 9: a
// connection a session token binds counts against MaxConnsPerIdentity as
// one bound by credentials does (429 beyond it).
func TestSessionCountsAgainstConnsPerIdentity(t *testing.T) {
	a, err := auth.Parse([]byte(testACL))
	if err != nil {
		t.Fatal(err)
	}
	logs := &testutil.SyncBuffer{}
	b := brokertest.Start(t, nil, &broker.Options{Auth: a, Web: &web.Options{}, Limits: broker.Limits{MaxConnsPerIdentity: 2},
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	login := newH3(t, b) // the first of alice's connections
	resp, body := do(t, login, http.MethodPost, b.URL+"/v1/session", "", "Authorization", basic("alice", "alice-pw"))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /v1/session: %d %s", resp.StatusCode, body)
	}
	tok := body[strings.Index(body, `"token":"`)+9:]
	tok = tok[:strings.IndexByte(tok, '"')]
	second := newH3(t, b)
	if resp, body := do(t, second, http.MethodGet, b.URL+"/v1/session", "", "Authorization", "Bearer "+tok); resp.StatusCode != http.StatusOK {
		t.Fatalf("the second connection, by the token: %d %s", resp.StatusCode, body)
	}
	for _, hdr := range [][]string{{"Authorization", "Bearer " + tok}, {"Authorization", basic("alice", "alice-pw")}} {
		resp, body := do(t, newH3(t, b), http.MethodGet, b.URL+"/v1/session", "", hdr...)
		if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(body, `identity "alice" has 2 connections open`) {
			t.Errorf("a third connection of alice (%s): %d %q, want 429", hdr[1][:6], resp.StatusCode, body)
		}
	}
	// The connections already bound keep working.
	if resp, body := do(t, second, http.MethodPost, b.URL+"/v1/topics/sensors%2Fx", "1", "Authorization", "Bearer "+tok); resp.StatusCode != http.StatusNoContent {
		t.Errorf("the token's connection: %d %s", resp.StatusCode, body)
	}
}

// TestLogoutEndsToken is issue 27 finding 9: DELETE /v1/session ends the
// token on the broker, not only the browser's cookie: a later request with
// it (Bearer, URL, cookie) is 401; another token of the same identity
// keeps working.
func TestLogoutEndsToken(t *testing.T) {
	clock := &fakeClock{t: time.Now()}
	e := start(t, testACL, web.Options{Now: clock.now})
	tok := e.session(t, "alice", "alice-pw")
	clock.add(time.Second) // a token of another second (the same second signs the same token)
	other := e.session(t, "alice", "alice-pw")
	resp, body := do(t, newH3(t, e.Broker), http.MethodDelete, e.URL+"/v1/session", "", "Cookie", web.CookieName+"="+tok)
	if resp.StatusCode != http.StatusNoContent || !strings.Contains(resp.Header.Get("Set-Cookie"), "Max-Age=0") {
		t.Fatalf("DELETE /v1/session: %d %v %s", resp.StatusCode, resp.Header, body)
	}
	for _, tc := range []struct {
		name, method, path string
		hdr                []string
		want               string
	}{
		{"bearer", http.MethodPost, "/v1/topics/sensors%2Fx", []string{"Authorization", "Bearer " + tok}, "log-out"},
		{"url", http.MethodGet, "/v1/topics/sensors%2Fx?" + web.TokenParam + "=" + url.QueryEscape(tok), nil, "log-out"},
		{"cookie", http.MethodPost, "/v1/topics/sensors%2Fx", []string{"Cookie", web.CookieName + "=" + tok}, "authentication required"},
	} {
		resp, body := do(t, newH3(t, e.Broker), tc.method, e.URL+tc.path, "1", tc.hdr...)
		if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, tc.want) {
			t.Errorf("%s after the log-out: %d %q, want 401 %q", tc.name, resp.StatusCode, body, tc.want)
		}
	}
	if resp, body := do(t, newH3(t, e.Broker), http.MethodPost, e.URL+"/v1/topics/sensors%2Fx", "1", "Authorization", "Bearer "+other); resp.StatusCode != http.StatusNoContent {
		t.Errorf("alice's other token: %d %s", resp.StatusCode, body)
	}
}

// TestTokenLinkSetsNoCookie is issue 27 finding 9: the dashboard opened
// with a session token in its URL (/?access_token=T, a link someone sent)
// sets no session cookie, so a link cannot plant another identity's
// session in a browser; credentials sent with the page still do.
func TestTokenLinkSetsNoCookie(t *testing.T) {
	e := start(t, testACL, web.Options{Dashboard: true})
	tok := e.session(t, "bob", "bob-pw")
	resp, body := do(t, newH3(t, e.Broker), http.MethodGet, e.URL+"/?"+web.TokenParam+"="+url.QueryEscape(tok), "")
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Set-Cookie") != "" {
		t.Errorf("dashboard by a token link: %d, Set-Cookie %q; want 200 and no cookie (%.80s)", resp.StatusCode, resp.Header.Get("Set-Cookie"), body)
	}
	resp, _ = do(t, newH3(t, e.Broker), http.MethodGet, e.URL+"/", "", "Authorization", basic("bob", "bob-pw"))
	if resp.StatusCode != http.StatusOK || !strings.Contains(resp.Header.Get("Set-Cookie"), web.CookieName) {
		t.Errorf("dashboard with Basic: %d, Set-Cookie %q", resp.StatusCode, resp.Header.Get("Set-Cookie"))
	}
}
