package cluster_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/quic-go/quic-go/http3"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/cluster"
	"github.com/quiot/quiot/internal/testutil"
	"github.com/quiot/quiot/internal/wire"
)

// replayCluster starts a NATS server and two brokers: a publishes msgs
// messages of size bytes to topics big/00..big/99 (payload "i" then
// padding), which b does not read (its consumer reads x/# only, and has
// applied past them), so that a resume on big/# at b reads them all from
// the stream. It returns a, b and the epoch.
func replayCluster(tb testing.TB, msgs, size int) (a, b *node, pki *testutil.PKI, epoch string) {
	tb.Helper()
	nc := startNATS(tb, 1)
	pki = testutil.NewPKI(tb)
	mod := func(_ *broker.Options, co *cluster.Options) { co.Replicas = 1 }
	a = startNode(tb, pki, "a", nc.urls(), mod)
	b = startNode(tb, pki, "b", nc.urls(), mod)
	sx := b.subscribe("x/#", "")
	waitFor(tb, func() bool { return b.link.Stats().Subjects == 2 }, "b's consumer to read x and x.>")
	const workers = 8
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < msgs; i += workers {
				p := fmt.Appendf(nil, "%d ", i)
				p = append(p, bytes.Repeat([]byte("p"), max(size-len(p), 0))...)
				if _, err := a.b.Broker.Publish(context.Background(), broker.Message{Topic: fmt.Sprintf("big/%02d", i%100), Payload: p, QoS: 1}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		tb.Fatal(err)
	}
	// Numbered (QoS 1): b applies x0 after every big message, its
	// consumer takes big/# up after them, and a resume from 0 reads them
	// from the stream.
	a.publish("x/1", "x0", "qos=1")
	if p := string(sx.nextMessage().Payload); p != "x0" {
		tb.Fatalf("b: %q, want x0", p)
	}
	sx.cancel()
	return a, b, pki, wire.FormatEpoch(b.b.Broker.Epoch())
}

// openNonReader GETs filter with query on n, on a connection of its own
// (a non-reader fills its connection's flow-control window), and returns
// the response once its headers came, reading nothing of its body.
func openNonReader(tb testing.TB, pki *testutil.PKI, n *node, filter, query string) *http.Response {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	tb.Cleanup(cancel)
	h3 := testutil.H3Client(pki.Pool(), nil)
	tb.Cleanup(func() { h3.Transport.(*http3.Transport).Close() })
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, n.b.URL+"/v1/topics/"+url.PathEscape(filter)+"?"+query, nil)
	resp, err := h3.Do(req)
	if err != nil {
		tb.Fatalf("subscribe %s: %v", filter, err)
	}
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		tb.Fatalf("subscribe %s: %d %s", filter, resp.StatusCode, body)
	}
	tb.Cleanup(func() { resp.Body.Close() })
	return resp
}

// heapInuse is the live heap after two collections.
func heapInuse() int64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapInuse)
}

// readResume reads a resume on big/# from 0 to its end (msgs messages)
// and checks that each comes once, in order, with no gap.
func readResume(tb testing.TB, s *h3sub, msgs int) {
	tb.Helper()
	var last uint64
	for i := range msgs {
		f := s.next()
		if f.IsGap() || f.Seq <= last || !f.Replayed() {
			tb.Fatalf("message %d of the resume: %+v (payload %.10q), after seq %d", i, f, f.Payload, last)
		}
		last = f.Seq
	}
}

// TestClusterReplayBoundedForNonReaders: subscriptions that resume from
// 0 on a broker that did not read the filter (the messages come from the
// cluster's stream: 50,000 of 100 bytes) and then read nothing hold a
// bounded part of the replay each (a chunk and the stream's flow-control
// window), not the whole range: before, the link read the range into one
// slice before the response began (about 13 MB for each). The bound holds
// at every sample; a subscriber that reads gets every message once, in
// order.
func TestClusterReplayBoundedForNonReaders(t *testing.T) {
	if testing.Short() {
		t.Skip("fills the stream")
	}
	const (
		msgs        = 50_000
		subscribers = 4
		perSubBound = 4 << 20 // a chunk, the write buffer, QUIC windows on both ends (the client's is in this process)
	)
	_, b, pki, epoch := replayCluster(t, msgs, 100)
	query := "since=0&epoch=" + epoch
	// One full read first: what the NATS server caches of the stream is
	// not the replay's.
	warm := b.subscribe("big/#", query)
	readResume(t, warm, msgs)
	warm.cancel()
	before := heapInuse()
	for range subscribers {
		openNonReader(t, pki, b, "big/#", query)
	}
	var most int64
	for i := range 5 {
		if i > 0 {
			time.Sleep(50 * time.Millisecond) // time for the replay to fill the windows; the bound holds at every sample
		}
		held := (heapInuse() - before) / subscribers
		most = max(most, held)
		if held > perSubBound {
			t.Fatalf("%d bytes held per subscriber resuming from the cluster that does not read (bound %d)", held, perSubBound)
		}
	}
	t.Logf("at most %d bytes held per subscriber resuming from the cluster that does not read", most)
	readResume(t, b.subscribe("big/#", query), msgs)
}

// cpuTime is the process's CPU time (user and system).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkClusterReplay: one HTTP/3 subscription resuming from 0 on a
// broker that did not read the filter, so that the whole range comes
// from the cluster's stream (50,000 messages of 100 bytes on 100
// topics, one NATS server with JetStream in this process). cpu-ns is the
// whole process (broker, NATS server and client) from the request until
// the client read the last message; alloc-B what was allocated
// meanwhile (the client's decoding included); heap-B the live heap once
// the response began and before the client read its body (what the
// broker holds for a subscriber that does not read); first-ns the time
// until the response began. Run under flock /tmp/quiot-heavy.lock.
func BenchmarkClusterReplay(b *testing.B) {
	const msgs = 50_000
	_, br, pki, epoch := replayCluster(b, msgs, 100)
	query := "since=0&epoch=" + epoch
	readResume(b, br.subscribe("big/#", query), msgs) // the NATS server's caches warm
	b.ResetTimer()
	for range b.N {
		var ms runtime.MemStats
		before := heapInuse()
		runtime.ReadMemStats(&ms)
		alloc, cpu, start := ms.TotalAlloc, cpuTime(), time.Now()
		resp := openNonReader(b, pki, br, "big/#", query)
		first := time.Since(start)
		held := heapInuse() - before
		dec := wire.NewDecoder(resp.Body, 0)
		var last uint64
		for i := 0; i < msgs; {
			f, err := dec.Frame()
			if err != nil {
				b.Fatalf("after %d messages: %v", i, err)
			}
			if f.IsHeartbeat() {
				continue
			}
			if f.IsGap() || f.Seq <= last {
				b.Fatalf("message %d: %+v after seq %d", i, f, last)
			}
			last = f.Seq
			i++
		}
		elapsed := cpuTime() - cpu
		runtime.ReadMemStats(&ms)
		resp.Body.Close()
		b.ReportMetric(float64(elapsed), "cpu-ns/resume")
		b.ReportMetric(float64(ms.TotalAlloc-alloc), "alloc-B/resume")
		b.ReportMetric(float64(held), "heap-B")
		b.ReportMetric(float64(first), "first-ns")
	}
}
