// Package certs provisions the ECDSA P-256 certificates quiot uses: a private
// CA, device certificates issued by it (server and client auth), and the
// ephemeral self-signed certificate of `quiot broker --dev`.
package certs

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"strings"
	"time"
	"unicode/utf8"
)

// CA is a certificate authority: its certificate and private key.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
}

// Options tune certificate issuance. The zero value is usable.
type Options struct {
	// Validity is how long the certificate is valid; zero means 10 years for a
	// CA and 2 years for a device.
	Validity time.Duration
	// Hosts are DNS names and IP addresses put in the SAN; for device
	// certificates, zero means the device name plus localhost, 127.0.0.1 and ::1.
	Hosts []string
	// Now is the issuance clock; nil means time.Now. Pis without an RTC boot
	// in 1970: issue on a synced host.
	Now func() time.Time
}

func (o *Options) now() time.Time {
	if o != nil && o.Now != nil {
		return o.Now()
	}
	return time.Now()
}

func serial() (*big.Int, error) {
	s, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("couldn't make serial number: %w", err)
	}
	return s, nil
}

// NewCA makes a self-signed ECDSA P-256 CA with common name cn.
func NewCA(cn string, opts *Options) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("couldn't generate CA key: %w", err)
	}
	sn, err := serial()
	if err != nil {
		return nil, err
	}
	validity := 10 * 365 * 24 * time.Hour
	if opts != nil && opts.Validity > 0 {
		validity = opts.Validity
	}
	now := opts.now()
	tmpl := &x509.Certificate{
		SerialNumber:          sn,
		Subject:               pkix.Name{CommonName: cn, Organization: []string{"quiot"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("couldn't create CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("couldn't parse CA certificate: %w", err)
	}
	return &CA{Cert: cert, Key: key}, nil
}

// Pool returns a certificate pool holding only this CA.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// CertPEM returns the CA certificate in PEM form.
func (ca *CA) CertPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Cert.Raw})
}

// KeyPEM returns the CA private key in PEM (PKCS#8) form.
func (ca *CA) KeyPEM() ([]byte, error) { return keyPEM(ca.Key) }

func keyPEM(k *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, fmt.Errorf("couldn't marshal key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// Issued is a certificate issued by a CA, with its key, ready for TLS.
type Issued struct {
	TLS     tls.Certificate
	CertPEM []byte
	KeyPEM  []byte
}

// MaxNameLen is the longest device name (identity) in bytes.
const MaxNameLen = 128

// ErrBadName is returned (wrapped) by ValidateName and Issue for a name
// that cannot be an identity.
var ErrBadName = errors.New("bad identity name")

// ValidateName checks that name can be a device's identity: the broker
// puts it into ACL patterns (%u) and MQTT topics, so it must be one topic
// level that matches only itself. It must be non-empty, at most MaxNameLen
// bytes of valid UTF-8, not start with '$', and hold no '+', '#', '/',
// NUL or other control character. broker/auth applies the same rule to every identity, whether
// it comes from a certificate, a token or a password.
func ValidateName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: empty", ErrBadName)
	case len(name) > MaxNameLen:
		return fmt.Errorf("%w: %d bytes (at most %d)", ErrBadName, len(name), MaxNameLen)
	case !utf8.ValidString(name):
		return fmt.Errorf("%w %q: not valid UTF-8", ErrBadName, name)
	case name[0] == '$':
		return fmt.Errorf("%w %q: must not start with '$' (topics starting with '$' belong to the broker)", ErrBadName, name)
	}
	for _, r := range name {
		switch {
		case r == '+' || r == '#' || r == '/':
			return fmt.Errorf("%w %q: must not contain %q (an MQTT wildcard or level separator)", ErrBadName, name, r)
		case r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0):
			return fmt.Errorf("%w %q: must not contain control character %U", ErrBadName, name, r)
		}
	}
	return nil
}

// Issue makes a device certificate for name (the identity: CN and first SAN),
// valid for both server and client authentication.
func (ca *CA) Issue(name string, opts *Options) (*Issued, error) {
	if err := ValidateName(name); err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("couldn't generate device key: %w", err)
	}
	sn, err := serial()
	if err != nil {
		return nil, err
	}
	validity := 2 * 365 * 24 * time.Hour
	hosts := []string{name, "localhost", "127.0.0.1", "::1"}
	if opts != nil {
		if opts.Validity > 0 {
			validity = opts.Validity
		}
		if len(opts.Hosts) > 0 {
			hosts = opts.Hosts
		}
	}
	now := opts.now()
	tmpl := &x509.Certificate{
		SerialNumber: sn,
		Subject:      pkix.Name{CommonName: name, Organization: []string{"quiot"}},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(validity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	addHosts(tmpl, hosts)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return nil, fmt.Errorf("couldn't create device certificate: %w", err)
	}
	return issued(der, key)
}

func addHosts(tmpl *x509.Certificate, hosts []string) {
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if h != "" {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
}

func issued(der []byte, key *ecdsa.PrivateKey) (*Issued, error) {
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("couldn't parse certificate: %w", err)
	}
	kp, err := keyPEM(key)
	if err != nil {
		return nil, err
	}
	return &Issued{
		TLS:     tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: cert},
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  kp,
	}, nil
}

// SelfSigned makes an ephemeral self-signed ECDSA P-256 server certificate for
// hosts (default localhost, 127.0.0.1, ::1), as `quiot broker --dev` uses.
func SelfSigned(hosts []string, opts *Options) (*Issued, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("couldn't generate key: %w", err)
	}
	sn, err := serial()
	if err != nil {
		return nil, err
	}
	if len(hosts) == 0 {
		hosts = []string{"localhost", "127.0.0.1", "::1"}
	}
	validity := 30 * 24 * time.Hour
	if opts != nil && opts.Validity > 0 {
		validity = opts.Validity
	}
	now := opts.now()
	tmpl := &x509.Certificate{
		SerialNumber:          sn,
		Subject:               pkix.Name{CommonName: hosts[0], Organization: []string{"quiot dev"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	addHosts(tmpl, hosts)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("couldn't create self-signed certificate: %w", err)
	}
	return issued(der, key)
}

// Fingerprint returns the SHA-256 fingerprint of a DER certificate as
// colon-separated upper-case hex, as browsers and openssl print it.
func Fingerprint(der []byte) string {
	sum := sha256.Sum256(der)
	var b strings.Builder
	for i, c := range sum {
		if i > 0 {
			b.WriteByte(':')
		}
		fmt.Fprintf(&b, "%02X", c)
	}
	return b.String()
}

// ParseFingerprint parses a SHA-256 fingerprint as Fingerprint prints it:
// 64 hex digits, upper or lower case, with or without colons between the
// bytes. It returns the 32 bytes.
func ParseFingerprint(s string) ([]byte, error) {
	h := strings.ReplaceAll(strings.TrimSpace(s), ":", "")
	if len(h) != 2*sha256.Size {
		return nil, fmt.Errorf("SHA-256 fingerprint %q: %d hex digits, want %d", s, len(h), 2*sha256.Size)
	}
	b, err := hex.DecodeString(h)
	if err != nil {
		return nil, fmt.Errorf("SHA-256 fingerprint %q: not hex", s)
	}
	return b, nil
}

// LoadCA reads a CA certificate and key from PEM files.
func LoadCA(certFile, keyFile string) (*CA, error) {
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("couldn't load CA: %w", err)
	}
	key, ok := pair.PrivateKey.(*ecdsa.PrivateKey)
	if !ok {
		return nil, errors.New("couldn't load CA: key is not ECDSA")
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("couldn't parse CA certificate: %w", err)
	}
	if !cert.IsCA {
		return nil, fmt.Errorf("couldn't load CA: %s is not a CA certificate", certFile)
	}
	return &CA{Cert: cert, Key: key}, nil
}

// LoadPool reads PEM certificates (a CA bundle) into a pool.
func LoadPool(file string) (*x509.CertPool, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("couldn't read CA bundle: %w", err)
	}
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("couldn't read CA bundle: no PEM certificates in %s", file)
	}
	return p, nil
}

// WriteFiles writes cert and key PEM to certFile and keyFile (key mode 0600).
// It refuses to overwrite existing files.
func WriteFiles(certFile string, certPEM []byte, keyFile string, keyPEM []byte) error {
	for _, f := range []string{certFile, keyFile} {
		if _, err := os.Stat(f); err == nil {
			return fmt.Errorf("refusing to overwrite %s", f)
		}
	}
	if err := os.WriteFile(certFile, certPEM, 0o644); err != nil {
		return fmt.Errorf("couldn't write certificate: %w", err)
	}
	if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		return fmt.Errorf("couldn't write key: %w", err)
	}
	return nil
}
