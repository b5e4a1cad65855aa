package broker_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"testing"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/brokertest"
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
			payload := bytes.Repeat([]byte("r"), shape.payload)
			stored := 0
			for {
				_, err := br.Broker.Publish(context.Background(), broker.Message{Topic: fmt.Sprintf("r/%06d", stored), Payload: payload, Retain: true})
				if errors.Is(err, broker.ErrRetainedFull) {
					break
				}
				if err != nil {
					b.Fatal(err)
				}
				stored++
			}
			b.Logf("%d retained messages, %d bytes", stored, br.Stats().RetainedBytes)
			b.ResetTimer()
			for range b.N {
				c := newClient(b, br, nil)
				var ms runtime.MemStats
				before := heapInuse()
				runtime.ReadMemStats(&ms)
				alloc, cpu := ms.TotalAlloc, cpuTime()
				s := c.mustSubscribe("#", "", false)
				held := heapInuse() - before
				if _, err := br.Broker.Publish(context.Background(), broker.Message{Topic: "end", Payload: []byte("end")}); err != nil {
					b.Fatal(err)
				}
				received := 0
				for {
					f, err := s.dec.Frame()
					if err != nil {
						b.Fatal(err)
					}
					if f.Topic == "end" {
						break
					}
					if f.Retained() {
						received++
					}
				}
				elapsed := cpuTime() - cpu
				runtime.ReadMemStats(&ms)
				b.ReportMetric(float64(elapsed), "cpu-ns/subscribe")
				b.ReportMetric(float64(ms.TotalAlloc-alloc), "alloc-B/subscribe")
				b.ReportMetric(float64(held), "heap-B")
				b.ReportMetric(float64(received), "received")
				b.ReportMetric(float64(stored), "retained")
				s.close()
			}
		})
	}
}
