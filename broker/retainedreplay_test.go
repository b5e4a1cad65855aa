package broker_test

import (
	"testing"

	"github.com/quiot/quiot/broker/brokertest"
	"github.com/quiot/quiot/internal/wire"
)

// BenchmarkRetainedReplayHTTP: one HTTP/3 subscription to # (binary
// frames, no since=: the retained messages first) with the retained store
// at its bound (--retained-bytes, 16 MiB), in two shapes: the largest
// payloads (256 KiB) and many small messages (10 bytes). cpu-ns is the
// whole process (broker and client) from the request until the client
// read a message published after the replay; alloc-B what was allocated
// meanwhile (the client's decoding included); heap-B the live heap once
// the response began and before the client read its body (what the
// broker holds for a subscriber that does not read); received the
// retained messages read.
func BenchmarkRetainedReplayHTTP(b *testing.B) {
	for _, shape := range []struct {
		name    string
		payload int
	}{{"256KiB", 256<<10 - 64}, {"10B", 10}} {
		b.Run(shape.name, func(b *testing.B) {
			br := brokertest.Start(b, nil, nil)
			stored := fillRetained(b, br, shape.payload)
			b.Logf("%d retained messages, %d bytes", stored, br.Stats().RetainedBytes)
			b.ResetTimer()
			for range b.N {
				measureReplay(b, br, "",
					func(f wire.Frame) bool { return f.Topic == "end" },
					func(f wire.Frame) bool { return f.Retained() })
				b.ReportMetric(float64(stored), "retained")
			}
		})
	}
}
