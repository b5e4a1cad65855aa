package client_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/qlogwriter"

	"github.com/quiot/quiot/broker/mqttquic"
	"github.com/quiot/quiot/broker/mqttquic/mqtttest"
	"github.com/quiot/quiot/device/client"
	"github.com/quiot/quiot/internal/testutil"
)

// startMQTT starts an MQTT over QUIC broker on loopback (mqtttest.Start);
// mods change its options first (a TCP listener, for example).
func startMQTT(t *testing.T, pki *testutil.PKI, mods ...func(*mqttquic.Options)) *mqttquic.Server {
	t.Helper()
	var o mqttquic.Options
	for _, m := range mods {
		m(&o)
	}
	return mqtttest.Start(t, pki, o)
}

func quicPort(s *mqttquic.Server) string {
	a := s.QUICAddr().String()
	return a[strings.LastIndex(a, ":")+1:]
}

// TestMQTTPacketConnAndTracer: the client's QUIC connections run on
// Options.PacketConn and carry Options.Tracer.
func TestMQTTPacketConnAndTracer(t *testing.T) {
	pki := testutil.NewPKI(t)
	s := startMQTT(t, pki)
	pc := testutil.ListenCounting(t)
	var traced atomic.Int64
	c, err := client.New(client.Options{
		Broker:     "mqtt-quic://localhost:" + quicPort(s),
		RootCAs:    pki.Pool(),
		PacketConn: pc,
		Tracer: func(context.Context, bool, quic.ConnectionID) qlogwriter.Trace {
			traced.Add(1)
			return nil
		},
		Logger: testutil.DiscardLogger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Publish(ctx, "pc/x", []byte("hi"), client.PublishOptions{QoS: 1}); err != nil {
		t.Fatal(err)
	}
	bytes, dgrams := pc.Total()
	if dgrams == 0 || bytes == 0 {
		t.Fatalf("counting socket saw %d bytes in %d datagrams", bytes, dgrams)
	}
	if traced.Load() == 0 {
		t.Fatal("tracer not installed")
	}
	if h := c.Stats().Handshake; h <= 0 {
		t.Fatalf("handshake %v", h)
	}
}

func TestMQTTConnectErrors(t *testing.T) {
	pki := testutil.NewPKI(t)
	s := startMQTT(t, pki)
	port := quicPort(s)
	tests := []struct {
		name string
		opts client.Options
		want string
	}{
		{"untrusted certificate", client.Options{Broker: "mqtt-quic://localhost:" + port}, "certificate"},
		{"nothing listening, no reconnect", client.Options{Broker: "mqtt://127.0.0.1:1", RootCAs: pki.Pool()}, "refused"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.opts.Logger = testutil.DiscardLogger()
			c, err := client.New(tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			_, err = c.Publish(ctx, "e/x", []byte("hi"), client.PublishOptions{QoS: 1})
			if err == nil || !strings.Contains(err.Error(), tt.want) || errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("publish: %v, want an error mentioning %q (not a timeout)", err, tt.want)
			}
		})
	}
}
