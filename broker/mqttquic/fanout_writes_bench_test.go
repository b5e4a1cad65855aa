package mqttquic

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quiot/quiot/device/client"
)

// writeSyscalls is this process's count of write system calls so far
// (syscw in /proc/self/io: write, writev, sendmsg; 0 where there is no
// procfs).
func writeSyscalls() uint64 {
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "syscw: "); ok {
			n, _ := strconv.ParseUint(v, 10, 64)
			return n
		}
	}
	return 0
}

// BenchmarkFanoutWrites is BenchmarkFanout (1 publisher -> 100 MQTT over
// QUIC subscribers, 128 B, QoS 0, one process) reporting also the write
// system calls per delivery (sendmsg, both sides: quic-go sends up to a GSO
// batch of datagrams in one), to set beside the HTTP/3 broker's
// BenchmarkFanoutBatch.
func BenchmarkFanoutWrites(b *testing.B) {
	const nsubs = 100
	br := startBridged(b, nil)
	url := quicURL(br.mqtt)
	mk := func(tb testing.TB) client.Client {
		return newClient(tb, br.pki, url, func(o *client.Options) { o.Reconnect = true; o.MaxBackoff = time.Second })
	}
	var cpu0 time.Duration
	var w0 uint64
	b.ResetTimer()
	el := fanout(b, mk, nsubs, b.N, func() { cpu0, w0 = cpuTime(), writeSyscalls() })
	cpu, w := cpuTime()-cpu0, writeSyscalls()-w0
	b.StopTimer()
	deliveries := float64(b.N) * nsubs
	b.ReportMetric(deliveries/el.Seconds(), "deliveries/s")
	b.ReportMetric(float64(cpu.Nanoseconds())/deliveries, "cpu-ns/delivery")
	b.ReportMetric(float64(w)/deliveries, "writes/delivery")
}
