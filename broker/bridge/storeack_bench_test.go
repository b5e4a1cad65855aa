package bridge

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"

	"github.com/eclipse/paho.golang/paho"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/brokertest"
	"github.com/quiot/quiot/broker/mqttquic"
	"github.com/quiot/quiot/broker/mqttquic/mqtttest"
	"github.com/quiot/quiot/internal/testutil"
)

// BenchmarkStorePublish measures what a bridge's store costs the edge's
// publishers: publishes on an out topic through the broker's API (the
// path MQTT and HTTP/3 publishes take), one at a time and from 16
// publishers at once, with the upstream away (every message stays in
// the store). A QoS 1 publish returns once the store has the message
// (docs/bridge.md, "Going up: QoS, order, the queue"); QoS 0 does not
// wait for it: beyond the queue's bound (queue_messages) the oldest wait
// dropped (reported as dropped, the messages each run lost).
func BenchmarkStorePublish(b *testing.B) {
	pki := testutil.NewPKI(b)
	edge := brokertest.Start(b, pki, nil)
	br := storeBridge(b, edge.Broker, "")
	if err := br.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = br.Close(context.Background()) })
	payload := make([]byte, 64)
	for _, qos := range []byte{0, 1} {
		for _, pubs := range []int{1, 16} {
			b.Run(fmt.Sprintf("qos=%d/publishers=%d", qos, pubs), func(b *testing.B) {
				ctx := context.Background()
				dropped0 := br.Stats().Dropped
				b.ReportAllocs()
				b.ResetTimer()
				var wg sync.WaitGroup
				for p := range pubs {
					wg.Go(func() {
						m := broker.Message{Topic: fmt.Sprintf("t/%d", p), Payload: payload, QoS: qos, Origin: "bench"}
						for i := p; i < b.N; i += pubs {
							if _, err := edge.Broker.Publish(ctx, m); err != nil {
								b.Error(err)
								return
							}
						}
					})
				}
				wg.Wait()
				b.StopTimer()
				b.ReportMetric(float64(br.Stats().Dropped-dropped0), "dropped")
				// Let the store catch up (QoS 0 does not wait for it).
				if err := br.WaitFor(ctx, func(s Stats) bool { return s.QueuedBytes == 0 }); err != nil {
					b.Fatal(err)
				}
			})
		}
	}
}

// BenchmarkStorePublishMQTT measures a QoS 1 publish of one MQTT client
// over TCP on loopback (PUBLISH to PUBACK), to an out topic of a bridge
// with a store (the upstream away), and to a topic no bridge forwards.
func BenchmarkStorePublishMQTT(b *testing.B) {
	pki := testutil.NewPKI(b)
	edge := brokertest.Start(b, pki, nil)
	ms := mqtttest.Start(b, pki, mqttquic.Options{QUICAddr: "off", TCPAddr: "127.0.0.1:0", Broker: edge.Broker})
	br := storeBridge(b, edge.Broker, "")
	if err := br.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = br.Close(context.Background()) })
	ctx := context.Background()
	conn, err := net.Dial("tcp", ms.TCPAddr())
	if err != nil {
		b.Fatal(err)
	}
	c := paho.NewClient(paho.ClientConfig{Conn: conn})
	if _, err := c.Connect(ctx, &paho.Connect{ClientID: "bench", CleanStart: true, KeepAlive: 30}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Disconnect(&paho.Disconnect{}) })
	payload := make([]byte, 64)
	for _, tc := range []struct{ name, topic string }{{"bridged", "t/x"}, {"not-bridged", "u/x"}} {
		b.Run(tc.name, func(b *testing.B) {
			dropped0 := br.Stats().Dropped
			for b.Loop() {
				if _, err := c.Publish(ctx, &paho.Publish{QoS: 1, Topic: tc.topic, Payload: payload}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(br.Stats().Dropped-dropped0), "dropped")
		})
	}
}
