package mqttquic_test

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quiot/quiot/broker/brokertest"

	"github.com/quic-go/quic-go"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/auth"
	"github.com/quiot/quiot/broker/mqttquic"
	"github.com/quiot/quiot/broker/mqttquic/mqtttest"
	"github.com/quiot/quiot/device/client"
	"github.com/quiot/quiot/internal/testutil"
)

// startTLSServer starts a server of o (mqtttest.Start's defaults) with an
// MQTT over TLS listener (TLSAddr default 127.0.0.1:0) asking for client
// certificates of the PKI's CA.
func startTLSServer(t *testing.T, pki *testutil.PKI, o mqttquic.Options) *mqttquic.Server {
	t.Helper()
	if o.TLSAddr == "" {
		o.TLSAddr = "127.0.0.1:0"
	}
	o.ClientCAs = pki.Pool()
	return mqtttest.Start(t, pki, o)
}

// TestMQTTSRoundTrip: mqtts:// (MQTT over TLS 1.3) carries a publish to a
// subscriber, through the quiot client.
func TestMQTTSRoundTrip(t *testing.T) {
	pki := testutil.NewPKI(t)
	s := startTLSServer(t, pki, mqttquic.Options{})
	_, port, _ := net.SplitHostPort(s.TLSAddr())
	newC := func() client.Client {
		c, err := client.New(client.Options{Broker: "mqtts://localhost:" + port, RootCAs: pki.Pool(), Logger: testutil.DiscardLogger()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	sub, pub := newC(), newC()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	subscribed := make(chan struct{})
	got := make(chan client.Message, 1)
	var once sync.Once
	go func() {
		_ = sub.Subscribe(client.WithSubscribed(ctx, func() { once.Do(func() { close(subscribed) }) }), "tls/#", 0, func(m client.Message) {
			select {
			case got <- m:
			default:
			}
		})
	}()
	select {
	case <-subscribed:
	case <-ctx.Done():
		t.Fatal("timeout waiting for the subscription")
	}
	if _, err := pub.Publish(ctx, "tls/x", []byte("over tls"), client.PublishOptions{QoS: 1}); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-got:
		if m.Topic != "tls/x" || string(m.Payload) != "over tls" {
			t.Fatalf("got %+v", m)
		}
	case <-ctx.Done():
		t.Fatal("timeout waiting for the message")
	}
	if h := pub.Stats().Handshake; h <= 0 {
		t.Fatalf("handshake %v", h)
	}
}

// TestMQTTListenersRefuseTLS12: MQTT over TLS and MQTT over QUIC accept
// TLS 1.3 only. (QUIC cannot carry anything older, RFC 9001; the QUIC case
// checks that a client limited to TLS 1.2 gets no connection.)
func TestMQTTListenersRefuseTLS12(t *testing.T) {
	pki := testutil.NewPKI(t)
	s := startTLSServer(t, pki, mqttquic.Options{})
	tls12 := &tls.Config{RootCAs: pki.Pool(), ServerName: "localhost", MaxVersion: tls.VersionTLS12}
	t.Run("tls", func(t *testing.T) {
		d := &net.Dialer{Timeout: 30 * time.Second}
		c, err := tls.DialWithDialer(d, "tcp", s.TLSAddr(), tls12)
		if err == nil {
			c.Close()
			t.Fatal("TLS 1.2 handshake accepted")
		}
		if !strings.Contains(err.Error(), "protocol version") {
			t.Fatalf("error %v, want a protocol version refusal", err)
		}
		ok := &tls.Config{RootCAs: pki.Pool(), ServerName: "localhost"}
		c13, err := tls.DialWithDialer(d, "tcp", s.TLSAddr(), ok)
		if err != nil {
			t.Fatalf("TLS 1.3: %v", err)
		}
		if v := c13.ConnectionState().Version; v != tls.VersionTLS13 {
			t.Fatalf("version %x", v)
		}
		c13.Close()
	})
	t.Run("quic", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c := tls12.Clone()
		c.NextProtos = []string{"mqtt"}
		qc, err := quic.DialAddr(ctx, s.QUICAddr().String(), c, nil)
		if err == nil {
			_ = qc.CloseWithError(0, "")
			t.Fatal("QUIC connection with a TLS 1.2-only client")
		}
	})
}

// TestPlainTCPWarning: plain MQTT/TCP on a non-loopback address is warned
// about at start; on loopback it is not.
func TestPlainTCPWarning(t *testing.T) {
	pki := testutil.NewPKI(t)
	for _, tt := range []struct {
		addr string
		warn bool
	}{{"127.0.0.1:0", false}, {":0", true}} {
		t.Run(tt.addr, func(t *testing.T) {
			var buf testutil.SyncBuffer
			startTLSServer(t, pki, mqttquic.Options{TCPAddr: tt.addr, Logger: slog.New(slog.NewTextHandler(&buf, nil))})
			if got := strings.Contains(buf.String(), "plain MQTT over TCP listens on a non-loopback address"); got != tt.warn {
				t.Fatalf("warning logged %v, want %v; log:\n%s", got, tt.warn, buf.String())
			}
		})
	}
}

func TestIsLoopbackAddr(t *testing.T) {
	for _, tt := range []struct {
		addr string
		want bool
	}{
		{"127.0.0.1:1883", true}, {"[::1]:1883", true}, {"localhost:1883", true}, {"127.3.4.5:1", true},
		{":1883", false}, {"0.0.0.0:1883", false}, {"[::]:1883", false}, {"192.168.1.2:1883", false}, {"pi.local:1883", false},
	} {
		if got := mqttquic.IsLoopbackAddr(tt.addr); got != tt.want {
			t.Errorf("IsLoopbackAddr(%q) = %v, want %v", tt.addr, got, tt.want)
		}
	}
}

// TestMQTTSClientCertificateIdentity: over mqtts:// a verified client
// certificate's CN is the identity the ACL sees, as over QUIC; without one
// an ACL that admits no anonymous client refuses the connection.
func TestMQTTSClientCertificateIdentity(t *testing.T) {
	pki := testutil.NewPKI(t)
	acl, err := auth.Parse([]byte("[[user]]\nname = \"dev-1\"\npublish = [\"d/dev-1/#\"]\nsubscribe = [\"d/dev-1/#\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	b := brokertest.Start(t, pki, &broker.Options{Auth: acl})
	s := startTLSServer(t, pki, mqttquic.Options{QUICAddr: "off", Broker: b.Broker})
	_, port := splitPort(t, s.TLSAddr())
	publish := func(cert *tls.Certificate, topic string) error {
		c, err := client.New(client.Options{Broker: "mqtts://localhost:" + port, RootCAs: pki.Pool(), Certificate: cert, Logger: testutil.DiscardLogger()})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, err = c.Publish(ctx, topic, []byte("x"), client.PublishOptions{QoS: 1})
		return err
	}
	cert := pki.Client(t, "dev-1")
	if err := publish(&cert, "d/dev-1/t"); err != nil {
		t.Fatalf("dev-1 publishing its own topic: %v", err)
	}
	if err := publish(&cert, "d/dev-2/t"); err == nil {
		t.Fatal("dev-1 published to dev-2's topic")
	}
	if err := publish(nil, "d/dev-1/t"); err == nil {
		t.Fatal("anonymous client published")
	}
	if st := b.Stats(); st.LastSeq != 1 {
		t.Fatalf("%d messages accepted, want 1", st.LastSeq)
	}
}

func splitPort(t *testing.T, addr string) (string, string) {
	t.Helper()
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	return h, p
}
