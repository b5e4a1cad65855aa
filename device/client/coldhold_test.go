package client_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/quiot/quiot/device/client"
	"github.com/quiot/quiot/internal/quictune"
	"github.com/quiot/quiot/internal/testutil"
)

// TestColdHandshakeProbesHeld: a client that knows no RTT to the broker
// (a first connection, no handshake_rtt) sends its first Initial and then
// nothing until quic-go's probe at 3 s, instead of probes at 200 ms,
// 600 ms and 1.4 s: on a 20 kbit/s uplink those were 2.9 s of airtime
// ahead of its Finished. The broker here never answers; the test waits
// for the first datagram after the first flight.
func TestColdHandshakeProbesHeld(t *testing.T) {
	for _, tc := range []struct {
		name, scheme string
		profile      *quictune.Profile
	}{
		{"HTTP/3, lean", "https", quictune.Lean()},
		{"HTTP/3, default", "https", quictune.Default()},
		{"MQTT over QUIC, lean", "mqtt-quic", quictune.Lean()},
		{"MQTT over QUIC, default", "mqtt-quic", quictune.Default()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			hole, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
			if err != nil {
				t.Fatal(err)
			}
			defer hole.Close()
			c, err := client.New(client.Options{
				Broker: tc.scheme + "://" + hole.LocalAddr().String(), Insecure: true,
				Tuning: tc.profile, Logger: testutil.DiscardLogger(),
			})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go func() { _, _ = c.Publish(ctx, "wake/up", []byte("hi"), client.PublishOptions{QoS: 1}) }()
			// Failing case only: quic-go gives up at its handshake timeout.
			_ = hole.SetReadDeadline(time.Now().Add(30 * time.Second))
			buf := make([]byte, 2048)
			var first time.Time
			for {
				if _, _, err := hole.ReadFrom(buf); err != nil {
					t.Fatalf("no probe after the first flight: %v", err)
				}
				now := time.Now()
				if first.IsZero() {
					first = now
					continue
				}
				gap := now.Sub(first)
				if gap < 100*time.Millisecond {
					continue // the rest of the first flight
				}
				// Held: quic-go's probe at 3 s; without the hold, 200 ms.
				if gap < time.Second {
					t.Fatalf("a probe %v after the first flight", gap)
				}
				return
			}
		})
	}
}
