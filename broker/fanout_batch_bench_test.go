package broker_test

import (
	"bytes"
	"context"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go/http3"

	"github.com/quiot/quiot/broker/brokertest"
	"github.com/quiot/quiot/internal/testutil"
	"github.com/quiot/quiot/internal/wire"
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
		b.Run("batch="+strconv.Itoa(batch), func(b *testing.B) { fanoutBatch(b, batch) })
	}
}

func fanoutBatch(b *testing.B, batch int) {
	const nsubs = 100
	const window = 256
	br := brokertest.Start(b, nil, nil)
	payload := bytes.Repeat([]byte("x"), 128)
	counts := make([]atomic.Int64, nsubs)
	var wg sync.WaitGroup
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan struct{}, nsubs)
	var socks []*testutil.CountingConn
	for i := range nsubs {
		cc := testutil.ListenCounting(b)
		socks = append(socks, cc)
		c := testutil.H3ClientConn(br.PKI.Pool(), nil, cc)
		b.Cleanup(func() { c.Transport.(*http3.Transport).Close() })
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, br.URL+"/v1/topics/fan/out", nil)
		resp, err := c.Do(req)
		if err != nil || resp.StatusCode != 200 {
			b.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer resp.Body.Close()
			dec := wire.NewDecoder(resp.Body, 0)
			ready <- struct{}{}
			for {
				if _, err := dec.Next(); err != nil {
					return
				}
				counts[i].Add(1)
			}
		}()
	}
	for range nsubs {
		<-ready
	}
	pc := testutil.H3Client(br.PKI.Pool(), nil)
	defer pc.Transport.(*http3.Transport).Close()
	sp := openStream(b, pc, br.URL)
	minCount := func() int64 {
		m := counts[0].Load()
		for i := 1; i < nsubs; i++ {
			m = min(m, counts[i].Load())
		}
		return m
	}
	b.ResetTimer()
	for _, s := range socks {
		s.Reset()
	}
	cpu0, t0 := cpuTime(), time.Now()
	for i := 0; i < b.N; i++ {
		sp.send(uint64(i+1), "fan/out", payload, 0, 0)
		if i%batch == batch-1 || i == b.N-1 {
			sp.flush(b)
			for int64(i+1)-minCount() > window {
				time.Sleep(50 * time.Microsecond)
			}
		}
	}
	for minCount() < int64(b.N) {
		time.Sleep(50 * time.Microsecond)
	}
	el, cpu := time.Since(t0), cpuTime()-cpu0
	var in, out uint64
	for _, s := range socks {
		in += s.DatagramsIn.Load()
		out += s.DatagramsOut.Load()
	}
	b.StopTimer()
	deliveries := float64(b.N) * nsubs
	b.ReportMetric(deliveries/el.Seconds(), "deliveries/s")
	b.ReportMetric(float64(cpu.Nanoseconds())/deliveries, "cpu-ns/delivery")
	b.ReportMetric(float64(in)/deliveries, "sub-dgrams-in/delivery")
	b.ReportMetric(float64(out)/deliveries, "sub-dgrams-out/delivery")
	if d := br.Stats().Dropped; d != 0 {
		b.Fatalf("%d messages dropped", d)
	}
	cancel()
	wg.Wait()
}
