package bridge

import (
	"context"
	"crypto/tls"
	"net"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/autopaho"

	"github.com/quiot/quiot/internal/quictune"
)

// TestQUICDialHoldsProbes: once the bridge knows the round trip of its
// last MQTT over QUIC connection, a new dial sends its first handshake
// flight (and, with lean's first_flight_copies, one copy of it) and holds
// quic-go's probes back for 1.5 x that round trip; the first dial (no
// round trip known) probes as quic-go does.
func TestQUICDialHoldsProbes(t *testing.T) {
	for _, tc := range []struct {
		name     string
		rtt      time.Duration
		noCopies bool // first_flight_copies = false
		min, max int  // long-header datagrams the silent upstream gets
	}{
		{"first dial: quic-go's probes", 0, false, 3, 1 << 30},
		{"last connection's RTT 2s: one flight and its copy", 2 * time.Second, false, 2, 4},
		{"last connection's RTT 2s, no first-flight copies: one flight", 2 * time.Second, true, 1, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			silent, err := net.ListenPacket("udp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer silent.Close()
			var got atomic.Int64
			go func() {
				b := make([]byte, 2048)
				for {
					n, _, err := silent.ReadFrom(b)
					if err != nil {
						return
					}
					if n > 0 && b[0]&0x80 != 0 {
						got.Add(1)
					}
				}
			}()
			tune := quictune.Lean()
			tune.FirstFlightCopies = !tc.noCopies
			br := &Bridge{quic: tune, tlsCfg: &tls.Config{ServerName: "localhost", NextProtos: []string{mqttALPN}}}
			br.quicRTT.Store(int64(tc.rtt))
			// quic-go's probes come 200 ms, 600 ms and 1.4 s after the
			// first flight; a hold of 3 s lets none of them through.
			ctx, cancel := context.WithTimeout(context.Background(), 1600*time.Millisecond)
			defer cancel()
			u := &url.URL{Scheme: "mqtt-quic", Host: silent.LocalAddr().String()}
			if _, err := br.dialQUIC(ctx, autopaho.ClientConfig{}, u); err == nil {
				t.Fatal("dial of a silent upstream succeeded")
			}
			if n := int(got.Load()); n < tc.min || n > tc.max {
				t.Fatalf("the upstream got %d handshake datagrams, want %d to %d", n, tc.min, tc.max)
			}
		})
	}
}
