package broker_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quiot/quiot/broker/brokertest"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/auth"
	"github.com/quiot/quiot/internal/testutil"
)

// rawClientCert signs a client certificate with any CN, bypassing the
// name check of certs.Issue (an attacker's CA mistake, or an old one).
func rawClientCert(t *testing.T, pki *testutil.PKI, cn string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, pki.CA.Cert, &key.PublicKey, pki.CA.Key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
}

// TestWildcardCertificateCN is issue 9 finding 4 over HTTP/3: a client
// certificate with CN "#" and the rule devices/%u/# may neither publish to
// devices/other/x nor subscribe to devices/#; the broker refuses the
// certificate with 403 and a one-line reason.
func TestWildcardCertificateCN(t *testing.T) {
	acl, err := auth.Parse([]byte(`
[anonymous]
publish = ["devices/%u/#"]
subscribe = ["devices/%u/#"]

[[user]]
name = "dev-1"
publish = ["devices/%u/#"]
subscribe = ["devices/%u/#"]
`))
	if err != nil {
		t.Fatal(err)
	}
	pki := testutil.NewPKI(t)
	b := brokertest.Start(t, pki, &broker.Options{Auth: acl, ClientCAs: pki.Pool()})
	for _, cn := range []string{"#", "+", "a/b"} {
		t.Run(cn, func(t *testing.T) {
			cert := rawClientCert(t, pki, cn)
			c := newClient(t, b, &cert)
			if st, _, body := c.publish("devices/other/x", []byte("x"), ""); st != http.StatusForbidden || strings.Count(body, "\n") != 1 {
				t.Errorf("publish devices/other/x: %d %q, want 403 with one line", st, body)
			}
			if _, st, body := c.subscribe("devices/#", "", false); st != http.StatusForbidden {
				t.Errorf("subscribe devices/#: %d %q, want 403", st, body)
			}
		})
	}
	good := pki.Client(t, "dev-1")
	c := newClient(t, b, &good)
	c.mustPublish("devices/dev-1/x", "ok")
	if st, _, _ := c.publish("devices/other/x", []byte("x"), ""); st != http.StatusForbidden {
		t.Errorf("dev-1 publish devices/other/x: %d", st)
	}
}

// TestReloadClosesRevokedConnections is the HTTP side of issue 9 finding
// 6's reload: after a reload, the subscription of an identity whose token
// was removed ends (its QUIC connection is closed) and its connection's
// next request is refused, while the connection of an identity whose rights
// stayed keeps receiving.
func TestReloadClosesRevokedConnections(t *testing.T) {
	keepTok, keep := auth.NewToken("keep", time.Time{}, "")
	goneTok, gone := auth.NewToken("gone", time.Time{}, "")
	pubTok, pub := auth.NewToken("pub", time.Time{}, "")
	users := "[[user]]\nname = \"keep\"\nsubscribe = [\"k/#\"]\npublish = [\"k/#\"]\n" +
		"[[user]]\nname = \"gone\"\nsubscribe = [\"g/#\"]\n" +
		"[[user]]\nname = \"pub\"\npublish = [\"#\"]\n"
	p := filepath.Join(t.TempDir(), "acl.toml")
	if err := os.WriteFile(p, []byte(users+keep.TOML()+gone.TOML()+pub.TOML()), 0o600); err != nil {
		t.Fatal(err)
	}
	acl, err := auth.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	b := brokertest.Start(t, nil, &broker.Options{Auth: acl})
	bearer := func(tok string) *client {
		c := newClient(t, b, nil)
		c.hdr.Set("Authorization", "Bearer "+tok)
		return c
	}
	ck, cg, cp := bearer(keepTok), bearer(goneTok), bearer(pubTok)
	sk := ck.mustSubscribe("k/#", "", false)
	sg := cg.mustSubscribe("g/#", "", false)
	cp.mustPublish("k/1", "before")
	cp.mustPublish("g/1", "before")
	sk.expect("k/1", "before")
	sg.expect("g/1", "before")

	// Remove gone's token; keep and pub stay as they were.
	if err := os.WriteFile(p, []byte(users+keep.TOML()+pub.TOML()), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := acl.Reload(); err != nil {
		t.Fatal(err)
	}
	if f, err := sg.next(); err == nil {
		t.Fatalf("revoked subscription got %+v, want its connection closed", f)
	}
	cp.mustPublish("k/2", "after")
	sk.expect("k/2", "after")
	ck.mustPublish("k/3", "same connection")
	sk.expect("k/3", "same connection")
	fresh := bearer(goneTok)
	if st, _, body := fresh.publish("g/2", []byte("x"), ""); st != http.StatusUnauthorized {
		t.Errorf("removed token on a new connection: %d %q, want 401", st, body)
	}
}
