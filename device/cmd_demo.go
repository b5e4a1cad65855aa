package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/device/client"
	"github.com/quiot/quiot/internal/certs"
	"github.com/quiot/quiot/internal/quictune"
)

func init() {
	register(command{
		name:    "demo",
		summary: "messages flowing on loopback, then the quick HTTP/3 vs MQTT-over-QUIC bench (make demo)",
		run:     runDemo,
	})
}

// demoPlan is what `quiot demo` runs.
type demoPlan struct {
	count   int
	rate    float64
	mode    string
	tuning  *quictune.Profile
	timeout time.Duration
}

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("demo", stderr)
	simple := fs.Bool("simple", false, "only the live loopback demo (in-process broker), without the quick bench that follows it")
	out := fs.String("out", "", "directory of the quick bench's results (empty = results/demo-TIMESTAMP)")
	count := fs.Int("count", 20, "messages to publish")
	rate := fs.Float64("rate", 20, "messages per second")
	mode := fs.String("mode", "request", "HTTP/3 publish mode: request or stream")
	tuning := fs.String("tuning", "default", "QUIC tuning profile: default, lean or a TOML file")
	timeout := fs.Duration("timeout", 30*time.Second, "give up when the messages have not all arrived by then")
	logLevel := fs.String("log-level", "warn", "log level: debug, info, warn, error")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *count < 1 || *rate <= 0 || *timeout <= 0 {
		return fmt.Errorf("%w: --count, --rate and --timeout must be positive", errUsage)
	}
	if *mode != "request" && *mode != "stream" {
		return fmt.Errorf("%w: --mode %q (want request or stream)", errUsage, *mode)
	}
	prof, err := quictune.Load(*tuning)
	if err != nil {
		return fmt.Errorf("%w: --tuning: %v", errUsage, err)
	}
	log, err := newLogger(stderr, *logLevel)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, "live: an HTTP/3 broker, subscriber and publisher on loopback")
	if err := demo(ctx, demoPlan{count: *count, rate: *rate, mode: *mode, tuning: prof, timeout: *timeout}, stdout, log); err != nil {
		return err
	}
	if *simple {
		return nil
	}
	if !benchBuiltIn {
		fmt.Fprintln(stdout, "\nthe quick bench that follows is not in the Pi build (32-bit ARM): run `quiot demo` or `quiot bench --quick` on a host")
		return nil
	}
	// Then the main job: `quiot bench --quick`, each role its own process
	// of this binary, through the link emulator, ending with the headline.
	dir := *out
	if dir == "" {
		dir = filepath.Join("results", "demo-"+time.Now().UTC().Format("20060102-150405"))
	}
	fmt.Fprintln(stdout, "\nquick bench: HTTP/3 vs MQTT over QUIC on lan and nbiot, lean profile (about 1.5 minutes)")
	return runBench(ctx, []string{"--quick", "--out", dir, "--log-level", *logLevel}, stdout, stderr)
}

// demo starts a broker with a dev certificate on 127.0.0.1:0, subscribes,
// publishes p.count stamped messages and prints each delivery with its
// latency, then a summary.
func demo(ctx context.Context, p demoPlan, stdout io.Writer, log *slog.Logger) error {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	stdout = &lockedWriter{w: stdout} // the subscriber's goroutine prints too

	url, pool, stop, err := startDemoBroker(p.tuning, stdout, log)
	if err != nil {
		return err
	}
	defer stop()
	newClient := func(mode string) (client.Client, error) {
		return client.New(client.Options{Broker: url, RootCAs: pool, Tuning: p.tuning, PublishMode: mode, Reconnect: true, Logger: log})
	}
	sub, err := newClient("")
	if err != nil {
		return err
	}
	defer sub.Close()
	pub, err := newClient(p.mode)
	if err != nil {
		return err
	}
	defer pub.Close()

	const filter, topicName = "demo/#", "demo/sensor-1/temperature"
	ds := &demoSub{out: stdout, count: p.count, inOrder: true, got: make(chan struct{})}
	ready := make(chan struct{})
	subErr := make(chan error, 1)
	sctx, scancel := context.WithCancel(ctx)
	defer scancel()
	sctx = client.WithSubscribed(sctx, func() {
		select {
		case <-ready:
		default:
			close(ready)
		}
	})
	go func() { subErr <- sub.Subscribe(sctx, filter, 0, ds.deliver) }()
	select {
	case <-ready:
		fmt.Fprintf(stdout, "sub      subscribed to %s (handshake %.2f ms)\n", filter, ms(sub.Stats().Handshake))
	case err := <-subErr:
		return fmt.Errorf("subscriber: %w", err)
	case <-ctx.Done():
		return demoEnd(ctx, "subscribing")
	}

	fmt.Fprintf(stdout, "pub      %d messages to %s at %.0f msg/s (%s mode, qos 1)\n", p.count, topicName, p.rate, p.mode)
	plan := pubPlan{topic: topicName, qos: 1, rate: p.rate, count: p.count, inflight: 1}
	res, err := publishDemo(ctx, pub, plan, log)
	if err != nil {
		return fmt.Errorf("publisher: %w", err)
	}
	select {
	case <-ds.got:
	case err := <-subErr:
		return fmt.Errorf("subscriber: %w", err)
	case <-ctx.Done():
		return demoEnd(ctx, "waiting for deliveries")
	}
	scancel()
	<-subErr // the handler no longer runs: ds is ours
	return ds.summary(stdout, res)
}

// startDemoBroker starts an HTTP/3-only broker with a fresh dev certificate
// on 127.0.0.1:0 and prints its URL and the certificate's fingerprint. It
// returns the URL, a pool trusting the certificate and stop, which shuts
// the broker down.
func startDemoBroker(tuning *quictune.Profile, stdout io.Writer, log *slog.Logger) (url string, roots *x509.CertPool, stop func(), err error) {
	dev, err := certs.SelfSigned(nil, nil)
	if err != nil {
		return "", nil, nil, err
	}
	b, err := broker.New(&broker.Options{
		Listen:       "127.0.0.1:0",
		DisableTCP:   true,
		Certificates: []tls.Certificate{dev.TLS},
		Tuning:       tuning,
		Logger:       log,
	})
	if err != nil {
		return "", nil, nil, err
	}
	if err := b.Start(); err != nil {
		return "", nil, nil, err
	}
	stop = func() {
		sctx, scancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer scancel()
		_ = b.Shutdown(sctx)
	}
	url = "https://" + b.Addr().String()
	fmt.Fprintf(stdout, "broker   %s (HTTP/3; dev certificate SHA-256 %s)\n", url, certs.Fingerprint(dev.TLS.Certificate[0]))
	roots = x509.NewCertPool()
	roots.AddCert(dev.TLS.Leaf)
	return url, roots, stop, nil
}

// demoSub is the demo subscriber's record of its deliveries. Its handler,
// deliver, runs on the subscriber's goroutine; the rest is read once that
// goroutine has ended.
type demoSub struct {
	out       io.Writer
	count     int // deliveries awaited
	latencies []time.Duration
	lastSeq   uint64
	inOrder   bool
	got       chan struct{} // closed at the count-th delivery
}

// deliver prints one delivery (or gap) and records its latency and order.
func (s *demoSub) deliver(m client.Message) {
	if m.Gap {
		fmt.Fprintf(s.out, "sub      gap: messages lost on %s\n", orUnknown(m.Topic))
		return
	}
	if m.Seq <= s.lastSeq {
		s.inOrder = false
	}
	s.lastSeq = m.Seq
	l := m.Latency()
	s.latencies = append(s.latencies, l)
	fmt.Fprintf(s.out, "sub      %-28s #%-3d %8.3f ms  %s\n", m.Topic, m.Seq, ms(l), m.Payload)
	if len(s.latencies) == s.count {
		close(s.got)
	}
}

// summary prints the deliveries' count, order and latency percentiles with
// the publisher's handshake and time to first data from res. It fails when
// messages arrived out of order.
func (s *demoSub) summary(w io.Writer, res pubResult) error {
	sorted := slices.Clone(s.latencies)
	slices.Sort(sorted)
	q := func(f float64) float64 { return ms(sorted[int(f*float64(len(sorted)-1)+0.5)]) }
	order := "in order"
	if !s.inOrder {
		order = "OUT OF ORDER"
	}
	fmt.Fprintf(w, "summary  %d/%d delivered %s; latency p50 %.3f ms, p95 %.3f ms, max %.3f ms; publisher handshake %.2f ms, time to first data %.2f ms\n",
		len(s.latencies), res.Sent, order, q(0.5), q(0.95), ms(sorted[len(sorted)-1]), ms(res.Handshake), ms(res.TTFD))
	if !s.inOrder {
		return errors.New("messages were delivered out of order")
	}
	return nil
}

// publishDemo publishes p.count small JSON readings, each stamped.
func publishDemo(ctx context.Context, c client.Client, p pubPlan, log *slog.Logger) (pubResult, error) {
	var res pubResult
	res.Start = time.Now()
	interval := time.Duration(float64(time.Second) / p.rate)
	for i := range p.count {
		if i > 0 {
			if err := sleepUntil(ctx, res.Start.Add(time.Duration(i)*interval)); err != nil {
				return res, demoEnd(ctx, "publishing")
			}
		}
		payload := fmt.Appendf(nil, `{"n":%d,"celsius":%.1f}`, i+1, 21.0+float64(i%7)/10)
		ack, err := c.Publish(ctx, p.topic, payload, client.PublishOptions{QoS: p.qos})
		if err != nil {
			if ctx.Err() != nil {
				return res, demoEnd(ctx, "publishing")
			}
			return res, err
		}
		if res.Sent == 0 {
			res.TTFD = time.Since(res.Start)
		}
		res.Sent++
		res.LastSeq = ack.Seq
		log.Debug("published", "seq", ack.Seq)
	}
	res.Elapsed = time.Since(res.Start)
	res.Handshake = c.Stats().Handshake
	return res, nil
}

// demoEnd explains why the demo stopped early: interrupted (no error) or
// timed out.
func demoEnd(ctx context.Context, doing string) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("timed out while %s", doing)
	}
	return nil
}

// lockedWriter serializes writes to w.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
