package broker_test

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/auth"
	"github.com/quiot/quiot/broker/brokertest"
	"github.com/quiot/quiot/internal/testutil"
	"github.com/quiot/quiot/internal/wire"
)

// TestCertificateRevokedOnEveryHTTPPath is issue 27 finding 7 on the HTTP
// paths TestCertificateRevokedByRemovingUser does not take: a publish
// stream over HTTP/3, requests over HTTP/1.1 and HTTP/2 on the TCP
// listener, and EventSource subscriptions over HTTP/3, HTTP/1.1 and
// HTTP/2, all with the certificate of dev-1 while [anonymous] exists.
// After a reload that removes dev-1's [[user]] entry, the open stream's
// next message is not published and ends it, the TCP connections' next
// request is refused (401) and the EventSource streams end; new
// connections with the certificate are refused (403) on every path.
func TestCertificateRevokedOnEveryHTTPPath(t *testing.T) {
	anon := "[anonymous]\npublish = [\"public/#\", \"devices/%u/#\"]\nsubscribe = [\"public/#\", \"devices/%u/#\"]\n"
	user := "[[user]]\nname = \"dev-1\"\npublish = [\"devices/%u/#\"]\nsubscribe = [\"devices/%u/#\"]\n"
	watchTok, watchEntry := auth.NewToken("watch", time.Time{}, "")
	watch := "[[user]]\nname = \"watch\"\npublish = [\"#\"]\nsubscribe = [\"#\"]\n" + watchEntry.TOML()
	p := filepath.Join(t.TempDir(), "acl.toml")
	if err := os.WriteFile(p, []byte(anon+user+watch), 0o600); err != nil {
		t.Fatal(err)
	}
	acl, err := auth.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	pki := testutil.NewPKI(t)
	b := brokertest.Start(t, pki, &broker.Options{Auth: acl, ClientCAs: pki.Pool()})
	cert := pki.Client(t, "dev-1")

	w := newClient(t, b, nil)
	w.hdr.Set("Authorization", "Bearer "+watchTok)
	ws := w.mustSubscribe("devices/#", "", false)

	// The publish stream of dev-1, open across the reload.
	h3 := newClient(t, b, &cert)
	sp := openCertStream(t, h3.c, b.URL, "devices/dev-1/stream", "before")
	if a, err := sp.dec.Ack(); err != nil || a.ID != 1 || a.Status != 0 {
		t.Fatalf("stream before the reload: ack %+v %v", a, err)
	}
	ws.expect("devices/dev-1/stream", "before")

	// TCP connections bound to dev-1 by its certificate.
	type tcpConn struct {
		proto string
		c     *client
	}
	var tcps []tcpConn
	for _, h2 := range []bool{false, true} {
		c, _ := tcpPathClient(t, b, &cert, h2)
		c.mustPublish("devices/dev-1/tcp", tcpProto(h2))
		ws.expect("devices/dev-1/tcp", tcpProto(h2))
		tcps = append(tcps, tcpConn{tcpProto(h2), c})
	}

	// EventSource subscriptions of dev-1.
	type sseSub struct {
		path string
		s    *sub
	}
	subs := []sseSub{{"HTTP/3", newClient(t, b, &cert).mustSubscribe("devices/dev-1/#", "", true)}}
	for _, h2 := range []bool{false, true} {
		c, _ := tcpPathClient(t, b, &cert, h2)
		subs = append(subs, sseSub{tcpProto(h2), c.mustSubscribe("devices/dev-1/#", "", true)})
	}
	w.mustPublish("devices/dev-1/x", "before")
	ws.expect("devices/dev-1/x", "before")
	for _, s := range subs {
		if f := s.s.mustNext(); f.Topic != "devices/dev-1/x" {
			t.Fatalf("EventSource over %s: got %+v", s.path, f)
		}
	}

	if err := os.WriteFile(p, []byte(anon+watch), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := acl.Reload(); err != nil {
		t.Fatal(err)
	}

	for _, s := range subs {
		if f, err := s.s.next(); err == nil {
			t.Errorf("EventSource over %s of the revoked certificate got %+v, want its end", s.path, f)
		}
	}
	sp.send(2, "devices/dev-1/stream", []byte("after"), wire.PubQoS1, 0)
	sp.flush(t)
	if a, err := sp.dec.Ack(); err == nil {
		t.Errorf("stream of the revoked certificate: ack %+v, want the stream ended", a)
	}
	for _, tc := range tcps {
		if st, _, body := tc.c.publish("devices/dev-1/tcp", []byte("after"), ""); st != http.StatusUnauthorized {
			t.Errorf("%s connection of the revoked certificate: publish: %d %q, want 401", tc.proto, st, body)
		}
	}
	// Nothing of dev-1's was published after the reload: the next message
	// the watcher gets is this one.
	w.mustPublish("devices/marker", "after")
	ws.expect("devices/marker", "after")

	// New connections with the certificate, on every path.
	if st, _, body := streamOnce(t, newClient(t, b, &cert).c, b.URL, "devices/dev-1/stream"); st != http.StatusForbidden || !strings.Contains(body, "no [[user]] entry") {
		t.Errorf("revoked certificate, new publish stream: %d %q, want 403 naming the missing [[user]] entry", st, body)
	}
	for _, h2 := range []bool{false, true} {
		c, _ := tcpPathClient(t, b, &cert, h2)
		if st, _, body := c.publish("devices/dev-1/tcp", []byte("x"), ""); st != http.StatusForbidden || !strings.Contains(body, "no [[user]] entry") {
			t.Errorf("revoked certificate, new %s connection: publish: %d %q, want 403", tcpProto(h2), st, body)
		}
		c, _ = tcpPathClient(t, b, &cert, h2)
		if _, st, body := c.subscribe("devices/dev-1/#", "", true); st != http.StatusForbidden {
			t.Errorf("revoked certificate, new %s connection: EventSource: %d %q, want 403", tcpProto(h2), st, body)
		}
	}
	if _, st, body := newClient(t, b, &cert).subscribe("devices/dev-1/#", "", true); st != http.StatusForbidden {
		t.Errorf("revoked certificate, new HTTP/3 connection: EventSource: %d %q, want 403", st, body)
	}
}

// openCertStream opens a publish stream on c's connection with a first
// QoS 1 message (id 1) to topic and returns it with its response read
// (status 200). Unlike openStream, the first message's acknowledgement is
// left to the caller.
func openCertStream(t *testing.T, c *http.Client, base, topic, payload string) *streamPublisher {
	t.Helper()
	pr, pw := io.Pipe()
	req, _ := http.NewRequest(http.MethodPost, base+wire.PathPublish, pr)
	req.Header.Set("Content-Type", wire.ContentType)
	type res struct {
		resp *http.Response
		err  error
	}
	ch := make(chan res, 1)
	go func() {
		resp, err := c.Do(req)
		ch <- res{resp, err}
	}()
	sp := &streamPublisher{pw: pw}
	sp.send(1, topic, []byte(payload), wire.PubQoS1, 0)
	sp.flush(t)
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(r.resp.Body)
		r.resp.Body.Close()
		t.Fatalf("publish stream: %d %s", r.resp.StatusCode, body)
	}
	t.Cleanup(func() { pw.Close(); r.resp.Body.Close() })
	sp.resp, sp.dec = r.resp, wire.NewDecoder(r.resp.Body, 0)
	return sp
}
