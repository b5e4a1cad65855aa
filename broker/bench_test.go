package broker_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/quiot/quiot/broker/brokertest"

	"github.com/quic-go/quic-go/http3"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/internal/testutil"
	"github.com/quiot/quiot/internal/wire"
)

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// streamPublisher is one POST /v1/publish stream.
type streamPublisher struct {
	pw   *io.PipeWriter
	dec  *wire.Decoder
	resp *http.Response
	buf  []byte
}

func openStream(tb testing.TB, c *http.Client, url string) *streamPublisher {
	tb.Helper()
	pr, pw := io.Pipe()
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/publish", pr)
	req.Header.Set("Content-Type", wire.ContentType)
	type res struct {
		resp *http.Response
		err  error
	}
	ch := make(chan res, 1)
	go func() {
		resp, err := c.Do(req)
		ch <- res{resp, err}
	}()
	// The request goes out with its first frame, a QoS 1 "hello"; its ack
	// (accepted, or denied by an ACL) shows that the stream is up.
	sp := &streamPublisher{pw: pw}
	sp.send(0, "bench/hello", nil, wire.PubQoS1, 0)
	sp.flush(tb)
	r := <-ch
	if r.err != nil {
		tb.Fatal(r.err)
	}
	sp.resp = r.resp
	sp.dec = wire.NewDecoder(r.resp.Body, 0)
	if _, err := sp.dec.Ack(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { pw.Close(); r.resp.Body.Close() })
	return sp
}

func (s *streamPublisher) send(id uint64, topic string, payload []byte, flags byte, ts int64) {
	s.buf = wire.AppendPublish(s.buf, &wire.Publish{ID: id, Flags: flags, Time: ts, Topic: topic, Payload: payload})
}

func (s *streamPublisher) flush(tb testing.TB) {
	if len(s.buf) == 0 {
		return
	}
	if _, err := s.pw.Write(s.buf); err != nil {
		tb.Fatal(err)
	}
	s.buf = s.buf[:0]
}

// BenchmarkFanout: one publisher (a streamed publish, QoS 0) to 100
// HTTP/3 subscribers on 100 connections, 128-byte payloads, flushed 32
// at a time. The publisher stays at most 256 messages ahead of the
// slowest subscriber, so nothing is dropped and the rate is the
// sustainable one. cpu-ns/delivery is the whole process (broker and all
// clients) divided by deliveries.
func BenchmarkFanout(b *testing.B) { fanout(b, 32, false) }

// fanout runs BenchmarkFanout with the publisher flushing every batch
// messages; counting puts every subscriber on a counting UDP socket and
// reports the datagrams they received and sent per delivery
// (BenchmarkFanoutBatch).
func fanout(b *testing.B, batch int, counting bool) {
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
		c := testutil.H3Client(br.PKI.Pool(), nil)
		if counting {
			cc := testutil.ListenCounting(b)
			socks = append(socks, cc)
			c = testutil.H3ClientConn(br.PKI.Pool(), nil, cc)
		}
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
	if counting {
		b.ReportMetric(float64(in)/deliveries, "sub-dgrams-in/delivery")
		b.ReportMetric(float64(out)/deliveries, "sub-dgrams-out/delivery")
	}
	if d := br.Stats().Dropped; d != 0 {
		b.Fatalf("%d messages dropped", d)
	}
	cancel()
	wg.Wait()
}

// BenchmarkLatency: publish -> deliver latency on loopback at 100 msg/s,
// one POST per message (QoS 1) stamped with Quiot-Time, one HTTP/3
// subscriber. Run with a fixed count, e.g. -benchtime=500x (5 s).
func BenchmarkLatency(b *testing.B) {
	br := brokertest.Start(b, nil, nil)
	c := newClient(b, br, nil)
	s := c.mustSubscribe("lat", "", false)
	payload := bytes.Repeat([]byte("x"), 128)
	lat := make([]time.Duration, 0, b.N)
	done := make(chan error, 1)
	go func() {
		for range b.N {
			f, err := s.dec.Frame()
			if err != nil {
				done <- err
				return
			}
			lat = append(lat, time.Duration(time.Now().UnixNano()-f.Time))
		}
		done <- nil
	}()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		<-tick.C
		st, _, body := c.publish("lat", payload, "", "Quiot-Time", strconv.FormatInt(time.Now().UnixNano(), 10))
		if st != http.StatusNoContent {
			b.Fatalf("%d %s", st, body)
		}
	}
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	q := func(p float64) float64 {
		return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Nanoseconds()) / 1e6
	}
	b.ReportMetric(q(0.5), "p50-ms")
	b.ReportMetric(q(0.99), "p99-ms")
	b.ReportMetric(float64(lat[len(lat)-1].Nanoseconds())/1e6, "max-ms")
}

// BenchmarkPublishMode compares one POST per message with a streamed
// publish (both QoS 1, 128-byte payloads, acknowledged by the broker):
// messages per second and UDP bytes per message, counted at the
// publisher's own socket (both directions) with testutil.CountingConn.
func BenchmarkPublishMode(b *testing.B) {
	payload := bytes.Repeat([]byte("x"), 128)
	b.Run("request", func(b *testing.B) {
		br := brokertest.Start(b, nil, &broker.Options{Limits: broker.Limits{HistoryPerTopic: -1}})
		cc := testutil.ListenCounting(b)
		c := testutil.H3ClientConn(br.PKI.Pool(), nil, cc)
		defer c.Transport.(*http3.Transport).Close()
		post := func() {
			resp, err := c.Post(br.URL+"/v1/topics/mode/req?qos=1", "application/octet-stream", bytes.NewReader(payload))
			if err != nil {
				b.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusNoContent {
				b.Fatalf("status %d", resp.StatusCode)
			}
		}
		post() // handshake outside the measurement
		cc.Reset()
		const workers = 16
		var next atomic.Int64
		var wg sync.WaitGroup
		b.ResetTimer()
		t0 := time.Now()
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for next.Add(1) <= int64(b.N) {
					post()
				}
			}()
		}
		wg.Wait()
		el := time.Since(t0)
		b.StopTimer()
		bytes, dgrams := cc.Total()
		b.ReportMetric(float64(b.N)/el.Seconds(), "msgs/s")
		b.ReportMetric(float64(bytes)/float64(b.N), "wire-B/msg")
		b.ReportMetric(float64(dgrams)/float64(b.N), "datagrams/msg")
	})
	b.Run("stream", func(b *testing.B) {
		br := brokertest.Start(b, nil, &broker.Options{Limits: broker.Limits{HistoryPerTopic: -1}})
		cc := testutil.ListenCounting(b)
		c := testutil.H3ClientConn(br.PKI.Pool(), nil, cc)
		defer c.Transport.(*http3.Transport).Close()
		sp := openStream(b, c, br.URL)
		cc.Reset()
		acked := make(chan error, 1)
		b.ResetTimer()
		t0 := time.Now()
		go func() {
			for i := 1; i <= b.N; i++ {
				a, err := sp.dec.Ack()
				if err == nil && (a.Status != 0 || a.ID != uint64(i)) {
					err = fmt.Errorf("ack %+v, want id %d", a, i)
				}
				if err != nil {
					acked <- err
					return
				}
			}
			acked <- nil
		}()
		for i := 1; i <= b.N; i++ {
			sp.send(uint64(i), "mode/stream", payload, wire.PubQoS1, 0)
			if i%16 == 0 || i == b.N {
				sp.flush(b)
			}
		}
		if err := <-acked; err != nil {
			b.Fatal(err)
		}
		el := time.Since(t0)
		b.StopTimer()
		bytes, dgrams := cc.Total()
		b.ReportMetric(float64(b.N)/el.Seconds(), "msgs/s")
		b.ReportMetric(float64(bytes)/float64(b.N), "wire-B/msg")
		b.ReportMetric(float64(dgrams)/float64(b.N), "datagrams/msg")
	})
}
