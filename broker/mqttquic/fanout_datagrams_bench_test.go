package mqttquic

import (
	"sync"
	"testing"
	"time"

	"github.com/quiot/quiot/device/client"
	"github.com/quiot/quiot/internal/testutil"
)

// BenchmarkFanoutDatagrams is BenchmarkFanout (1 publisher -> 100 MQTT
// over QUIC subscribers, 128 B, QoS 0, one process) with every client on a
// counting UDP socket, reporting the datagrams the subscribers received
// (the broker's deliveries, with their acknowledgements) and sent (their
// acknowledgements) per delivery, to set beside the HTTP/3 broker's
// BenchmarkFanoutBatch: how many messages share a datagram decides much of
// quic-go's CPU.
func BenchmarkFanoutDatagrams(b *testing.B) {
	const nsubs = 100
	br := startBridged(b, nil)
	url := quicURL(br.mqtt)
	var mu sync.Mutex
	var socks []*testutil.CountingConn // subscribers first, then the publisher
	mk := func(tb testing.TB) client.Client {
		cc := testutil.ListenCounting(tb)
		mu.Lock()
		socks = append(socks, cc)
		mu.Unlock()
		return newClient(tb, br.pki, url, func(o *client.Options) {
			o.Reconnect = true
			o.MaxBackoff = time.Second
			o.PacketConn = cc
		})
	}
	var cpu0 time.Duration
	b.ResetTimer()
	el := fanout(b, mk, nsubs, b.N, func() {
		for _, s := range socks {
			s.Reset()
		}
		cpu0 = cpuTime()
	})
	cpu := cpuTime() - cpu0
	b.StopTimer()
	var in, out uint64
	for _, s := range socks[:nsubs] {
		in += s.DatagramsIn.Load()
		out += s.DatagramsOut.Load()
	}
	deliveries := float64(b.N) * nsubs
	b.ReportMetric(deliveries/el.Seconds(), "deliveries/s")
	b.ReportMetric(float64(cpu.Nanoseconds())/deliveries, "cpu-ns/delivery")
	b.ReportMetric(float64(in)/deliveries, "sub-dgrams-in/delivery")
	b.ReportMetric(float64(out)/deliveries, "sub-dgrams-out/delivery")
}
