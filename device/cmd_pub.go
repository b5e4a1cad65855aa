package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quiot/quiot/device/client"
	"github.com/quiot/quiot/internal/certs"
	"github.com/quiot/quiot/internal/qmetrics"
	"github.com/quiot/quiot/internal/quictune"
	"github.com/quiot/quiot/internal/startpages"
	"github.com/quiot/quiot/internal/sysstat"
)

func init() {
	register(command{
		name:    "pub",
		summary: "publish messages to a broker (HTTP/3 or MQTT over QUIC)",
		run:     runPub,
	})
}

// clientFlags are the connection flags pub and sub share.
type clientFlags struct {
	broker     string
	tuning     string
	insecure   bool
	ca         string
	pin        string
	token      string
	everyReq   bool
	username   string
	cert       string
	key        string
	reconnect  bool
	maxBackoff time.Duration
	logLevel   string
	metricsOut string
	session    string // --session-file
}

func (f *clientFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.broker, "broker", "https://localhost:4433", "broker URL: https://host:4433 (HTTP/3), mqtt-quic://host:14567 (MQTT over QUIC), mqtts://host:8883 (MQTT over TLS) or mqtt://host:1883 (MQTT over TCP, no TLS)")
	fs.StringVar(&f.tuning, "tuning", "default", "QUIC tuning profile: default, lean or a TOML file")
	fs.BoolVar(&f.insecure, "insecure", false, "skip verification of the broker's certificate (development only)")
	fs.StringVar(&f.ca, "ca", "", "PEM file of the CA(s) that signed the broker's certificate (empty = the system's roots)")
	fs.StringVar(&f.pin, "pin", "", "accept only the broker certificate with this SHA-256 fingerprint (hex, colons optional; what broker --dev prints) instead of verifying it by a CA")
	fs.StringVar(&f.token, "token", "", "token (HTTP/3 Authorization: Bearer, once per connection unless --auth-every-request; MQTT password)")
	fs.BoolVar(&f.everyReq, "auth-every-request", false, "HTTP/3: send the token on every request instead of once per connection (costs header bytes per message)")
	fs.StringVar(&f.username, "username", "", "user name (HTTP Basic with --token as password; MQTT username)")
	fs.StringVar(&f.cert, "cert", "", "client certificate PEM file for mTLS (with --key)")
	fs.StringVar(&f.key, "key", "", "client key PEM file for mTLS (with --cert)")
	fs.BoolVar(&f.reconnect, "reconnect", true, "reconnect with exponential backoff and jitter after network errors and 503")
	fs.DurationVar(&f.maxBackoff, "max-backoff", 30*time.Second, "cap of the reconnect backoff")
	fs.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	fs.StringVar(&f.metricsOut, "metrics-out", "", "write this role's metrics (the eight of docs/BENCH.md, with diagnostics) as JSON to this file on exit")
	fs.StringVar(&f.session, "session-file", "", "keep TLS sessions in this file (mode 0600; it holds resumption secrets) so the next run resumes: a shorter handshake and, with allow_0rtt, the first publish in 0-RTT data; it also keeps the last connection's RTT, from which lean holds the next handshake's probes back")
}

// options turns the flags into client options and a logger.
func (f *clientFlags) options(stderr io.Writer) (client.Options, *slog.Logger, error) {
	log, err := newLogger(stderr, f.logLevel)
	if err != nil {
		return client.Options{}, nil, err
	}
	prof, err := quictune.Load(f.tuning)
	if err != nil {
		return client.Options{}, nil, fmt.Errorf("%w: --tuning: %v", errUsage, err)
	}
	o := client.Options{
		Broker:           f.broker,
		Tuning:           prof,
		Insecure:         f.insecure,
		Token:            f.token,
		Username:         f.username,
		AuthEveryRequest: f.everyReq,
		Reconnect:        f.reconnect,
		MaxBackoff:       f.maxBackoff,
		Logger:           log,
	}
	if f.session != "" {
		o.SessionCache = client.NewFileSessionCache(f.session, log)
	}
	if f.insecure && f.ca != "" {
		return o, nil, fmt.Errorf("%w: --insecure and --ca exclude each other", errUsage)
	}
	if f.pin != "" {
		if f.insecure || f.ca != "" {
			return o, nil, fmt.Errorf("%w: --pin excludes --ca and --insecure", errUsage)
		}
		pin, err := certs.ParseFingerprint(f.pin)
		if err != nil {
			return o, nil, fmt.Errorf("%w: --pin: %v", errUsage, err)
		}
		o.PinSHA256 = pin
	}
	if f.ca != "" {
		pool, err := certs.LoadPool(f.ca)
		if err != nil {
			return o, nil, err
		}
		o.RootCAs = pool
	}
	if (f.cert == "") != (f.key == "") {
		return o, nil, fmt.Errorf("%w: --cert and --key go together", errUsage)
	}
	if f.cert != "" {
		pair, err := tls.LoadX509KeyPair(f.cert, f.key)
		if err != nil {
			return o, nil, fmt.Errorf("couldn't load client certificate: %w", err)
		}
		o.Certificate = &pair
	}
	if f.maxBackoff <= 0 {
		return o, nil, fmt.Errorf("%w: --max-backoff must be positive", errUsage)
	}
	return o, log, nil
}

// tlsRemedy says how to make a client trust a broker whose certificate it
// could not verify.
const tlsRemedy = "the broker's certificate is not signed by a CA this client trusts: " +
	"give --ca FILE (the CA that signed it; a broker --dev writes its certificate to the file it prints at start), " +
	"--pin SHA256 (the fingerprint a broker --dev prints) or, for development only, --insecure"

// explainConnErr adds what to do to a connection error the user can cure
// with a flag: a broker certificate that did not verify.
func explainConnErr(err error) error {
	if err == nil {
		return nil
	}
	_, cv := errors.AsType[*tls.CertificateVerificationError](err)
	_, ua := errors.AsType[x509.UnknownAuthorityError](err)
	_, he := errors.AsType[x509.HostnameError](err)
	switch {
	case cv || ua:
		return fmt.Errorf("%w\n%s", err, tlsRemedy)
	case he:
		return fmt.Errorf("%w\nthe broker's certificate is for other names: connect by one of them, or give --pin SHA256 (its fingerprint) or, for development only, --insecure", err)
	case errors.Is(err, client.ErrPinMismatch):
		return fmt.Errorf("%w\ncheck --pin against the fingerprint the broker prints at start (a broker --dev makes a new certificate each start)", err)
	}
	return err
}

// pubPlan is what `quiot pub` publishes.
type pubPlan struct {
	topic    string
	payload  []byte
	qos      byte
	retain   bool
	rate     float64 // messages per second; 0 = no pacing
	count    int     // 0 = until ctx is done
	inflight int     // publishes awaiting their ack at once (>= 1)
	// next, when set, supplies each message's payload instead of payload
	// (--sensor, --stdin); it blocks until a reading is available and
	// returns errEndOfInput when there will be no more.
	next func(context.Context) ([]byte, error)
	// source names what next reads, for errors ("sensor" when empty).
	source string
	// afterFirst, when set, runs once after the first acknowledged publish
	// (runPub: give back the start-up pages, internal/startpages).
	afterFirst func()
}

// pubResult is what a publish run measured.
type pubResult struct {
	Sent      int           // publishes that returned successfully
	Start     time.Time     // first publish started (connection setup included)
	TTFD      time.Duration // Start -> first acknowledgement (time to first data)
	Elapsed   time.Duration // Start -> last acknowledgement
	LastSeq   uint64        // sequence number of the last acknowledged message
	Handshake time.Duration // QUIC (or TCP) handshake of the first connection
	Stopped   bool          // ctx ended the run before count was reached
	// StampDelays are, per publish call in call order (the first
	// maxStampDelays), the acknowledged message's send-time stamp minus
	// the call: the connection setup it waited for (bench: latency from
	// the publish call).
	StampDelays []time.Duration
}

// maxStampDelays bounds pubResult.StampDelays.
const maxStampDelays = 10000

// publishLoop publishes p.count messages (or until ctx is done) at p.rate,
// with up to p.inflight publishes in flight; order is kept with inflight 1.
// It stops at the first error that retries did not cure.
func publishLoop(ctx context.Context, c client.Client, p pubPlan, log *slog.Logger) (pubResult, error) {
	if p.inflight < 1 {
		p.inflight = 1
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var (
		mu    sync.Mutex
		res   pubResult
		wg    sync.WaitGroup
		slots = make(chan struct{}, p.inflight)
	)
	res.Start = time.Now()
	done := func(i int, asked time.Time, ack client.Ack, err error) {
		now := time.Now()
		first := false
		defer func() { // deferred before the unlock, so it runs after it
			if first {
				p.afterFirst()
			}
		}()
		mu.Lock()
		defer mu.Unlock()
		if err == nil && !ack.Sent.IsZero() && i < maxStampDelays {
			if len(res.StampDelays) <= i {
				res.StampDelays = append(res.StampDelays, make([]time.Duration, i+1-len(res.StampDelays))...)
			}
			res.StampDelays[i] = max(0, ack.Sent.Sub(asked))
		}
		if err != nil {
			if ctx.Err() == nil {
				cancel(err)
			}
			return
		}
		if res.Sent == 0 {
			res.TTFD = now.Sub(res.Start)
			first = p.afterFirst != nil
		}
		res.Sent++
		res.Elapsed = now.Sub(res.Start)
		if ack.Seq > res.LastSeq {
			res.LastSeq = ack.Seq
		}
		if ack.Spooled {
			log.Debug("spooled", "topic", p.topic, "id", ack.SpoolID)
			return
		}
		log.Debug("published", "topic", p.topic, "seq", ack.Seq)
	}
	opts := client.PublishOptions{QoS: p.qos, Retain: p.retain}
	var interval time.Duration
	if p.rate > 0 {
		interval = time.Duration(float64(time.Second) / p.rate)
	}
loop:
	for i := 0; p.count == 0 || i < p.count; i++ {
		if interval > 0 && i > 0 {
			// Pace against the start, so a slow ack does not lower the rate.
			if err := sleepUntil(ctx, res.Start.Add(time.Duration(i)*interval)); err != nil {
				break loop
			}
		}
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			break loop
		}
		payload := p.payload
		if p.next != nil {
			b, err := p.next(ctx)
			if errors.Is(err, errEndOfInput) {
				<-slots
				break loop // --stdin: the input ended
			}
			if err != nil {
				<-slots
				if ctx.Err() == nil {
					src := p.source
					if src == "" {
						src = "sensor"
					}
					cancel(fmt.Errorf("%s: %w", src, err))
				}
				break loop
			}
			payload = b
		}
		asked := time.Now() // the application asked to publish
		if p.inflight == 1 {
			ack, err := c.Publish(ctx, p.topic, payload, opts)
			done(i, asked, ack, err)
			<-slots
			continue
		}
		wg.Go(func() {
			defer func() { <-slots }()
			ack, err := c.Publish(ctx, p.topic, payload, opts)
			done(i, asked, ack, err)
		})
	}
	wg.Wait()
	res.Handshake = c.Stats().Handshake
	err := context.Cause(ctx)
	if err == nil {
		return res, nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		res.Stopped = true
		return res, nil // interrupted: a clean stop
	}
	return res, err
}

// sleepUntil waits until t or until ctx is done.
func sleepUntil(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err()
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// makePayload returns the payload of --payload or --payload-size.
func makePayload(text string, textSet bool, size int) ([]byte, error) {
	switch {
	case textSet && size >= 0:
		return nil, fmt.Errorf("%w: --payload and --payload-size exclude each other", errUsage)
	case textSet:
		return []byte(text), nil
	case size >= 0:
		const filler = "quiot-payload-"
		b := make([]byte, size)
		for i := range b {
			b[i] = filler[i%len(filler)]
		}
		return b, nil
	default:
		return nil, fmt.Errorf("%w: want --payload TEXT or --payload-size N", errUsage)
	}
}

func runPub(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("pub", stderr)
	var cf clientFlags
	cf.register(fs)
	topic := fs.String("topic", "", "topic to publish to (required)")
	qos := fs.Int("qos", 1, "0 (no acknowledgement awaited for MQTT) or 1 (acknowledged once the broker accepted it)")
	retain := fs.Bool("retain", false, "ask the broker to keep the message as the topic's retained one")
	payload := fs.String("payload", "", "message payload text")
	payloadSize := fs.Int("payload-size", -1, "payload of this many filler bytes instead of --payload (-1 = use --payload)")
	rate := fs.Float64("rate", 0, "messages per second (0 = each as soon as the previous one is acknowledged)")
	count := fs.Int("count", 1, "messages to publish (0 = until interrupted)")
	inflight := fs.Int("inflight", 1, "publishes awaiting acknowledgement at once (order is kept only with 1)")
	mode := fs.String("mode", "request", "HTTP/3 publish mode: request (one request per message) or stream (one long-lived request)")
	quiet := fs.Bool("quiet", false, "print no summary line")
	sensor := fs.String("sensor", "", sensorFlagHelp)
	connectTimeout := fs.Duration("connect-timeout", 30*time.Second, "with a finite --count and no --spool: give up (exit status 1) when the broker cannot be reached for this long; 0 = retry for ever (always so for --count 0 and --spool)")
	var sf spoolFlags
	sf.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *topic == "" {
		return fmt.Errorf("%w: --topic is required", errUsage)
	}
	if *qos != 0 && *qos != 1 {
		return fmt.Errorf("%w: --qos %d (want 0 or 1)", errUsage, *qos)
	}
	if *rate < 0 || *count < 0 || *inflight < 1 {
		return fmt.Errorf("%w: --rate and --count must not be negative, --inflight must be at least 1", errUsage)
	}
	if *mode != "request" && *mode != "stream" {
		return fmt.Errorf("%w: --mode %q (want request or stream)", errUsage, *mode)
	}
	payloadSet := false
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "payload" {
			payloadSet = true
		}
	})
	if err := sf.check(fs, *sensor); err != nil {
		return err
	}
	body, err := makePayload(*payload, payloadSet || *sensor != "" || sf.stdin, *payloadSize)
	if err != nil {
		return err
	}
	opts, log, err := cf.options(stderr)
	if err != nil {
		return err
	}
	opts.PublishMode = *mode
	if *connectTimeout < 0 {
		return fmt.Errorf("%w: --connect-timeout must not be negative", errUsage)
	}
	if *count > 0 && !sf.stdin && sf.dir == "" {
		opts.ConnectTimeout = *connectTimeout // a one-shot run; others wait for the broker
	}
	meter, err := newRoleMeter(cf.metricsOut, "pub", &opts)
	if err != nil {
		return err
	}
	defer meter.close()
	c, sc, err := sf.newClient(opts, log)
	if err != nil {
		return err
	}
	plan := pubPlan{
		topic: *topic, payload: body, qos: byte(*qos), retain: *retain,
		rate: *rate, count: *count, inflight: *inflight,
	}
	if *count != 1 {
		var stopAfterGC atomic.Pointer[func()]
		plan.afterFirst = func() {
			stop := pubSteadyState(log)
			stopAfterGC.Store(&stop)
		}
		defer func() {
			if stop := stopAfterGC.Load(); stop != nil {
				(*stop)()
			}
		}()
	}
	closeSensor, err := startPub(ctx, fs, *sensor, &plan, log)
	if err != nil {
		c.Close()
		return err
	}
	defer closeSensor()
	if sf.stdin {
		sf.applyStdin(ctx, fs, stdinReader, &plan)
	}
	res, err := publishLoop(ctx, c, plan, log)
	if sc != nil {
		err = drainSpool(ctx, sc, &res, err, log)
	}
	if cerr := c.Close(); cerr != nil {
		log.Debug("close", "error", cerr)
	}
	if !*quiet {
		if sc != nil {
			fmt.Fprintln(stdout, spoolSummary(&res, *topic, *qos, sc.SpoolStats(), sf.dir))
		} else {
			fmt.Fprintln(stdout, pubSummary(&res, *topic, *qos))
		}
	}
	merr := meter.finish(uint64(res.Sent), func(m *qmetrics.RoleMetrics) {
		m.MessagesSent = uint64(res.Sent)
		m.HandshakeMs = qmetrics.Ms(res.Handshake)
		m.TTFDMs = qmetrics.Ms(res.TTFD)
		for _, d := range res.StampDelays {
			m.StampDelaysMs = append(m.StampDelaysMs, qmetrics.Ms(d))
		}
	})
	return errors.Join(explainConnErr(err), merr)
}

// pubSummary is the one-line report of a publish run.
func pubSummary(r *pubResult, topicName string, qos int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "published %d message(s) to %s (qos %d)", r.Sent, topicName, qos)
	if r.Sent > 0 {
		fmt.Fprintf(&b, " in %s", r.Elapsed.Round(time.Millisecond))
		if r.Elapsed > 0 && r.Sent > 1 {
			fmt.Fprintf(&b, " (%.1f msg/s)", float64(r.Sent)/r.Elapsed.Seconds())
		}
		fmt.Fprintf(&b, "; handshake %.2f ms; time to first data %.2f ms", ms(r.Handshake), ms(r.TTFD))
		if r.LastSeq > 0 {
			fmt.Fprintf(&b, "; last seq %d", r.LastSeq)
		}
	}
	if r.Stopped {
		b.WriteString("; interrupted")
	}
	return b.String()
}

// ms converts a duration to fractional milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// roleMeter measures a pub or sub process for --metrics-out: a counting
// UDP socket and a QUIC tracer under the client (QUIC schemes only), and
// the process's CPU and memory from /proc. Without --metrics-out none of
// this is installed, so it costs nothing.
type roleMeter struct {
	path    string
	m       *qmetrics.RoleMetrics
	pc      qmetrics.CountingPacketConn
	tracer  *qmetrics.Tracer
	sampler *sysstat.Sampler
}

// newRoleMeter prepares measurement of role and installs the socket and
// tracer in opts. It returns nil when path is empty.
func newRoleMeter(path, role string, opts *client.Options) (*roleMeter, error) {
	if path == "" {
		return nil, nil
	}
	if st, err := os.Stat(filepath.Dir(path)); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("%w: --metrics-out %s: no such directory %s", errUsage, path, filepath.Dir(path))
	}
	u, err := url.Parse(opts.Broker)
	if err != nil {
		return nil, fmt.Errorf("%w: bad --broker URL %q: %v", errUsage, opts.Broker, err)
	}
	scheme := strings.ToLower(u.Scheme)
	proto := "h3"
	if strings.HasPrefix(scheme, "mqtt") {
		proto = "mqtt"
	}
	r := &roleMeter{path: path, m: qmetrics.NewRoleMetrics(role, proto)}
	if scheme == "https" || scheme == "mqtt-quic" {
		udp, err := net.ListenUDP("udp", nil)
		if err != nil {
			return nil, fmt.Errorf("couldn't open a UDP socket: %w", err)
		}
		r.pc = qmetrics.NewCountingPacketConn(udp)
		r.tracer = qmetrics.NewTracer(nil)
		opts.PacketConn = r.pc
		opts.Tracer = r.tracer.ConnectionTracer
	}
	r.sampler, err = sysstat.NewSampler(nil)
	if err == nil {
		err = r.sampler.Start()
	}
	if err != nil {
		r.close()
		return nil, fmt.Errorf("couldn't measure this process: %w", err)
	}
	return r, nil
}

// finish adds CPU, memory, wire and tracer figures to the metrics fill set
// and writes the file. msgs is the number of messages the role handled.
func (r *roleMeter) finish(msgs uint64, fill func(m *qmetrics.RoleMetrics)) error {
	if r == nil {
		return nil
	}
	u, err := r.sampler.Stop()
	if err != nil {
		return fmt.Errorf("couldn't measure this process: %w", err)
	}
	r.m.SetUsage(u, msgs)
	if r.pc != nil {
		r.m.SetWire(r.pc.Stats())
	}
	if r.tracer != nil {
		r.m.SetTrace(r.tracer.Stats())
	}
	fill(r.m)
	return r.m.WriteFile(r.path)
}

// close closes the socket (after the client is closed).
func (r *roleMeter) close() {
	if r != nil && r.pc != nil {
		_ = r.pc.Close()
	}
}

// pubGCPercent is the collector's GC percent for a long-running publisher
// once it runs (unless GOGC is set): a heap allowed to grow 50 % over the
// live heap instead of Go's 100 % (whose 4 MB minimum a publisher reaches
// after a few minutes at 1 msg/s); about 0.6 MB less RSS in the five-minute
// steady state on amd64, for a collection about every minute. Not set
// before the first publish: collections during start-up cost more than
// they free (docs/BENCH.md, "Publisher memory").
const pubGCPercent = 50

// pubSteadyState readies a publisher for a long run after its first
// publish: the start-up pages go back (releaseStartPages), the heap target
// shrinks (pubGCPercent), and from then on the pages each garbage
// collection maps back go back after it (startpages.AfterGC, at most once
// per pubGiveBackEvery). It returns the function that stops the latter.
func pubSteadyState(log *slog.Logger) (stop func()) {
	releaseStartPages(log)
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(pubGCPercent)
	}
	return startpages.AfterGC(pubGiveBackEvery, func(n int64, err error) {
		if err != nil {
			log.Debug("pages kept after a collection", "error", err)
			return
		}
		log.Debug("pages released after a collection", "bytes", n)
	})
}

// pubGiveBackEvery bounds how often a publisher gives back the binary's
// pages after a collection: at 1 msg/s it collects about once a minute, so
// each collection is followed by one; a fast publisher that collects
// several times a second gives back at most twice a minute.
const pubGiveBackEvery = 30 * time.Second

// releaseStartPages gives back the pages of the binary that only start-up
// and the connection set-up touched (internal/startpages): a publisher or
// subscriber that runs for hours keeps only what its loop reads mapped.
func releaseStartPages(log *slog.Logger) {
	n, err := startpages.Release()
	if err != nil {
		log.Debug("start-up pages kept", "error", err)
		return
	}
	log.Debug("start-up pages released", "bytes", n)
}
