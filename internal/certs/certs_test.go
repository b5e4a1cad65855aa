package certs

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestIssueVerifies(t *testing.T) {
	ca, err := NewCA("test ca", nil)
	if err != nil {
		t.Fatal(err)
	}
	dev, err := ca.Issue("sensor-1", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		if _, err := dev.TLS.Leaf.Verify(x509.VerifyOptions{Roots: ca.Pool(), DNSName: "sensor-1", KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
			t.Errorf("verify for %v: %v", usage, err)
		}
	}
	if dev.TLS.Leaf.Subject.CommonName != "sensor-1" {
		t.Errorf("CN = %q", dev.TLS.Leaf.Subject.CommonName)
	}
	if _, err := tls.X509KeyPair(dev.CertPEM, dev.KeyPEM); err != nil {
		t.Errorf("PEM pair: %v", err)
	}
}

func TestIssueRejectsBadName(t *testing.T) {
	ca, err := NewCA("ca", nil)
	if err != nil {
		t.Fatal(err)
	}
	// Names that would become ACL wildcards or levels when put into a
	// pattern (%u): finding 4 of issue 9 (CN "#" was issued).
	for _, n := range []string{"", "a/b", "a\x00b", "#", "+", "a+b", "dev/#", "a\nb", "\xff", "$SYS", strings.Repeat("x", MaxNameLen+1)} {
		if _, err := ca.Issue(n, nil); err == nil || !errors.Is(err, ErrBadName) {
			t.Errorf("Issue(%q) = %v, want ErrBadName", n, err)
		}
	}
}

func TestValidateName(t *testing.T) {
	for _, n := range []string{"sensor-1", "a:b", "Küche", "a.b", "x$", strings.Repeat("x", MaxNameLen)} {
		if err := ValidateName(n); err != nil {
			t.Errorf("ValidateName(%q) = %v", n, err)
		}
	}
}

func TestSelfSignedAndFingerprint(t *testing.T) {
	c, err := SelfSigned(nil, &Options{Validity: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	p := x509.NewCertPool()
	p.AddCert(c.TLS.Leaf)
	if _, err := c.TLS.Leaf.Verify(x509.VerifyOptions{Roots: p, DNSName: "localhost"}); err != nil {
		t.Fatal(err)
	}
	fp := Fingerprint(c.TLS.Leaf.Raw)
	if len(fp) != 32*3-1 {
		t.Errorf("fingerprint %q has length %d", fp, len(fp))
	}
}

func TestWriteAndLoadCA(t *testing.T) {
	dir := t.TempDir()
	ca, err := NewCA("ca", nil)
	if err != nil {
		t.Fatal(err)
	}
	kp, err := ca.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	cf, kf := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key")
	if err := WriteFiles(cf, ca.CertPEM(), kf, kp); err != nil {
		t.Fatal(err)
	}
	if err := WriteFiles(cf, ca.CertPEM(), kf, kp); err == nil {
		t.Error("WriteFiles overwrote existing files")
	}
	back, err := LoadCA(cf, kf)
	if err != nil {
		t.Fatal(err)
	}
	if !back.Cert.Equal(ca.Cert) {
		t.Error("loaded CA differs")
	}
	if _, err := LoadPool(cf); err != nil {
		t.Error(err)
	}
}

func TestParseFingerprint(t *testing.T) {
	c, err := SelfSigned(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	fp := Fingerprint(c.TLS.Certificate[0])
	want := strings.ReplaceAll(fp, ":", "")
	for _, tc := range []struct {
		name, in string
		ok       bool
	}{
		{"as printed", fp, true},
		{"no colons", want, true},
		{"lower case", strings.ToLower(fp), true},
		{"spaces around", " " + fp + "\n", true},
		{"short", fp[:len(fp)-3], false},
		{"not hex", strings.Replace(fp, fp[:2], "ZZ", 1), false},
		{"empty", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := ParseFingerprint(tc.in)
			if (err == nil) != tc.ok {
				t.Fatalf("err %v, want ok %v", err, tc.ok)
			}
			if tc.ok && strings.ToUpper(hex.EncodeToString(b)) != want {
				t.Fatalf("got %X, want %s", b, want)
			}
		})
	}
}
