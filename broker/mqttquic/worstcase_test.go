package mqttquic

import (
	"context"
	"crypto/tls"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/quiot/quiot/broker"
)

// Worst-case memory a client can make the MQTT side hold within its bounds
// (docs/security.md, "What a client can cost"). Heap figures are after a
// GC, for the whole test process (the client's side of each connection
// included).

func heapInuse() int64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapInuse)
}

// BenchmarkSilentPreConnect: heap and goroutines per connection that
// never sends CONNECT (TCP; TLS with and without a finished handshake),
// 64 of them (--mqtt-max-preconnect-per-addr's default) from one address.
func BenchmarkSilentPreConnect(b *testing.B) {
	const n = 64
	pki := newPKI(b)
	s := startServer(b, pki, func(o *Options) {
		o.TCPAddr = "127.0.0.1:0"
		o.TLSAddr = "127.0.0.1:0"
		o.Limits.ConnectTimeout = time.Hour
		o.Limits.MaxPreConnectPerAddr = n
	})
	for _, tr := range []string{"tcp", "tls-raw", "tls"} {
		b.Run(tr, func(b *testing.B) {
			for range b.N {
				before, g := heapInuse(), runtime.NumGoroutine()
				var conns []net.Conn
				for range n {
					var c net.Conn
					var err error
					switch tr {
					case "tcp":
						c, err = net.Dial("tcp", s.TCPAddr())
					case "tls-raw":
						c, err = net.Dial("tcp", s.TLSAddr())
					case "tls":
						c, err = tls.Dial("tcp", s.TLSAddr(), &tls.Config{RootCAs: pki.Pool(), ServerName: "localhost"})
					}
					if err != nil {
						b.Fatal(err)
					}
					conns = append(conns, c)
				}
				waitForCond(b, func() bool { return s.compat.pre.held() == n }, "every connection counted")
				b.ReportMetric(float64(heapInuse()-before)/n, "heap-B/conn")
				b.ReportMetric(float64(runtime.NumGoroutine()-g)/n, "goroutines/conn")
				for _, c := range conns {
					_ = c.Close()
				}
				waitForCond(b, func() bool { return s.compat.pre.held() == 0 }, "every connection released")
			}
		})
	}
}

// BenchmarkStalledMQTTSubscriber: heap held by one MQTT subscriber (TCP,
// QoS 1) that never reads while 100 messages of 256 KiB are published to
// its filter: bounded by --mqtt-max-queued-bytes (4 MiB) plus what mochi's
// writer and the socket buffers hold.
func BenchmarkStalledMQTTSubscriber(b *testing.B) {
	payload := []byte(strings.Repeat("x", 256<<10))
	for range b.N {
		br, _ := startSecure(b, aclFile, nil)
		c := mustConnect(b, br.mqtt, br.pki, "tcp", connectOpts{id: "stalled", clean: true})
		if got := c.subscribe("public/#"); got[0] != 1 {
			b.Fatalf("SUBACK %x", got)
		}
		before := heapInuse()
		for range 100 {
			if _, err := br.h3.Broker.Publish(context.Background(), broker.Message{Topic: "public/big", Payload: payload, QoS: 1}); err != nil {
				b.Fatal(err)
			}
		}
		waitForCond(b, func() bool {
			st := br.mqtt.Security()
			return st.BridgeQueueBytes == 0 && st.DroppedQueueFull+st.DroppedInflight > 0
		}, "the bridge to deliver or drop every message")
		st := br.mqtt.Security()
		b.ReportMetric(float64(heapInuse()-before), "heap-B")
		b.ReportMetric(float64(st.QueuedBytes), "queued-B")
		b.ReportMetric(float64(st.DroppedQueueFull+st.DroppedInflight), "dropped")
	}
}
