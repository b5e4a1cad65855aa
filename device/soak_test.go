package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quiot/quiot/device/client"
	"github.com/quiot/quiot/internal/certs"
	"github.com/quiot/quiot/internal/quictune"
)

// TestSoak is the soak benchmark of docs/BENCH.md, not part of make test:
// a real `quiot broker` process with a data directory, 1000 subscribers
// (half HTTP/3, half MQTT over QUIC, persistent sessions) and 10 QoS 1
// publishers at 1 message/s each on loopback, for QUIOT_SOAK (e.g. 10m).
// Each publisher's topic has 100 subscribers (1000 deliveries/s). It
// reports the broker's RSS and goroutines (slope per minute after the
// first minute), CPU per delivery, end-to-end latency percentiles and
// loss. QUIOT_SOAK_BROKER_ARGS adds broker flags (e.g. "--memory-limit
// 128MiB", a 512 MB Pi's automatic limit). Run it alone: flock
// /tmp/quiot-heavy.lock.
func TestSoak(t *testing.T) {
	d, _ := time.ParseDuration(os.Getenv("QUIOT_SOAK"))
	if d <= 0 {
		t.Skip("soak benchmark: set QUIOT_SOAK=10m (and run it under flock /tmp/quiot-heavy.lock)")
	}
	const nSubs, nPubs = 1000, 10
	rate := 1.0 // messages/s per publisher
	if v, err := strconv.ParseFloat(os.Getenv("QUIOT_SOAK_RATE"), 64); err == nil && v > 0 {
		rate = v
	}
	dir := t.TempDir()
	ca, err := certs.NewCA("soak CA", nil)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := ca.Issue("localhost", nil)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile, caFile := filepath.Join(dir, "b.crt"), filepath.Join(dir, "b.key"), filepath.Join(dir, "ca.crt")
	if err := certs.WriteFiles(certFile, srv.CertPEM, keyFile, srv.KeyPEM); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(caFile, ca.CertPEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	// MQTT subscribers hold 8 identities (client certificates), within
	// the MQTT sessions-per-identity limit (256).
	var idCerts []client.Options
	for i := range 8 {
		c, err := ca.Issue(fmt.Sprintf("soak-%d", i), nil)
		if err != nil {
			t.Fatal(err)
		}
		idCerts = append(idCerts, client.Options{Certificate: &c.TLS})
	}
	h3Port, mqPort, metricsPort := freePort(t), freePort(t), freePort(t)
	args := []string{"--config", "", "--cert", certFile, "--key", keyFile, "--client-ca", caFile,
		"--listen", fmt.Sprintf("127.0.0.1:%d", h3Port), "--mqtt-quic", fmt.Sprintf("127.0.0.1:%d", mqPort),
		"--mqtt-tcp", "", "--metrics-listen", fmt.Sprintf("127.0.0.1:%d", metricsPort), "--metrics-trace=false",
		"--data-dir", filepath.Join(dir, "state"), "--log-level", "warn",
		"--max-conns", "4096", "--max-conns-per-addr", "4096", "--max-subscriptions-per-identity", "4096"}
	p := startBrokerProc(t, append(args, strings.Fields(os.Getenv("QUIOT_SOAK_BROKER_ARGS"))...)...)
	pid := p.cmd.Process.Pid

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	prof := quictune.Default()
	var (
		lmu      sync.Mutex
		lat      []time.Duration
		measure  atomic.Bool
		delivers atomic.Int64
	)
	type subState struct {
		mu   sync.Mutex
		seen map[int]bool
	}
	subs := make([]*subState, nSubs)
	var clients []client.Client
	for i := range nSubs {
		o := client.Options{Tuning: prof, RootCAs: ca.Pool(), Reconnect: true, MaxBackoff: time.Second, Logger: clientLog(t, "sub")}
		if i%2 == 0 {
			o.Broker = fmt.Sprintf("https://127.0.0.1:%d", h3Port)
		} else {
			o.Broker = fmt.Sprintf("mqtt-quic://127.0.0.1:%d", mqPort)
			o.ClientID = fmt.Sprintf("soak-sub-%d", i)
			o.Certificate = idCerts[i%len(idCerts)].Certificate
		}
		c, err := client.New(o)
		if err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c)
		s := &subState{seen: map[int]bool{}}
		subs[i] = s
		topic := fmt.Sprintf("soak/p%d", i%nPubs)
		go func() {
			_ = c.Subscribe(ctx, topic, 0, func(m client.Message) {
				n, err := strconv.Atoi(string(m.Payload))
				if err != nil || m.Gap {
					return
				}
				s.mu.Lock()
				s.seen[n] = true
				s.mu.Unlock()
				if measure.Load() {
					delivers.Add(1)
					if l := m.Latency(); l > 0 {
						lmu.Lock()
						lat = append(lat, l)
						lmu.Unlock()
					}
				}
			})
		}()
	}
	t.Cleanup(func() {
		for _, c := range clients {
			_ = c.Close()
		}
	})
	// Warm-up: every subscriber gets a probe of its topic.
	probe, err := client.New(client.Options{Broker: fmt.Sprintf("https://127.0.0.1:%d", h3Port), RootCAs: ca.Pool(), Tuning: prof, Logger: clientLog(t, "probe")})
	if err != nil {
		t.Fatal(err)
	}
	defer probe.Close()
	deadline := time.Now().Add(5 * time.Minute)
	for {
		for i := range nPubs {
			if _, err := probe.Publish(ctx, fmt.Sprintf("soak/p%d", i), []byte("-1"), client.PublishOptions{QoS: 1}); err != nil {
				t.Fatal(err)
			}
		}
		ready := countReady(subs, func(s *subState) bool { s.mu.Lock(); defer s.mu.Unlock(); return len(s.seen) > 0 })
		if ready == nSubs {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d subscribers live after 5 minutes", ready, nSubs)
		}
		time.Sleep(time.Second) // probe interval while 1000 subscriptions start
	}
	t.Logf("%d subscribers live", nSubs)

	// Publishers.
	acked := make([]atomic.Int64, nPubs)
	var wg sync.WaitGroup
	pubCtx, stopPubs := context.WithTimeout(ctx, d)
	defer stopPubs()
	measure.Store(true)
	start := time.Now()
	cpu0 := procCPU(t, pid)
	for i := range nPubs {
		c, err := client.New(client.Options{Broker: fmt.Sprintf("https://127.0.0.1:%d", h3Port), RootCAs: ca.Pool(), Tuning: prof, Reconnect: true, Logger: clientLog(t, "pub")})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		topic := fmt.Sprintf("soak/p%d", i)
		wg.Go(func() {
			tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
			defer tick.Stop()
			for n := 0; ; n++ {
				select {
				case <-pubCtx.Done():
					return
				case <-tick.C:
				}
				if _, err := c.Publish(ctx, topic, []byte(strconv.Itoa(n)), client.PublishOptions{QoS: 1}); err != nil {
					t.Errorf("publish %s %d: %v", topic, n, err)
					return
				}
				acked[i].Store(int64(n + 1))
			}
		})
	}
	// Samples every 10 s.
	var samples []soakSample
	tk := time.NewTicker(10 * time.Second)
	for done := false; !done; {
		select {
		case <-pubCtx.Done():
			done = true
		case <-tk.C:
		}
		samples = append(samples, soakSample{at: time.Since(start), rss: procRSS(t, pid) / (1 << 20), goroutines: scrape(t, metricsPort, "go_goroutines")})
		s := samples[len(samples)-1]
		t.Logf("t=%v rss=%.1f MiB goroutines=%.0f deliveries=%d", s.at.Round(time.Second), s.rss, s.goroutines, delivers.Load())
	}
	tk.Stop()
	wg.Wait()
	elapsed := time.Since(start)
	cpu := procCPU(t, pid) - cpu0
	// Let the last deliveries arrive, then count losses.
	var lost int
	waitUntil := time.Now().Add(30 * time.Second)
	for {
		lost = 0
		for i, s := range subs {
			want := int(acked[i%nPubs].Load())
			s.mu.Lock()
			for n := range want {
				if !s.seen[n] {
					lost++
				}
			}
			s.mu.Unlock()
		}
		if lost == 0 || time.Now().After(waitUntil) {
			break
		}
		time.Sleep(200 * time.Millisecond) // waiting for in-flight deliveries, bounded
	}
	measure.Store(false)
	var sent int64
	for i := range acked {
		sent += acked[i].Load()
	}
	lmu.Lock()
	slices.Sort(lat)
	pct := func(q float64) time.Duration {
		if len(lat) == 0 {
			return 0
		}
		return lat[min(len(lat)-1, int(q*float64(len(lat))))]
	}
	lmu.Unlock()
	var steady []soakSample
	for _, s := range samples {
		if s.at >= time.Minute {
			steady = append(steady, s)
		}
	}
	rssSlope := slope(steady, func(s soakSample) float64 { return s.rss })
	gSlope := slope(steady, func(s soakSample) float64 { return s.goroutines })
	t.Logf("SOAK duration=%v publishers=%d subscribers=%d (h3 %d, mqtt %d) rate=%.1f/s each", elapsed.Round(time.Second), nPubs, nSubs, nSubs/2, nSubs/2, rate)
	t.Logf("SOAK published(acked)=%d deliveries=%d lost=%d", sent, delivers.Load(), lost)
	t.Logf("SOAK broker CPU %.1f s = %.1f us/delivery (%.1f%% of one core)", cpu, cpu/float64(delivers.Load())*1e6, 100*cpu/elapsed.Seconds())
	t.Logf("SOAK latency p50=%v p99=%v p99.9=%v max=%v (n=%d)", pct(0.5), pct(0.99), pct(0.999), pct(1), len(lat))
	if len(samples) > 0 {
		t.Logf("SOAK RSS first=%.1f MiB last=%.1f MiB slope after 1 min=%.3f MiB/min; goroutines first=%.0f last=%.0f slope=%.2f/min",
			samples[0].rss, samples[len(samples)-1].rss, rssSlope, samples[0].goroutines, samples[len(samples)-1].goroutines, gSlope)
	}
	if lost > 0 {
		t.Errorf("%d deliveries lost", lost)
	}
}

func countReady[T any](l []T, f func(T) bool) int {
	n := 0
	for _, x := range l {
		if f(x) {
			n++
		}
	}
	return n
}

// soakSample is one observation of the broker process.
type soakSample struct {
	at         time.Duration
	rss        float64 // MiB
	goroutines float64
}

// slope is the least-squares slope of f over the samples, per minute.
func slope(s []soakSample, f func(soakSample) float64) float64 {
	if len(s) < 2 {
		return math.NaN()
	}
	var sx, sy, sxx, sxy float64
	for _, v := range s {
		x, y := v.at.Minutes(), f(v)
		sx, sy, sxx, sxy = sx+x, sy+y, sxx+x*x, sxy+x*y
	}
	n := float64(len(s))
	return (n*sxy - sx*sy) / (n*sxx - sx*sx)
}

// procCPU is a process's user+system CPU time in seconds.
func procCPU(t *testing.T, pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	u, _ := strconv.ParseFloat(f[11], 64)
	s, _ := strconv.ParseFloat(f[12], 64)
	return (u + s) / 100 // USER_HZ
}

// procRSS is a process's resident set size in bytes.
func procRSS(t *testing.T, pid int) float64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb * 1024
		}
	}
	return 0
}

// scrape reads one metric from the broker's /metrics.
func scrape(t *testing.T, port int, name string) float64 {
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
	if err != nil {
		t.Logf("scrape: %v", err)
		return math.NaN()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return math.NaN()
}
