package client_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/quiot/quiot/broker/brokertest"

	"github.com/quiot/quiot/device/client"
	"github.com/quiot/quiot/internal/netimpair"
	"github.com/quiot/quiot/internal/spool"
	"github.com/quiot/quiot/internal/testutil"
)

// BenchmarkSpoolDrain measures how fast a spooled publisher empties a
// backlog of 100 messages over a link with a 100 ms round trip (50 ms each
// way): one message per round trip (MQTT, HTTP/3 requests, window 1)
// against a window of 16 on HTTP/3's streamed publish.
//
//	go test -run '^$' -bench SpoolDrain -benchtime 1x ./device/client/
func BenchmarkSpoolDrain(b *testing.B) {
	const n = 100
	cases := []struct {
		name   string
		mode   string
		window int
	}{
		{"h3-request", "request", 0},
		{"h3-stream/window=1", "stream", 1},
		{"h3-stream/window=16", "stream", 16},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			pki := testutil.NewPKI(b)
			br := brokertest.Start(b, pki, nil)
			relay, err := netimpair.New(netimpair.Options{Upstream: br.Addr().String(),
				Up: netimpair.Direction{Delay: 50 * time.Millisecond}, Down: netimpair.Direction{Delay: 50 * time.Millisecond}})
			if err != nil {
				b.Fatal(err)
			}
			defer relay.Close()
			for b.Loop() {
				b.StopTimer()
				p, err := client.NewSpooled(client.Options{
					Broker: fmt.Sprintf("https://localhost:%d", relay.Addr().Port), RootCAs: pki.Pool(),
					PublishMode: c.mode, SpoolWindow: c.window, Logger: testutil.DiscardLogger(),
				}, spool.Options{Dir: b.TempDir()})
				if err != nil {
					b.Fatal(err)
				}
				// Warm up the connection, then queue the backlog.
				if _, err := p.Publish(context.Background(), "drain/x", []byte("warm"), client.PublishOptions{QoS: 1}); err != nil {
					b.Fatal(err)
				}
				if err := p.Drain(context.Background()); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				start := time.Now()
				for i := range n {
					if _, err := p.Publish(context.Background(), "drain/x", []byte(strconv.Itoa(i)), client.PublishOptions{QoS: 1}); err != nil {
						b.Fatal(err)
					}
				}
				if err := p.Drain(context.Background()); err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(n/time.Since(start).Seconds(), "msgs/s")
				b.StopTimer()
				p.Close()
				b.StartTimer()
			}
		})
	}
}
