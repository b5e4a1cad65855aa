package broker_test

import (
	"context"
	"crypto/tls"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/quiot/quiot/broker/brokertest"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
)

// TestListenersRefuseTLS12: every listener speaks TLS 1.3 only (issue 9.7:
// the TCP fallback accepted TLS 1.2). QUIC cannot carry anything older (RFC
// 9001); its case checks that a TLS 1.2-only client gets no connection.
func TestListenersRefuseTLS12(t *testing.T) {
	b := brokertest.Start(t, nil, nil)
	tls12 := &tls.Config{RootCAs: b.PKI.Pool(), ServerName: "localhost", MaxVersion: tls.VersionTLS12}
	d := &net.Dialer{Timeout: 30 * time.Second}
	t.Run("tcp", func(t *testing.T) {
		for _, alpn := range []string{"h2", "http/1.1"} {
			c := tls12.Clone()
			c.NextProtos = []string{alpn}
			conn, err := tls.DialWithDialer(d, "tcp", b.TCPAddr().String(), c)
			if err == nil {
				conn.Close()
				t.Fatalf("%s: TLS 1.2 handshake accepted", alpn)
			}
			if !strings.Contains(err.Error(), "protocol version") {
				t.Fatalf("%s: %v, want a protocol version refusal", alpn, err)
			}
		}
		conn, err := tls.DialWithDialer(d, "tcp", b.TCPAddr().String(), &tls.Config{RootCAs: b.PKI.Pool(), ServerName: "localhost"})
		if err != nil {
			t.Fatalf("TLS 1.3: %v", err)
		}
		defer conn.Close()
		if v := conn.ConnectionState().Version; v != tls.VersionTLS13 {
			t.Fatalf("negotiated %x, want TLS 1.3", v)
		}
	})
	t.Run("h3", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c := tls12.Clone()
		c.NextProtos = []string{http3.NextProtoH3}
		qc, err := quic.DialAddr(ctx, b.Addr().String(), c, nil)
		if err == nil {
			_ = qc.CloseWithError(0, "")
			t.Fatal("QUIC connection with a TLS 1.2-only client")
		}
	})
}
