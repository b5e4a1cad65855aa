package client_test

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quiot/quiot/broker/brokertest"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/device/client"
	"github.com/quiot/quiot/internal/testutil"
)

// BenchmarkH3ClientPublish measures this client's publish paths against the
// in-process broker (QoS 1, 128-byte payloads): one request per message vs
// the streamed publish, one at a time (each waits for its ack, as `quiot
// pub` does by default) and 16 in flight. It reports messages per second
// and UDP bytes and datagrams per message counted at the client's socket.
func BenchmarkH3ClientPublish(b *testing.B) {
	payload := bytes.Repeat([]byte("x"), 128)
	for _, mode := range []string{"request", "stream"} {
		for _, inflight := range []int{1, 16} {
			b.Run(fmt.Sprintf("%s/inflight=%d", mode, inflight), func(b *testing.B) {
				br := brokertest.Start(b, nil, &broker.Options{Limits: broker.Limits{HistoryPerTopic: -1}})
				cc := testutil.ListenCounting(b)
				c, err := client.New(client.Options{Broker: br.URL, RootCAs: br.PKI.Pool(), PacketConn: cc, PublishMode: mode, Logger: testutil.DiscardLogger()})
				if err != nil {
					b.Fatal(err)
				}
				defer c.Close()
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				opts := client.PublishOptions{QoS: 1}
				if _, err := c.Publish(ctx, "bench/x", payload, opts); err != nil { // handshake outside the measurement
					b.Fatal(err)
				}
				cc.Reset()
				var next atomic.Int64
				var wg sync.WaitGroup
				b.ResetTimer()
				t0 := time.Now()
				for range inflight {
					wg.Go(func() {
						for next.Add(1) <= int64(b.N) {
							if _, err := c.Publish(ctx, "bench/x", payload, opts); err != nil {
								b.Error(err)
								return
							}
						}
					})
				}
				wg.Wait()
				el := time.Since(t0)
				b.StopTimer()
				by, dg := cc.Total()
				b.ReportMetric(float64(b.N)/el.Seconds(), "msgs/s")
				b.ReportMetric(float64(by)/float64(b.N), "wire-B/msg")
				b.ReportMetric(float64(dg)/float64(b.N), "datagrams/msg")
			})
		}
	}
}
