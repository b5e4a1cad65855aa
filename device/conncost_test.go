package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/quic-go/quic-go/http3"

	"github.com/quiot/quiot/device/client"
	"github.com/quiot/quiot/internal/quictune"
)

// TestConnCost is the "RSS per connection by protocol" benchmark of
// docs/BENCH.md, not part of make test. QUIOT_CONNCOST names one protocol:
// tcp (MQTT/TCP), tls (MQTT over TLS), quic (MQTT over QUIC), h3 (quiot's
// HTTP/3 client) or sse (HTTP/3 EventSource: GET /v1/topics/{filter} with
// Accept: text/event-stream, docs/pubsub.md). A fresh `quiot broker --dev`
// process on loopback (the test binary re-executed as quiot) gets
// QUIOT_CONNCOST_N (1000) subscribers of that protocol, one connection each,
// to one topic; one publisher of the same protocol (sse: quiot's HTTP/3
// client) then sends 100 QoS 1 messages at 100/s, each to every
// subscriber. It reports the broker's VmRSS idle, connected, at the end and
// VmHWM, and KB per connection = (connected - idle) / N. Run it alone:
// flock /tmp/quiot-heavy.lock.
//
// The subscribers all come from 127.0.0.1, so the per-address and
// per-identity limits are raised to N+16 (flags printed); the rest are the
// defaults. A subscriber counts as subscribed when it has the topic's
// retained message, published before they connect.
func TestConnCost(t *testing.T) {
	proto := os.Getenv("QUIOT_CONNCOST")
	if proto == "" {
		t.Skip("RSS per connection benchmark: set QUIOT_CONNCOST=tcp|tls|quic|h3|sse (and run it under flock /tmp/quiot-heavy.lock)")
	}
	n := 1000
	if v, err := strconv.Atoi(os.Getenv("QUIOT_CONNCOST_N")); err == nil && v > 0 {
		n = v
	}
	const msgs, rate, topic = 100, 100, "conncost/t"
	var lim syscall.Rlimit // n sockets in this process
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err == nil && lim.Cur < lim.Max {
		lim.Cur = lim.Max
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
	}
	if lim.Cur < uint64(n)+64 {
		t.Fatalf("RLIMIT_NOFILE %d is too low for %d subscribers", lim.Cur, n)
	}

	dir := t.TempDir()
	certFile := filepath.Join(dir, "dev.pem")
	h3Port, quicPort, tcpPort, tlsPort, metricsPort := freePort(t), freePort(t), freePort(t), freePort(t), freePort(t)
	lim16 := strconv.Itoa(n + 16)
	raised := []string{"--max-conns-per-addr", lim16, "--max-conns-per-identity", lim16,
		"--max-subscriptions-per-identity", lim16, "--mqtt-max-sessions-per-identity", lim16}
	if n+16 > 1024 {
		raised = append(raised, "--max-conns", lim16, "--mqtt-max-clients", lim16, "--mqtt-max-sessions", lim16)
	}
	args := append([]string{"--config", "", "--dev", "--dev-cert-out", certFile,
		"--listen", fmt.Sprintf("127.0.0.1:%d", h3Port), "--mqtt-quic", fmt.Sprintf("127.0.0.1:%d", quicPort),
		"--mqtt-tcp", fmt.Sprintf("127.0.0.1:%d", tcpPort), "--mqtt-tls", fmt.Sprintf("127.0.0.1:%d", tlsPort),
		"--metrics-listen", fmt.Sprintf("127.0.0.1:%d", metricsPort), "--log-level", "warn"}, raised...)
	t.Logf("quiot flags beyond the defaults: %s", strings.Join(raised, " "))
	p := startBrokerProc(t, args...)
	pid := p.cmd.Process.Pid
	pem, err := os.ReadFile(certFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)

	broker := map[string]string{
		"tcp": fmt.Sprintf("mqtt://127.0.0.1:%d", tcpPort), "tls": fmt.Sprintf("mqtts://127.0.0.1:%d", tlsPort),
		"quic": fmt.Sprintf("mqtt-quic://127.0.0.1:%d", quicPort), "h3": fmt.Sprintf("https://127.0.0.1:%d", h3Port),
		"sse": fmt.Sprintf("https://127.0.0.1:%d", h3Port),
	}[proto]
	if broker == "" {
		t.Fatalf("QUIOT_CONNCOST=%q: want tcp, tls, quic, h3 or sse", proto)
	}
	prof := quictune.Default()
	newClient := func(id string) client.Client {
		c, err := client.New(client.Options{Broker: broker, RootCAs: pool, Tuning: prof, Logger: clientLog(t, id)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}

	time.Sleep(time.Second) // settle after start, as scripts/mqtt-vs-mosquitto.sh does before reading "idle"
	idle := procRSS(t, pid)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pub := newClient("pub")
	if _, err := pub.Publish(ctx, topic, []byte("retained"), client.PublishOptions{QoS: 1, Retain: true}); err != nil {
		t.Fatal(err)
	}

	// Subscribers, 50 connecting at a time: below the 64 MQTT connections
	// without CONNECT one address may have (--mqtt-max-preconnect-per-addr)
	// and the 64 QUIC handshakes in progress beyond which the broker asks
	// for a Retry (--quic-retry-above).
	var (
		ready      sync.WaitGroup
		deliveries atomic.Int64
		distinct   atomic.Int64
		allIn      = make(chan struct{})
		subErrs    = make(chan error, n)
	)
	deliver := func(seen []atomic.Bool, payload string) {
		deliveries.Add(1)
		k, err := strconv.Atoi(payload)
		if err != nil || k < 0 || k >= msgs || seen[k].Swap(true) {
			return
		}
		if distinct.Add(1) == int64(n*msgs) {
			close(allIn)
		}
	}
	ready.Add(n)
	window := make(chan struct{}, 50)
	start := time.Now()
	for i := range n {
		select {
		case window <- struct{}{}:
		case err := <-subErrs:
			t.Fatalf("subscriber %d of %d: %v", i, n, err)
		}
		seen := make([]atomic.Bool, msgs)
		var once sync.Once
		subscribed := func() { once.Do(func() { <-window; ready.Done() }) }
		handle := func(retained bool, payload string) {
			if retained {
				subscribed()
				return
			}
			deliver(seen, payload)
		}
		if proto == "sse" {
			go func() { subErrs <- sseSubscribe(ctx, broker, topic, pool, prof, handle) }()
			continue
		}
		c := newClient(fmt.Sprintf("sub-%d", i))
		go func() {
			subErrs <- c.Subscribe(ctx, topic, 0, func(m client.Message) { handle(m.Retained, string(m.Payload)) })
		}()
	}
	waitOrFail(t, &ready, subErrs, 5*time.Minute, "subscriptions")
	connectS := time.Since(start)
	time.Sleep(2 * time.Second) // settle, as scripts/mqttload.mjs does before reading "connected"
	connected := procRSS(t, pid)
	// Where it went: the broker's goroutines, stacks and heap in use.
	goroutines := scrape(t, metricsPort, "go_goroutines")
	stacks, heap := scrape(t, metricsPort, "go_memstats_stack_inuse_bytes"), scrape(t, metricsPort, "go_memstats_heap_inuse_bytes")

	tick := time.NewTicker(time.Second / rate)
	for k := range msgs {
		<-tick.C
		if _, err := pub.Publish(ctx, topic, []byte(strconv.Itoa(k)), client.PublishOptions{QoS: 1}); err != nil {
			t.Fatalf("publish %d: %v", k, err)
		}
	}
	tick.Stop()
	select {
	case <-allIn:
	case err := <-subErrs:
		t.Fatalf("a subscription ended: %v", err)
	case <-time.After(2 * time.Minute):
		t.Fatalf("%d of %d messages delivered after 2 minutes", distinct.Load(), n*msgs)
	}
	end := procRSS(t, pid)
	peak := procStatusKB(t, pid, "VmHWM:")
	mb := func(b float64) string { return fmt.Sprintf("%.1f MB", b/(1<<20)) } // MiB and KiB, as scripts/mqttload.mjs
	t.Logf("CONNCOST %s: %d subscribers connected in %v; then %.0f goroutines, stacks %s, heap in use %s", proto, n,
		connectS.Round(time.Millisecond), goroutines, mb(stacks), mb(heap))
	t.Logf("CONNCOST | %s | %s | %s | %.1f KB | %s | %s | %d/%d |", proto, mb(idle), mb(connected),
		(connected-idle)/float64(n)/1024, mb(end), mb(peak*1024), deliveries.Load(), n*msgs)
}

// waitOrFail waits for wg, failing the test when one of errs arrives first
// or after timeout.
func waitOrFail(t *testing.T, wg *sync.WaitGroup, errs <-chan error, timeout time.Duration, what string) {
	t.Helper()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case err := <-errs:
		t.Fatalf("%s: %v", what, err)
	case <-time.After(timeout):
		t.Fatalf("%s: not all done after %v", what, timeout)
	}
}

// sseSubscribe is a browser's EventSource over HTTP/3 on a connection of
// its own: GET /v1/topics/{filter} with Accept: text/event-stream, each
// message event's data passed to h (retained flag, text payload) until the
// stream ends.
func sseSubscribe(ctx context.Context, base, filter string, pool *x509.CertPool, prof *quictune.Profile, h func(retained bool, text string)) error {
	tr := &http3.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, NextProtos: []string{http3.NextProtoH3}}, QUICConfig: prof.QUICConfig()}
	defer tr.Close()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/topics/"+url.PathEscape(filter), nil)
	if err != nil {
		return fmt.Errorf("sse request: %w", err)
	}
	req.Header.Set("Accept", "text/event-stream")
	resp, err := tr.RoundTrip(req)
	if err != nil {
		return fmt.Errorf("sse subscribe: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("sse subscribe: %s", resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	event := ""
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "event: "); ok {
			event = v
		}
		if v, ok := strings.CutPrefix(line, "data: "); ok && event == "message" {
			var m struct {
				Retained bool   `json:"retained"`
				Text     string `json:"text"`
			}
			if err := json.Unmarshal([]byte(v), &m); err != nil {
				return fmt.Errorf("sse data %q: %w", v, err)
			}
			h(m.Retained, m.Text)
		}
	}
	if ctx.Err() != nil {
		return nil
	}
	return fmt.Errorf("sse stream ended: %v", sc.Err())
}

// procStatusKB is one kB field of /proc/PID/status (e.g. "VmHWM:").
func procStatusKB(t *testing.T, pid int, field string) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb
		}
	}
	return 0
}
