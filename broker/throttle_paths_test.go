package broker_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/auth"
	"github.com/quiot/quiot/broker/brokertest"
)

// TestWrongPasswordsThrottledEveryHTTPPath is issue 27 finding 10 (b) on
// the paths TestWrongPasswordsThrottled (single requests over HTTP/3 and
// TCP) does not take: a publish stream over HTTP/3 and EventSource
// subscriptions over HTTP/3, HTTP/1.1 and HTTP/2. On each, alone on its
// broker, 3 wrong HTTP Basic passwords are answered 401, then the right
// password is refused with 429 before it is checked and counted as
// refused "throttled" on its listener; a bearer token is still served.
func TestWrongPasswordsThrottledEveryHTTPPath(t *testing.T) {
	type path struct {
		name, proto string
		conn        func(b *brokertest.Broker) *client
		// do makes the path's request with hdr and returns its status
		// and body (the first acknowledgement's for a stream).
		do func(c *client, hdr ...string) (int, string)
		ok int
	}
	h3 := func(b *brokertest.Broker) *client { return newClient(t, b, nil) }
	tcp := func(h2 bool) func(b *brokertest.Broker) *client {
		return func(b *brokertest.Broker) *client { c, _ := tcpPathClient(t, b, nil, h2); return c }
	}
	stream := func(c *client, hdr ...string) (int, string) {
		st, a, body := streamOnce(t, c.c, c.base, "b/x", hdr...)
		if st == http.StatusOK && a.Status != 0 {
			return int(a.Status), a.Reason
		}
		return st, body
	}
	eventSource := func(c *client, hdr ...string) (int, string) {
		s, st, body := c.subscribe("b/#", "", true, hdr...)
		if s != nil {
			s.close()
		}
		return st, body
	}
	for _, p := range []path{
		{"publish stream over HTTP/3", broker.ProtoH3, h3, stream, http.StatusOK},
		{"EventSource over HTTP/3", broker.ProtoH3, h3, eventSource, http.StatusOK},
		{"EventSource over HTTP/1.1", broker.ProtoTCP, tcp(false), eventSource, http.StatusOK},
		{"EventSource over HTTP/2", broker.ProtoTCP, tcp(true), eventSource, http.StatusOK},
	} {
		t.Run(p.name, func(t *testing.T) {
			tok, te := auth.NewToken("bob", time.Time{}, "")
			acl, err := auth.Parse([]byte("[[user]]\nname = \"bob\"\npassword = \"pw-bob\"\npublish = [\"b/#\"]\nsubscribe = [\"b/#\"]\n" + te.TOML()))
			if err != nil {
				t.Fatal(err)
			}
			acl.SetThrottle(auth.Throttle{Failures: 3, Window: time.Hour, Backoff: time.Hour})
			b := brokertest.Start(t, nil, &broker.Options{Auth: acl})
			if st, body := p.do(p.conn(b), "Authorization", basicAuth("bob", "pw-bob")); st != p.ok {
				t.Fatalf("right password: %d %q", st, body)
			}
			for i := range 3 {
				if st, body := p.do(p.conn(b), "Authorization", basicAuth("bob", "guess")); st != http.StatusUnauthorized {
					t.Fatalf("wrong password %d: %d %q, want 401", i, st, body)
				}
			}
			if st, body := p.do(p.conn(b), "Authorization", basicAuth("bob", "pw-bob")); st != http.StatusTooManyRequests || !strings.Contains(body, "too many wrong passwords") {
				t.Errorf("right password after 3 wrong ones: %d %q, want 429", st, body)
			}
			if st, body := p.do(p.conn(b), "Authorization", "Bearer "+tok); st != p.ok {
				t.Errorf("token from the throttled address: %d %q, want %d", st, body, p.ok)
			}
			if n := b.Stats().Protocols[p.proto].Refused["throttled"]; n != 1 {
				t.Errorf("refused throttled on %s = %d, want 1", p.proto, n)
			}
		})
	}
}
