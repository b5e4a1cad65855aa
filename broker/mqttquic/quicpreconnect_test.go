package mqttquic

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"testing"

	"github.com/quic-go/quic-go"

	"github.com/quiot/quiot/internal/quictune"
	"github.com/quiot/quiot/internal/streamconn"
)

// dialQUICFrom completes an MQTT-over-QUIC handshake with s from the
// loopback address from, opening no stream (a client whose stream sends
// nothing: the broker never sees it).
func dialQUICFrom(t *testing.T, s *Server, pki *testPKI, from string) (*quic.Conn, error) {
	t.Helper()
	pc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP(from)})
	if err != nil {
		t.Fatal(err)
	}
	tr := &quic.Transport{Conn: pc}
	t.Cleanup(func() { _ = tr.Close(); _ = pc.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), rawTimeout)
	defer cancel()
	tc := &tls.Config{RootCAs: pki.Pool(), ServerName: "localhost", NextProtos: []string{ALPN}}
	qc, err := tr.Dial(ctx, s.QUICAddr(), tc, &quic.Config{})
	if err == nil {
		t.Cleanup(func() { _ = qc.CloseWithError(0, "") })
	}
	return qc, err
}

// TestQUICSilentStreamPerAddr: MQTT-over-QUIC connections whose
// handshake completed but whose stream sent nothing count against
// Limits.MaxPreConnectPerAddr (--mqtt-max-preconnect-per-addr) like any
// connection without CONNECT: one more from the same address is refused
// (closed with CodeRefused once its handshake completed; with its address
// validated by a Retry, refused at its first packet) and counted in
// RefusedPreConnect (quiot_mqtt_refused_preconnect_total), while another address still connects. Before, such
// connections were counted in no per-address bound (only the listener's
// 10 s stream timeout).
func TestQUICSilentStreamPerAddr(t *testing.T) {
	for _, tc := range []struct {
		name  string
		retry int  // Limits.QUICRetryAbove
		early bool // 0-RTT allowed: connections come before their handshake completes
	}{
		{"handshake", 0, false},
		{"validated", -1, false}, // every attempt proves its address first
		{"early", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pki := newPKI(t)
			s := startServer(t, pki, func(o *Options) {
				pr := quictune.Lean()
				pr.Allow0RTT = tc.early
				o.Tuning = pr
				o.TCPAddr = "127.0.0.1:0"
				o.Limits.MaxPreConnectPerAddr = 2
				o.Limits.QUICRetryAbove = tc.retry
			})
			for range 2 {
				if _, err := dialQUICFrom(t, s, pki, "127.0.0.1"); err != nil {
					t.Fatal(err)
				}
			}
			waitForCond(t, func() bool { return s.compat.pre.held() == 2 }, "two silent QUIC connections counted")
			qc, err := dialQUICFrom(t, s, pki, "127.0.0.1")
			if err == nil {
				<-qc.Context().Done() // closed by the broker
				err = context.Cause(qc.Context())
				var ae *quic.ApplicationError
				if !errors.As(err, &ae) || ae.ErrorCode != streamconn.CodeRefused {
					t.Fatalf("third connection from the address: closed with %v, want code %d", err, streamconn.CodeRefused)
				}
			} else {
				var te *quic.TransportError
				if !errors.As(err, &te) || te.ErrorCode != quic.ConnectionRefused {
					t.Fatalf("third connection from the address: %v, want CONNECTION_REFUSED", err)
				}
			}
			// At its first packet, each Initial the client sent before it
			// read the refusal is refused and counted.
			if st := s.Security(); st.RefusedPreConnect == 0 || tc.retry == 0 && st.RefusedPreConnect != 1 {
				t.Errorf("RefusedPreConnect = %d, want 1 (at least 1 with a Retry)", st.RefusedPreConnect)
			}
			// Another address connects; the silent ones still count.
			other, err := dialQUICFrom(t, s, pki, "127.0.0.2")
			if err != nil {
				t.Fatal(err)
			}
			st, err := other.OpenStreamSync(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			newRawConn(t, streamconn.New(other, st, true), 5).connect("other", true, nil)
			waitForCond(t, func() bool { return s.compat.pre.held() == 2 }, "the connected client released its count")
		})
	}
}
