package broker_test

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/auth"
	"github.com/quiot/quiot/broker/brokertest"
	"github.com/quiot/quiot/internal/testutil"
)

// TestCertificateRevokedByRemovingUser is the HTTP/3 side of issue 27
// finding 7: removing a certificate's [[user]] entry revokes it even when
// [anonymous] exists. After the reload the certificate's subscription
// ends and a new connection with it is refused (403), not served with the
// CN as identity and the anonymous rules (whose %u patterns then gave it
// its old topics). A certificate whose CN was never added is refused too.
func TestCertificateRevokedByRemovingUser(t *testing.T) {
	anon := "[anonymous]\npublish = [\"public/#\", \"devices/%u/#\"]\nsubscribe = [\"public/#\", \"devices/%u/#\"]\n"
	user := "[[user]]\nname = \"dev-1\"\npublish = [\"devices/%u/#\"]\nsubscribe = [\"devices/%u/#\"]\n"
	p := filepath.Join(t.TempDir(), "acl.toml")
	if err := os.WriteFile(p, []byte(anon+user), 0o600); err != nil {
		t.Fatal(err)
	}
	acl, err := auth.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	pki := testutil.NewPKI(t)
	b := brokertest.Start(t, pki, &broker.Options{Auth: acl, ClientCAs: pki.Pool()})
	cert := pki.Client(t, "dev-1")
	c := newClient(t, b, &cert)
	s := c.mustSubscribe("devices/dev-1/#", "", false)
	c.mustPublish("devices/dev-1/x", "before")
	s.expect("devices/dev-1/x", "before")

	never := pki.Client(t, "dev-2")
	for _, tc := range []struct {
		name  string
		cl    *client
		topic string
	}{
		{"never added", newClient(t, b, &never), "devices/dev-2/x"},
		{"never added, anonymous topic", newClient(t, b, &never), "public/x"},
	} {
		if st, _, body := tc.cl.publish(tc.topic, []byte("x"), ""); st != http.StatusForbidden || !strings.Contains(body, "no [[user]] entry") {
			t.Errorf("%s: publish %s: %d %q, want 403 naming the missing [[user]] entry", tc.name, tc.topic, st, body)
		}
	}

	if err := os.WriteFile(p, []byte(anon), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := acl.Reload(); err != nil {
		t.Fatal(err)
	}
	if f, err := s.next(); err == nil {
		t.Fatalf("subscription of the revoked certificate got %+v, want its connection closed", f)
	}
	for _, topic := range []string{"devices/dev-1/x", "public/x"} {
		fresh := newClient(t, b, &cert)
		if st, _, body := fresh.publish(topic, []byte("after"), ""); st != http.StatusForbidden {
			t.Errorf("revoked certificate, new connection: publish %s: %d %q, want 403", topic, st, body)
		}
	}
	if _, st, body := newClient(t, b, &cert).subscribe("devices/dev-1/#", "", false); st != http.StatusForbidden {
		t.Errorf("revoked certificate: subscribe: %d %q, want 403", st, body)
	}
	// Anonymous clients keep their rights (no %u: they have no name).
	anonC := newClient(t, b, nil)
	anonC.mustPublish("public/x", "anon")
	if st, _, _ := anonC.publish("devices/dev-1/x", []byte("x"), ""); st != http.StatusForbidden {
		t.Errorf("anonymous publish devices/dev-1/x: %d, want 403", st)
	}
}
