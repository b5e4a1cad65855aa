package bench

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"math"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ErrInterrupted is returned by Run when its context ended before the
// matrix was done; the results so far are written, marked partial.
var ErrInterrupted = errors.New("bench interrupted")

// Options configure a bench run. Spec, Out and Link are required.
type Options struct {
	// Spec is the matrix and workload.
	Spec Spec
	// Out is the output directory; created if missing.
	Out string
	// Link starts the link emulator for each client.
	Link Link
	// Binary is the quiot binary the roles run as; "" means this
	// executable (os.Executable).
	Binary string
	// Logger receives diagnostics; nil means discard.
	Logger *slog.Logger
	// Progress receives the progress: a bar when it is a terminal, one
	// line per run otherwise; nil means none.
	Progress io.Writer
	// Version is written to summary.json; "" means "dev".
	Version string
	// Seed makes link impairment repeatable; runs derive their seeds from it.
	// Zero means 1.
	Seed uint64
	// ReadyTimeout bounds a role's start-up; zero means 15 s.
	ReadyTimeout time.Duration
	// RunTimeout bounds one publisher; zero means a limit derived from the
	// workload and the link profile (at least 60 s).
	RunTimeout time.Duration
	// MaxFailures aborts the bench after this many failed runs in a row
	// (a broken binary or setup); zero means 3.
	MaxFailures int
	// Title heads the report; "" means the default.
	Title string
	// Env is extra environment for every role process.
	Env []string
	// NoReport skips report.md and the plots (tests of the harness).
	NoReport bool
	// OnRun, when set, is called after each finished run with the number
	// done and the total.
	OnRun func(done, total int)
}

func (o *Options) withDefaults() (Options, error) {
	r := *o
	if r.Out == "" {
		return r, errors.New("no output directory")
	}
	if r.Link == nil {
		return r, errors.New("no link emulator")
	}
	if r.Binary == "" {
		exe, err := os.Executable()
		if err != nil {
			return r, fmt.Errorf("couldn't find the quiot binary: %w", err)
		}
		r.Binary = exe
	}
	if r.Logger == nil {
		r.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if r.Version == "" {
		r.Version = "dev"
	}
	if r.Seed == 0 {
		r.Seed = 1
	}
	if r.ReadyTimeout == 0 {
		r.ReadyTimeout = 15 * time.Second
	}
	if r.MaxFailures == 0 {
		r.MaxFailures = 3
	}
	return r, nil
}

// Result is what Run produced.
type Result struct {
	// Summary is summary.json's content.
	Summary *Summary
	// Samples are every repeat (runs.csv).
	Samples []Sample
	// Links describes the profiles used.
	Links map[string]LinkInfo
}

// Run executes the matrix: for each run it starts a broker, a subscriber
// and a publisher as processes of Binary, the subscriber and publisher each
// behind its own link emulator, and collects their metrics. After every run
// it rewrites runs.csv and summary.json, so a killed bench leaves its
// results; at the end (also on ctx cancellation, which stops the current
// run's processes) it writes report.md and the plots. The error is
// ErrInterrupted (wrapped) when ctx ended early; the results are valid
// either way.
func Run(ctx context.Context, o Options) (*Result, error) {
	opts, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := opts.Spec.Validate(); err != nil {
		return nil, fmt.Errorf("bad matrix: %w", err)
	}
	links := map[string]LinkInfo{}
	for _, p := range opts.Spec.Profiles {
		info, ok := opts.Link.Info(p)
		if !ok {
			return nil, fmt.Errorf("unknown link profile %q", p)
		}
		links[p] = info
	}
	if err := os.MkdirAll(filepath.Join(opts.Out, "runs"), 0o755); err != nil {
		return nil, fmt.Errorf("couldn't create output directory: %w", err)
	}
	spec := opts.Spec
	tunings, err := writeTunings(opts.Out, spec.Tunings)
	if err != nil {
		return nil, err
	}
	spec.Tunings = tunings
	runs := spec.Expand()
	res := &Result{Links: links, Summary: &Summary{
		Host: HostInfo(), Version: opts.Version, Started: time.Now(), Tunings: tunings,
		Workload: Workload{Count: spec.Count, Rate: spec.Rate, QoS: spec.QoS, Repeat: spec.Repeat, Inflight: max(1, spec.Inflight)},
	}}
	prog := newProgress(opts.Progress, len(runs))
	reason := ""
	failsInRow := 0
	for i, r := range runs {
		if ctx.Err() != nil {
			reason = fmt.Sprintf("interrupted after %d of %d runs", i, len(runs))
			break
		}
		prog.start(i, r.ID())
		began := time.Now()
		s := runOne(ctx, &opts, r, links[r.Profile])
		if ctx.Err() != nil {
			// The run was cut short by the interruption: not a result.
			reason = fmt.Sprintf("interrupted after %d of %d runs", i, len(runs))
			break
		}
		res.Samples = append(res.Samples, s)
		if s.OK {
			failsInRow = 0
		} else {
			failsInRow++
			opts.Logger.Warn("run failed", "run", r.ID(), "error", s.Err)
		}
		prog.done(i, r.ID(), s.OK, time.Since(began))
		res.Summary.Runs = Aggregate(res.Samples)
		res.Summary.Finished = time.Now()
		res.Summary.Partial, res.Summary.PartialReason = true, fmt.Sprintf("in progress: %d of %d runs", i+1, len(runs))
		if err := writeData(opts.Out, res); err != nil {
			return res, err
		}
		if opts.OnRun != nil {
			opts.OnRun(i+1, len(runs))
		}
		if failsInRow >= opts.MaxFailures {
			reason = fmt.Sprintf("aborted after %d failed runs in a row (last: %s)", failsInRow, s.Err)
			break
		}
	}
	prog.stop()
	failed := 0
	for _, s := range res.Samples {
		if !s.OK {
			failed++
		}
	}
	sum := res.Summary
	sum.Runs = Aggregate(res.Samples)
	sum.Finished = time.Now()
	sum.Partial, sum.PartialReason = false, ""
	switch {
	case reason != "":
		sum.Partial, sum.PartialReason = true, reason
		if failed > 0 {
			sum.PartialReason += fmt.Sprintf("; %d run(s) failed", failed)
		}
	case failed > 0:
		sum.Partial, sum.PartialReason = true, fmt.Sprintf("%d of %d run(s) failed", failed, len(runs))
	}
	if err := writeData(opts.Out, res); err != nil {
		return res, err
	}
	if !opts.NoReport {
		if err := WriteReport(ReportInput{Summary: sum, Samples: res.Samples, Links: links, Dir: opts.Out, Title: opts.Title}); err != nil {
			return res, err
		}
	}
	if ctx.Err() != nil {
		return res, fmt.Errorf("%w: %s", ErrInterrupted, reason)
	}
	return res, nil
}

// writeData writes runs.csv and summary.json.
func writeData(dir string, res *Result) error {
	if err := WriteCSVFile(filepath.Join(dir, "runs.csv"), res.Samples); err != nil {
		return err
	}
	return WriteSummary(filepath.Join(dir, "summary.json"), res.Summary)
}

// writeTunings writes the TOML of tunings that have one into dir/tunings/
// and points their Profile at the file.
func writeTunings(dir string, ts []Tuning) ([]Tuning, error) {
	out := make([]Tuning, len(ts))
	for i, t := range ts {
		out[i] = t
		if t.TOML == "" {
			if t.Profile == "" {
				out[i].Profile = t.Name
			}
			continue
		}
		if err := os.MkdirAll(filepath.Join(dir, "tunings"), 0o755); err != nil {
			return nil, fmt.Errorf("couldn't create tunings directory: %w", err)
		}
		name := strings.NewReplacer("/", "_", "=", "-", " ", "_").Replace(t.Name) + ".toml"
		p, err := filepath.Abs(filepath.Join(dir, "tunings", name))
		if err != nil {
			return nil, fmt.Errorf("couldn't resolve tuning file: %w", err)
		}
		if err := os.WriteFile(p, []byte(t.TOML), 0o644); err != nil {
			return nil, fmt.Errorf("couldn't write tuning %s: %w", t.Name, err)
		}
		out[i].Profile = p
	}
	return out, nil
}

// freePort returns a port that is free on 127.0.0.1 for both UDP and TCP
// (the broker serves HTTP/3 over UDP and HTTP/1.1+2 over TCP on one port).
func freePort() (int, error) {
	for range 20 {
		u, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("couldn't find a free port: %w", err)
		}
		port := u.LocalAddr().(*net.UDPAddr).Port
		t, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		u.Close()
		if err != nil {
			continue
		}
		t.Close()
		return port, nil
	}
	return 0, errors.New("couldn't find a port free for both UDP and TCP")
}

// runSeed derives a repeatable seed for one run's link emulators.
func runSeed(base uint64, r Job, role string) int64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%d/%s/%s", base, r.ID(), role)
	return int64(h.Sum64() >> 1)
}

// pubTimeout bounds the publisher: the paced duration plus, per message,
// a few RTTs and the serialization time on the link, with room for loss.
func pubTimeout(o *Options, link LinkInfo) time.Duration {
	if o.RunTimeout > 0 {
		return o.RunTimeout
	}
	s := o.Spec
	n := float64(s.Count)
	paced := 0.0
	if s.Rate > 0 {
		paced = n / s.Rate
	}
	perMsg := 4 * link.RTTMs() / 1000
	if link.RateKbps > 0 {
		perMsg += 8 * float64(maxInt(s.Payloads)+200) / (link.RateKbps * 1000) * 4
	}
	d := time.Duration((paced + n*perMsg + 30) * float64(time.Second))
	return max(d, 60*time.Second)
}

func maxInt(xs []int) int {
	m := 0
	for _, x := range xs {
		m = max(m, x)
	}
	return m
}

// roleArgs are the common client flags.
func clientArgs(broker, tuning, metrics string) []string {
	return []string{"--config", "", "--broker", broker, "--insecure", "--tuning", tuning, "--metrics-out", metrics}
}

// runOne runs one repeat of one configuration and returns its sample.
// Every process it starts is gone when it returns.
func runOne(ctx context.Context, o *Options, r Job, link LinkInfo) Sample {
	start := time.Now()
	s := Sample{Config: r.Config, Repeat: r.Repeat}
	err := runRoles(ctx, o, r, link, &s)
	s.WallS = time.Since(start).Seconds()
	if err != nil {
		s.OK = false
		s.Err = strings.ReplaceAll(err.Error(), "\n", " ")
	}
	return s
}

// runRoles does the work of runOne.
func runRoles(ctx context.Context, o *Options, r Job, link LinkInfo, s *Sample) error {
	dir := filepath.Join(o.Out, "runs", r.ID())
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("couldn't create run directory: %w", err)
	}
	t := r.TuningSpec
	t.Env = append(slices.Clone(o.Env), t.Env...)
	// A port found free can be taken by someone else before the broker
	// binds it: a broker that exits before it is ready gets new ports, up
	// to three times.
	var (
		broker           *proc
		upstream, scheme string
	)
	for attempt := 1; ; attempt++ {
		b, up, sch, err := startBroker(ctx, o, r, t, dir)
		if err == nil {
			broker, upstream, scheme = b, up, sch
			break
		}
		if attempt == 3 || ctx.Err() != nil || !errors.Is(err, errExited) {
			return err
		}
	}
	defer broker.stop(5 * time.Second)

	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	subAddr, subLink, err := o.Link.Start(rctx, r.Profile, upstream, runSeed(o.Seed, r, "sub"))
	if err != nil {
		return fmt.Errorf("couldn't start the subscriber's link: %w", err)
	}
	defer subLink.Close()
	pubAddr, pubLink, err := o.Link.Start(rctx, r.Profile, upstream, runSeed(o.Seed, r, "pub"))
	if err != nil {
		return fmt.Errorf("couldn't start the publisher's link: %w", err)
	}
	defer pubLink.Close()

	topic := "bench/" + strconv.Itoa(r.Repeat) + "/" + r.Key()
	subMetrics := filepath.Join(dir, "sub.json")
	subArgs := append([]string{"sub"}, clientArgs(scheme+"://"+subAddr, t.Profile, subMetrics)...)
	subArgs = append(subArgs, "--topic", topic, "--count", strconv.Itoa(o.Spec.Count), "--format", "none")
	subArgs = append(subArgs, t.SubArgs...)
	sub, err := startProc("subscriber", o.Binary, subArgs, t.Env, filepath.Join(dir, "sub.log"), []string{"subscribed"})
	if err != nil {
		return err
	}
	defer sub.stop(5 * time.Second)
	subReady := o.ReadyTimeout + time.Duration(8*link.RTTMs())*time.Millisecond
	if err := sub.waitReady(ctx, subReady); err != nil {
		return err
	}

	pubMetrics := filepath.Join(dir, "pub.json")
	pubArgs := append([]string{"pub"}, clientArgs(scheme+"://"+pubAddr, t.Profile, pubMetrics)...)
	pubArgs = append(pubArgs, "--topic", topic, "--count", strconv.Itoa(o.Spec.Count),
		"--rate", strconv.FormatFloat(o.Spec.Rate, 'g', -1, 64), "--qos", strconv.Itoa(o.Spec.QoS),
		"--payload-size", strconv.Itoa(r.Payload), "--inflight", strconv.Itoa(max(1, o.Spec.Inflight)), "--quiet")
	if r.Proto == ProtoH3 {
		pubArgs = append(pubArgs, "--mode", r.Mode)
	}
	pubArgs = append(pubArgs, t.PubArgs...)
	pub, err := startProc("publisher", o.Binary, pubArgs, t.Env, filepath.Join(dir, "pub.log"), nil)
	if err != nil {
		return err
	}
	defer pub.stop(5 * time.Second)
	if !pub.wait(ctx, pubTimeout(o, link)) {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		pub.stop(5 * time.Second)
		return fmt.Errorf("publisher timed out after %v: %s", pubTimeout(o, link), pub.out.lastLines(2))
	}
	if err := pub.exitErr(); err != nil {
		return err
	}
	// The subscriber exits by itself after Count messages; give stragglers
	// (retransmissions on lossy links) a few RTTs, then stop it: it writes
	// its metrics with what it got.
	grace := time.Duration(math.Max(3000, 6*link.RTTMs()+1000)) * time.Millisecond
	if !sub.wait(ctx, grace) {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		sub.stop(5 * time.Second)
	}
	if err := sub.exitErr(); err != nil && !isInterruptExit(sub) {
		return err
	}
	pubDoc, err := ReadRoleMetrics(pubMetrics)
	if err != nil {
		return fmt.Errorf("publisher: %w", err)
	}
	subDoc, err := ReadRoleMetrics(subMetrics)
	if err != nil {
		return fmt.Errorf("subscriber: %w", err)
	}
	Combine(s, pubDoc, subDoc)
	steadyLatency(s, max(1, o.Spec.Inflight))
	broker.stop(5 * time.Second)
	applyUsage(s, map[string]*proc{"pub": pub, "sub": sub, "broker": broker})
	s.OK = true
	return nil
}

// applyUsage records each role's process CPU time and peak RSS from
// wait4 (microsecond resolution) in the diagnostics, and makes the
// publisher's the cpu metrics: /proc's utime and stime count whole clock
// ticks of 10 ms, too coarse for runs of a few hundred milliseconds of CPU.
// The role's own /proc figures stay in diag (pub.cpu_ms_per_msg, ...).
// Process CPU includes start-up (Go runtime, TLS keys): the same for every
// configuration, and part of what a device that starts a publisher pays.
func applyUsage(s *Sample, procs map[string]*proc) {
	for role, p := range procs {
		cpu, rss, wall, ok := p.usage()
		if !ok {
			continue
		}
		ms := float64(cpu) / float64(time.Millisecond)
		s.Diag[role+".process_cpu_ms"] = ms
		s.Diag[role+".process_peak_rss_kib"] = float64(rss)
		s.Diag[role+".process_wall_s"] = wall.Seconds()
		msgs := s.Sent
		if role == "sub" {
			msgs = s.Received
		}
		if msgs > 0 {
			s.Diag[role+".process_cpu_ms_per_msg"] = ms / float64(msgs)
		}
		if role == "pub" {
			if msgs > 0 {
				s.Metrics.CPUMsPerMsg = ms / float64(msgs)
			}
			if wall > 0 {
				s.Metrics.CPUPct = 100 * float64(cpu) / float64(wall)
			}
		}
	}
}

// isInterruptExit reports whether the process ended because we stopped it
// (exit status 130 or death by SIGINT).
func isInterruptExit(p *proc) bool {
	if p.err == nil {
		return true
	}
	msg := p.err.Error()
	return strings.Contains(msg, "interrupt") || strings.Contains(msg, "exit status 130")
}

// steadyLatency records the latency of the messages after the first
// window (in arrival order) as diag sub.steady_latency_ms.{p50,p99}: the
// first window is sent as soon as the connection is up and queues behind
// the handshake's tail on slow links, which weighs on the percentiles of
// short runs differently per protocol (MQTT's CONNECT/CONNACK round trip
// comes before the first send time is stamped).
func steadyLatency(s *Sample, window int) {
	if len(s.Latencies) <= window {
		return
	}
	rest := s.Latencies[window:]
	s.Diag["sub.steady_latency_ms.p50"] = Quantile(rest, 0.5)
	s.Diag["sub.steady_latency_ms.p99"] = Quantile(rest, 0.99)
}

// startBroker starts the broker of one run on fresh loopback ports and
// waits until it serves; it returns the UDP address the clients' link
// emulators relay to and the URL scheme.
func startBroker(ctx context.Context, o *Options, r Job, t Tuning, dir string) (*proc, string, string, error) {
	port, err := freePort()
	if err != nil {
		return nil, "", "", err
	}
	h3Addr := "127.0.0.1:" + strconv.Itoa(port)
	// The broker prints "broker listening: https://ADDR (HTTP/3, ...)" and
	// "mqtt listening: mqtt-quic://ADDR (...)" once it serves.
	// --config "": the roles must not pick up a system configuration
	// (/etc/quiot/quiot.toml) that changes what is measured.
	args := []string{"broker", "--config", "", "--dev", "--metrics-listen", "", "--listen", h3Addr, "--tuning", t.Profile}
	upstream, scheme := h3Addr, "https"
	want := []string{"https://" + h3Addr + " "}
	if r.Proto == ProtoMQTT {
		mport, err := freePort()
		if err != nil {
			return nil, "", "", err
		}
		upstream, scheme = "127.0.0.1:"+strconv.Itoa(mport), "mqtt-quic"
		args = append(args, "--mqtt-quic", upstream)
		want = append(want, "mqtt-quic://"+upstream+" ")
	} else {
		args = append(args, "--mqtt-quic", "")
	}
	if t.Auth != "" {
		f := filepath.Join(dir, "auth.toml")
		if err := os.WriteFile(f, []byte(t.Auth), 0o600); err != nil {
			return nil, "", "", fmt.Errorf("couldn't write the broker's auth file: %w", err)
		}
		args = append(args, "--auth", f)
	}
	args = append(args, t.BrokerArgs...)
	b, err := startProc("broker", o.Binary, args, t.Env, filepath.Join(dir, "broker.log"), want)
	if err != nil {
		return nil, "", "", err
	}
	if err := b.waitReady(ctx, o.ReadyTimeout); err != nil {
		b.stop(5 * time.Second)
		return nil, "", "", err
	}
	return b, upstream, scheme, nil
}
