package node

import (
	"context"
	"crypto/tls"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/auth"
	"github.com/quiot/quiot/broker/mqttquic"
	"github.com/quiot/quiot/internal/testutil"
)

// TestQUICRetryAboveReachesMQTT: HTTP.Limits.QUICRetryAbove (the broker's
// --quic-retry-above) applies to the MQTT-over-QUIC listener too, unless
// MQTT.Limits sets its own: with -1 every new MQTT-over-QUIC connection
// gets a Retry.
func TestQUICRetryAboveReachesMQTT(t *testing.T) {
	for _, tc := range []struct {
		name       string
		http, mqtt int
		retry      bool
	}{
		{"default", 0, 0, false},
		{"broker's -1", -1, 0, true},
		{"MQTT's own", -1, 5, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pki := testutil.NewPKI(t)
			c := Config{
				HTTP:   HTTP{Listen: "127.0.0.1:0", Limits: broker.Limits{QUICRetryAbove: tc.http}},
				MQTT:   MQTT{QUICAddr: "127.0.0.1:0", Limits: mqttquic.Limits{QUICRetryAbove: tc.mqtt}},
				TLS:    TLS{Certificates: []tls.Certificate{pki.Server.TLS}},
				Auth:   auth.Open(),
				Logger: testutil.DiscardLogger(),
			}
			n, err := New(c)
			if err != nil {
				t.Fatal(err)
			}
			if err := n.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = n.Close(context.Background()) })
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			tc2 := &tls.Config{RootCAs: pki.Pool(), ServerName: "localhost", NextProtos: []string{mqttquic.ALPN}}
			qc, err := quic.DialAddr(ctx, n.Addrs().MQTTQUIC.String(), tc2, &quic.Config{})
			if err != nil {
				t.Fatal(err)
			}
			_ = qc.CloseWithError(0, "")
			if got := n.mqtt.Security().QUICRetries; (got > 0) != tc.retry {
				t.Errorf("MQTT-over-QUIC Retries = %d, want a Retry: %v", got, tc.retry)
			}
		})
	}
}
