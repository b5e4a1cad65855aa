// Package brokertest starts an HTTP/3 pub-sub broker (package broker) on
// loopback for a test and closes it at the test's end, as net/http/httptest
// does for an HTTP server. It lives next to the broker so that internal/
// never imports upward; certificates and clients for tests stay in
// internal/testutil.
package brokertest

import (
	"crypto/tls"
	"testing"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/internal/testutil"
)

// Broker is a broker running for a test.
type Broker struct {
	*broker.Broker
	PKI *testutil.PKI
	// URL is https://127.0.0.1:PORT.
	URL string
}

// Start starts a broker on 127.0.0.1:0 with the PKI's server
// certificate (opts may be nil; Listen, Certificates and Logger are filled in
// when empty), waits until /healthz answers over HTTP/3, and closes it at the
// end of the test.
func Start(t testing.TB, pki *testutil.PKI, opts *broker.Options) *Broker {
	t.Helper()
	if pki == nil {
		pki = testutil.NewPKI(t)
	}
	var o broker.Options
	if opts != nil {
		o = *opts
	}
	if o.Listen == "" {
		o.Listen = "127.0.0.1:0"
	}
	if len(o.Certificates) == 0 && o.CertFile == "" {
		o.Certificates = []tls.Certificate{pki.Server.TLS}
	}
	if o.Logger == nil {
		o.Logger = testutil.DiscardLogger()
	}
	b, err := broker.New(&o)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	tb := &Broker{Broker: b, PKI: pki, URL: "https://" + b.Addr().String()}
	testutil.WaitReady(t, tb.URL, pki.Pool())
	return tb
}
