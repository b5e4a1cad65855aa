package cluster_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quiot/quiot/broker/brokertest"

	"github.com/quic-go/quic-go/http3"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/cluster"
	"github.com/quiot/quiot/internal/testutil"
	"github.com/quiot/quiot/internal/wire"
)

// benchSub is one HTTP/3 subscriber of the benchmark.
type benchSub struct {
	broker int
	mu     sync.Mutex
	lat    [][]time.Duration // by publishing broker
	got    atomic.Int64
	probes [3]atomic.Bool
}

// BenchmarkCluster: 100 HTTP/3 subscribers on each of 3 clustered brokers
// (3 NATS nodes with JetStream R3, all on this host), one publisher per
// broker (QoS 1, in-process Publish), against the same 300 subscribers and
// 3 publishers on one broker. Each b.N is one message (b.N/3 per
// publisher). Reported: deliveries/s, p50/p99 publish-to-delivery latency,
// and for the cluster the p50 of subscribers on the publisher's broker
// (local) and on the others (remote): their difference is the cluster
// hop. "paced" publishes 50 msg/s per publisher (45000 deliveries/s),
// "flood" as fast as the acknowledgements allow. Run under
// flock /tmp/quiot-heavy.lock with -benchtime=600x. "three-brokers" has
// cluster-wide sequence numbers (the default: local subscribers too get a
// message once JetStream has numbered it), "three-brokers-local" has
// Options.LocalNumbering.
func BenchmarkCluster(b *testing.B) {
	for _, mode := range []struct {
		name string
		gap  time.Duration
	}{{"paced", 20 * time.Millisecond}, {"flood", 0}} {
		b.Run("one-broker/"+mode.name, func(b *testing.B) { benchCluster(b, 1, mode.gap, false) })
		b.Run("three-brokers/"+mode.name, func(b *testing.B) { benchCluster(b, 3, mode.gap, false) })
		b.Run("three-brokers-local/"+mode.name, func(b *testing.B) { benchCluster(b, 3, mode.gap, true) })
	}
}

func benchCluster(b *testing.B, brokers int, gap time.Duration, localNumbering bool) {
	pki := testutil.NewPKI(b)
	var pubs []*broker.Broker
	var urls []string
	lim := broker.Limits{QueueLength: 1 << 16}
	if brokers == 1 {
		tb := brokertest.Start(b, pki, &broker.Options{Limits: lim})
		for range 3 {
			pubs = append(pubs, tb.Broker)
			urls = append(urls, tb.URL)
		}
	} else {
		nc := startNATS(b, 3)
		for i := range 3 {
			n := startNode(b, pki, fmt.Sprintf("b%d", i+1), nc.nodes[i].ClientURL(), func(bo *broker.Options, co *cluster.Options) {
				bo.Limits, co.LocalNumbering = lim, localNumbering
			})
			pubs = append(pubs, n.b.Broker)
			urls = append(urls, n.b.URL)
		}
	}
	// 100 subscribers per publishing broker, 25 per QUIC connection.
	var subs []*benchSub
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	for bi := range 3 {
		for range 4 {
			hc := testutil.H3Client(pki.Pool(), nil)
			defer hc.Transport.(*http3.Transport).Close()
			for range 25 {
				s := &benchSub{broker: bi, lat: make([][]time.Duration, 3)}
				subs = append(subs, s)
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, urls[bi]+"/v1/topics/"+url.PathEscape("bench/#"), nil)
				resp, err := hc.Do(req)
				if err != nil || resp.StatusCode != http.StatusOK {
					b.Fatalf("subscribe: %v", err)
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer resp.Body.Close()
					dec := wire.NewDecoder(resp.Body, 0)
					for {
						f, err := dec.Frame()
						if err != nil {
							return
						}
						if f.IsHeartbeat() || f.IsGap() || len(f.Payload) < 2 {
							continue
						}
						from := int(f.Payload[1] - '0')
						if f.Payload[0] == 'p' {
							s.probes[from].Store(true)
							continue
						}
						d := time.Duration(time.Now().UnixNano() - f.Time)
						s.mu.Lock()
						s.lat[from] = append(s.lat[from], d)
						s.mu.Unlock()
						s.got.Add(1)
					}
				}()
			}
		}
	}
	// Every subscriber's interest has reached every broker's NATS node.
	deadline := time.Now().Add(timeout)
	for pi := range 3 {
		for {
			all := true
			for _, s := range subs {
				all = all && s.probes[pi].Load()
			}
			if all {
				break
			}
			if time.Now().After(deadline) {
				b.Fatal("subscriptions never reached the cluster")
			}
			if _, err := pubs[pi].Publish(ctx, broker.Message{Topic: "bench/probe", Payload: []byte("p" + strconv.Itoa(pi)), QoS: 1}); err != nil {
				b.Fatal(err)
			}
			time.Sleep(20 * time.Millisecond) // probe pacing
		}
	}
	payload := make([]byte, 64)
	b.ResetTimer()
	start := time.Now()
	var pwg sync.WaitGroup
	per := (b.N + 2) / 3
	for pi := range 3 {
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			p := append([]byte(nil), payload...)
			p[0], p[1] = 'm', byte('0'+pi)
			next := time.Now()
			for range per {
				if gap > 0 {
					time.Sleep(time.Until(next))
					next = next.Add(gap)
				}
				if _, err := pubs[pi].Publish(ctx, broker.Message{Topic: fmt.Sprintf("bench/%d", pi), Payload: p, QoS: 1, Time: time.Now().UnixNano(), Origin: broker.ProtoH3}); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	pwg.Wait()
	want := int64(3 * per)
	for _, s := range subs {
		for s.got.Load() < want {
			if time.Now().After(start.Add(2 * time.Minute)) {
				b.Fatalf("a subscriber got %d of %d messages", s.got.Load(), want)
			}
			time.Sleep(5 * time.Millisecond) // waiting for the last deliveries
		}
	}
	elapsed := time.Since(start)
	b.StopTimer()
	var all, local, remote []time.Duration
	for _, s := range subs {
		for from, l := range s.lat {
			all = append(all, l...)
			if from == s.broker {
				local = append(local, l...)
			} else {
				remote = append(remote, l...)
			}
		}
	}
	pct := func(d []time.Duration, p float64) float64 {
		if len(d) == 0 {
			return 0
		}
		slices.Sort(d)
		return float64(d[int(float64(len(d)-1)*p)].Microseconds()) / 1000
	}
	b.ReportMetric(float64(len(all))/elapsed.Seconds(), "deliveries/s")
	b.ReportMetric(pct(all, 0.5), "p50-ms")
	b.ReportMetric(pct(all, 0.99), "p99-ms")
	if brokers == 3 {
		lp, rp := pct(local, 0.5), pct(remote, 0.5)
		b.ReportMetric(lp, "local-p50-ms")
		b.ReportMetric(rp, "remote-p50-ms")
		b.ReportMetric(rp-lp, "hop-p50-ms")
	}
	cancel()
	wg.Wait()
}
