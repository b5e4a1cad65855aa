package broker_test

import (
	"strconv"
	"testing"
)

// BenchmarkFanoutBatch is BenchmarkFanout (1 streamed publisher -> 100
// HTTP/3 subscribers, 128 B, QoS 0) with the publisher's batch size as a
// parameter: "batch=32" is BenchmarkFanout's, "batch=1" writes every
// message to the stream by itself, as an MQTT client sends each PUBLISH
// (compare broker/mqttquic's BenchmarkFanoutDatagrams). Every subscriber
// is on a counting UDP socket: besides deliveries/s it reports the
// datagrams the subscribers received and sent per delivery. The counting
// socket hides the UDP socket from quic-go (no batched reads), so take the
// CPU per delivery from BenchmarkFanout.
func BenchmarkFanoutBatch(b *testing.B) {
	for _, batch := range []int{1, 32} {
		b.Run("batch="+strconv.Itoa(batch), func(b *testing.B) { fanout(b, batch, true) })
	}
}
