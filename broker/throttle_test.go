package broker_test

import (
	"crypto/tls"
	"encoding/base64"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/auth"
	"github.com/quiot/quiot/broker/brokertest"
)

// TestWrongPasswordsThrottled is the HTTP side of issue 27 finding 10
// (b): after 3 wrong HTTP Basic passwords from one address (over HTTP/3
// and the TCP fallback alike), the next attempt, the right password
// included, is refused with 429 before the password is checked, and
// counted as quiot_broker_refused_total{reason="throttled"}. A bearer
// token (not guessable) is not throttled.
func TestWrongPasswordsThrottled(t *testing.T) {
	tok, te := auth.NewToken("bob", time.Time{}, "")
	acl, err := auth.Parse([]byte("[[user]]\nname = \"bob\"\npassword = \"pw-bob\"\npublish = [\"b/#\"]\n" + te.TOML()))
	if err != nil {
		t.Fatal(err)
	}
	acl.SetThrottle(auth.Throttle{Failures: 3, Window: time.Hour, Backoff: time.Hour})
	b := brokertest.Start(t, nil, &broker.Options{Auth: acl})
	basic := func(pass string) string {
		return "Basic " + base64.StdEncoding.EncodeToString([]byte("bob:"+pass))
	}
	h3 := newClient(t, b, nil)
	if st, _, body := h3.publish("b/x", []byte("x"), "", "Authorization", basic("pw-bob")); st != http.StatusNoContent {
		t.Fatalf("right password: %d %q", st, body)
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: b.PKI.Pool(), ServerName: "localhost"}, ForceAttemptHTTP2: true}
	t.Cleanup(tr.CloseIdleConnections)
	tcp := &client{t: t, base: b.URL, c: &http.Client{Transport: tr}, hdr: http.Header{}}
	for i, c := range []*client{h3, tcp, newClient(t, b, nil)} {
		if st, _, body := c.publish("b/x", []byte("x"), "", "Authorization", basic("guess")); st != http.StatusUnauthorized {
			t.Fatalf("wrong password %d: %d %q, want 401", i, st, body)
		}
	}
	for name, c := range map[string]*client{"h3": newClient(t, b, nil), "tcp": tcp} {
		st, _, body := c.publish("b/x", []byte("x"), "", "Authorization", basic("pw-bob"))
		if st != http.StatusTooManyRequests || !strings.Contains(body, "too many wrong passwords") {
			t.Errorf("%s: right password after 3 wrong ones: %d %q, want 429", name, st, body)
		}
	}
	bearer := newClient(t, b, nil)
	if st, _, body := bearer.publish("b/x", []byte("x"), "", "Authorization", "Bearer "+tok); st != http.StatusNoContent {
		t.Errorf("token from the throttled address: %d %q", st, body)
	}
	st := b.Stats()
	if n := st.Protocols["h3"].Refused["throttled"] + st.Protocols["tcp"].Refused["throttled"]; n != 2 {
		t.Errorf("refused throttled = %d, want 2 (%+v)", n, st.Protocols)
	}
}
