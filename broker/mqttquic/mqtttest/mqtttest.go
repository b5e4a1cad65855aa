// Package mqtttest is a test helper: an MQTT broker (broker/mqttquic)
// started on loopback for a test and closed at its end.
//
// It lives next to the server it starts (as net/http/httptest does) and
// apart from broker/mqttquic itself, whose internal tests import
// internal/testutil.
package mqtttest

import (
	"crypto/tls"
	"fmt"
	"net"
	"testing"

	"github.com/quiot/quiot/broker/mqttquic"
	"github.com/quiot/quiot/internal/testutil"
)

// Start starts a server of o and closes it at the end of the test. Empty
// fields get test defaults: QUICAddr 127.0.0.1:0, TLS the PKI's server
// certificate, Logger one that discards. Other listeners (TLSAddr, TCPAddr)
// are off unless o names them.
func Start(t testing.TB, pki *testutil.PKI, o mqttquic.Options) *mqttquic.Server {
	t.Helper()
	if o.QUICAddr == "" {
		o.QUICAddr = "127.0.0.1:0"
	}
	if o.TLS == nil {
		o.TLS = &tls.Config{Certificates: []tls.Certificate{pki.Server.TLS}}
	}
	if o.Logger == nil {
		o.Logger = testutil.DiscardLogger()
	}
	s, err := mqttquic.New(o)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// QUICURL is the mqtt-quic:// URL of s's QUIC listener, for the host name
// of the PKI's server certificate (localhost).
func QUICURL(s *mqttquic.Server) string {
	return fmt.Sprintf("mqtt-quic://localhost:%d", s.QUICAddr().(*net.UDPAddr).Port)
}
