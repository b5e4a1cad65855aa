package broker_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/quic-go/quic-go/http3"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/auth"
	"github.com/quiot/quiot/broker/brokertest"
	"github.com/quiot/quiot/broker/web"
	"github.com/quiot/quiot/internal/testutil"
)

// TestSessionTokenOnCertificateConnection is issue 27 finding 9 with a
// client certificate: a connection its certificate binds to bob refuses a
// session token of another identity (here an anonymous one) with 403, and
// takes bob's own.
func TestSessionTokenOnCertificateConnection(t *testing.T) {
	acl, err := auth.Parse([]byte(originACL))
	if err != nil {
		t.Fatal(err)
	}
	pki := testutil.NewPKI(t)
	b := brokertest.Start(t, pki, &broker.Options{Auth: acl, ClientCAs: pki.Pool(), Web: &web.Options{}})
	anon := testutil.H3Client(pki.Pool(), nil)
	t.Cleanup(func() { _ = anon.Transport.(*http3.Transport).Close() })
	st, body := h3Do(t, anon, http.MethodPost, b.URL+"/v1/session")
	var rep struct{ Identity, Token string }
	if err := json.Unmarshal([]byte(body), &rep); err != nil || st != http.StatusOK || rep.Identity != "" || rep.Token == "" {
		t.Fatalf("anonymous POST /v1/session: %d %s", st, body)
	}
	bobTok := sessionToken(t, b, "bob", "bob-pw")
	cert := pki.Client(t, "bob")
	c := testutil.H3Client(pki.Pool(), &cert)
	t.Cleanup(func() { _ = c.Transport.(*http3.Transport).Close() })
	for _, hdr := range [][]string{{"Authorization", "Bearer " + rep.Token}, {"Cookie", web.CookieName + "=" + rep.Token}} {
		if st, body := h3Do(t, c, http.MethodPost, b.URL+"/v1/topics/anon%2Fx", hdr...); st != http.StatusForbidden || !strings.Contains(body, `this connection is authenticated as "bob"`) {
			t.Errorf("anonymous token (%s) on bob's certificate connection: %d %q, want 403", hdr[0], st, body)
		}
	}
	if st, body := h3Do(t, c, http.MethodPost, b.URL+"/v1/topics/bob%2Fx", "Authorization", "Bearer "+bobTok); st != http.StatusNoContent {
		t.Errorf("bob's token on bob's certificate connection: %d %q", st, body)
	}
}
