package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/auth"
	"github.com/quiot/quiot/internal/certs"
	"github.com/quiot/quiot/internal/quictune"
)

func init() {
	register(command{
		name:    "broker",
		summary: "run the broker (HTTP/3 pub-sub; MQTT over QUIC when enabled)",
		run:     runBroker,
	})
}

// brokerExtension lets another cmd_*.go file add to `quiot broker` without
// editing this file: extra flags, a step after flag parsing (e.g. a config
// file), and listeners or services attached to the broker before it serves.
// Register it from init with registerBrokerExtension.
type brokerExtension struct {
	// name identifies the extension in errors.
	name string
	// flags registers the extension's flags (optional).
	flags func(fs *flag.FlagSet)
	// parsed runs after the flags are parsed, before anything starts
	// (optional); it may set flags (fs.Set) that the user did not give.
	parsed func(fs *flag.FlagSet) error
	// configure adjusts the broker's options before the broker is created
	// (optional): e.g. a counting socket or a QUIC tracer. Returning
	// errConfigChecked ends the command successfully (--check-config).
	configure func(opts *broker.Options, stdout io.Writer) error
	// start attaches to the running broker, after it listens and before
	// the command waits for a signal (optional). The returned stop runs on
	// shutdown, before the broker's own Shutdown, with the shutdown context.
	// opts are the broker's options (certificates, client CA, tuning).
	start func(ctx context.Context, b *broker.Broker, opts *broker.Options, log *slog.Logger, stdout io.Writer) (stop func(context.Context) error, err error)
}

var brokerExtensions []brokerExtension

// registerBrokerExtension adds an extension; call it from init.
//
//lint:ignore U1000 called from the init of extension files (MQTT listeners, config, metrics)
func registerBrokerExtension(e brokerExtension) { brokerExtensions = append(brokerExtensions, e) }

// brokerFlags are the flags of `quiot broker` that this file owns.
type brokerFlags struct {
	listen        string
	dev           bool
	devCertOut    string
	devCertPEM    []byte // the --dev certificate, set by options
	cert, key     string
	clientCA      string
	authFile      string
	allowAnon     bool
	tuning        string
	logLevel      string
	maxPayload    int
	history       int
	historyBytes  int64
	retainedBytes int64
	queue         int
	queuePolicy   string
	maxSubs       int
	shutdownGrace time.Duration
}

func (f *brokerFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.listen, "listen", ":4433", "UDP address for HTTP/3; TCP on the same port serves HTTP/1.1 and HTTP/2")
	fs.BoolVar(&f.dev, "dev", false, "use an ephemeral self-signed certificate and print its SHA-256 fingerprint (development only)")
	fs.StringVar(&f.devCertOut, "dev-cert-out", defaultDevCertPath(), "with --dev: write the certificate (PEM, not the key) to this file for clients' --ca; empty = do not write it")
	fs.StringVar(&f.cert, "cert", "", "server certificate PEM file (with --key)")
	fs.StringVar(&f.key, "key", "", "server key PEM file (with --cert)")
	fs.StringVar(&f.clientCA, "client-ca", "", "CA PEM file to verify client certificates (mTLS; identity = certificate CN)")
	fs.StringVar(&f.authFile, "auth", "", "ACL file (TOML: users, hashed tokens and passwords, publish/subscribe patterns, [anonymous]; quiot token/passwd add credentials; SIGHUP reloads it); empty = no ACL: loopback clients only")
	fs.BoolVar(&f.allowAnon, "allow-anonymous", false, "without --auth: serve everyone from anywhere, no authentication (an open broker; --dev implies it)")
	fs.StringVar(&f.tuning, "tuning", "default", "QUIC tuning profile: default, lean or a TOML file")
	fs.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	fs.IntVar(&f.maxPayload, "max-payload", 256<<10, "largest payload in bytes")
	fs.IntVar(&f.history, "history", 1024, "messages of history kept per topic for resume (0 = none)")
	fs.Int64Var(&f.historyBytes, "history-bytes", 16<<20, "bytes of history kept in all (payload, topic and ~96 bytes a message)")
	fs.Int64Var(&f.retainedBytes, "retained-bytes", 16<<20, "bytes of retained messages kept in all (counted as --history-bytes)")
	fs.IntVar(&f.queue, "queue", 1024, "subscriber queue length in messages")
	fs.StringVar(&f.queuePolicy, "queue-policy", "drop-oldest", "when a subscriber's queue is full: drop-oldest or disconnect")
	fs.IntVar(&f.maxSubs, "max-subscriptions", 100, "subscriptions per connection")
	fs.DurationVar(&f.shutdownGrace, "shutdown-grace", 5*time.Second, "how long SIGTERM waits for subscribers to drain")
}

// options turns the flags into broker options. It prints the dev
// certificate's fingerprint to stdout.
func (f *brokerFlags) options(stdout io.Writer, log *slog.Logger) (*broker.Options, error) {
	o := &broker.Options{Listen: f.listen, Logger: log, ClientCAFile: f.clientCA, ShutdownGrace: f.shutdownGrace}
	switch {
	case f.dev && (f.cert != "" || f.key != ""):
		return nil, fmt.Errorf("%w: --dev and --cert/--key exclude each other", errUsage)
	case f.dev:
		c, err := certs.SelfSigned(nil, nil)
		if err != nil {
			return nil, err
		}
		o.Certificates = []tls.Certificate{c.TLS}
		fp := certs.Fingerprint(c.TLS.Certificate[0])
		fmt.Fprintf(stdout, "dev certificate (self-signed, localhost/127.0.0.1/::1) SHA-256 fingerprint: %s\n", fp)
		f.devCertPEM = c.CertPEM // written once the broker listens (writeDevCert)
	case f.cert == "" || f.key == "":
		return nil, fmt.Errorf("%w: give --cert and --key, or --dev for a throwaway certificate", errUsage)
	default:
		o.CertFile, o.KeyFile = f.cert, f.key
	}
	prof, err := quictune.Load(f.tuning)
	if err != nil {
		return nil, fmt.Errorf("%w: --tuning: %v", errUsage, err)
	}
	o.Tuning = prof
	a, err := f.authenticator(log)
	if err != nil {
		return nil, err
	}
	o.Auth = a
	if f.maxPayload <= 0 || f.queue <= 0 || f.maxSubs <= 0 || f.historyBytes <= 0 || f.retainedBytes <= 0 || f.history < 0 {
		return nil, fmt.Errorf("%w: limits must be positive (--history may be 0)", errUsage)
	}
	o.Limits = broker.Limits{
		MaxPayload:              f.maxPayload,
		HistoryPerTopic:         f.history,
		HistoryBytes:            f.historyBytes,
		RetainedBytes:           f.retainedBytes,
		QueueLength:             f.queue,
		MaxSubscriptionsPerConn: f.maxSubs,
	}
	if f.history == 0 {
		o.Limits.HistoryPerTopic = -1
	}
	switch f.queuePolicy {
	case "drop-oldest":
	case "disconnect":
		o.Limits.QueuePolicy = broker.Disconnect
	default:
		return nil, fmt.Errorf("%w: --queue-policy %q (want drop-oldest or disconnect)", errUsage, f.queuePolicy)
	}
	return o, nil
}

// defaultDevCertPath is where --dev writes its certificate by default:
// quiot/dev-cert.pem in the user's cache directory (~/.cache on Linux),
// or in the temporary directory when there is none.
func defaultDevCertPath() string {
	dir, err := os.UserCacheDir()
	if err != nil {
		dir = os.TempDir()
	}
	return filepath.Join(dir, "quiot", "dev-cert.pem")
}

// writeDevCert writes the dev certificate's PEM to path (its directory
// created 0700 when missing), replacing an earlier run's file atomically.
func writeDevCert(path string, certPEM []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("couldn't write the dev certificate (--dev-cert-out): %w", err)
	}
	tmp, err := os.CreateTemp(dir, ".dev-cert-*.pem")
	if err != nil {
		return fmt.Errorf("couldn't write the dev certificate (--dev-cert-out): %w", err)
	}
	_, err = tmp.Write(certPEM)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), 0o644)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("couldn't write the dev certificate (--dev-cert-out): %w", err)
	}
	return nil
}

// devListenFlags are the listener flags whose default --dev moves to
// loopback (127.0.0.1) when the user did not give them.
var devListenFlags = []string{"listen", "mqtt-quic"}

// applyDevDefaults makes --dev listen on loopback only: each listener flag
// of devListenFlags not given explicitly (on the command line or by a
// configuration file) keeps its port on 127.0.0.1. Explicit flags win.
func applyDevDefaults(fs *flag.FlagSet) error {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	for _, name := range devListenFlags {
		fl := fs.Lookup(name)
		if fl == nil || given[name] || fl.Value.String() == "" {
			continue
		}
		_, port, err := net.SplitHostPort(fl.Value.String())
		if err != nil {
			continue // not host:port: left to the listener to refuse
		}
		if err := fs.Set(name, net.JoinHostPort("127.0.0.1", port)); err != nil {
			return fmt.Errorf("--dev: --%s: %w", name, err)
		}
	}
	return nil
}

// authenticator picks who may connect (issue 9 finding 5, deny by
// default as mosquitto 2.x): the ACL file of --auth; without one, loopback
// clients only, unless --dev or --allow-anonymous open the broker.
func (f *brokerFlags) authenticator(log *slog.Logger) (*auth.Authenticator, error) {
	switch {
	case f.authFile != "" && f.allowAnon:
		return nil, fmt.Errorf("%w: --allow-anonymous is for brokers without --auth; with an ACL file, give anonymous clients rights in its [anonymous] table", errUsage)
	case f.authFile != "":
		a, err := auth.Load(f.authFile)
		if err != nil {
			return nil, err
		}
		for _, w := range a.Warnings() {
			log.Warn("ACL: "+w, "file", f.authFile)
		}
		return a, nil
	case f.dev || f.allowAnon:
		why := "--allow-anonymous"
		if !f.allowAnon {
			why = "--dev"
		}
		log.Warn("OPEN BROKER ("+why+"): no ACL, anyone who can reach it may publish and subscribe to every topic; for a deployment give --auth FILE (docs/security.md)", "listen", f.listen)
		return auth.Open(), nil
	default:
		log.Warn("no ACL (--auth): serving loopback clients only, others are refused; to serve the network make an ACL (quiot token --acl FILE NAME) and start with --auth FILE (docs/security.md)")
		return auth.LoopbackOnly(), nil
	}
}

func runBroker(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("broker", stderr)
	var bf brokerFlags
	bf.register(fs)
	for _, e := range brokerExtensions {
		if e.flags != nil {
			e.flags(fs)
		}
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	for _, e := range brokerExtensions {
		if e.parsed != nil {
			if err := e.parsed(fs); err != nil {
				return fmt.Errorf("%s: %w", e.name, err)
			}
		}
	}
	if bf.dev {
		if err := applyDevDefaults(fs); err != nil {
			return err
		}
	}
	log, err := newLogger(stderr, bf.logLevel)
	if err != nil {
		return err
	}
	opts, err := bf.options(stdout, log)
	if err != nil {
		return err
	}
	for _, e := range brokerExtensions {
		if e.configure != nil {
			if err := e.configure(opts, stdout); errors.Is(err, errConfigChecked) {
				return nil
			} else if err != nil {
				return fmt.Errorf("%s: %w", e.name, err)
			}
		}
	}
	b, err := broker.New(opts)
	if err != nil {
		return err
	}
	if err := b.Start(); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "broker listening: https://%s (HTTP/3, UDP)", b.Addr())
	if a := b.TCPAddr(); a != nil {
		fmt.Fprintf(stdout, ", HTTP/1.1+HTTP/2 on TCP %s", a)
	}
	fmt.Fprintln(stdout)
	if bf.devCertPEM != nil && bf.devCertOut != "" {
		if err := writeDevCert(bf.devCertOut, bf.devCertPEM); err != nil {
			log.Warn("dev certificate not written; clients can use --pin or --insecure", "error", err)
		} else {
			fmt.Fprintf(stdout, "dev certificate written to %s: clients trust it with --ca %s\n", bf.devCertOut, bf.devCertOut)
		}
	}

	var stops []func(context.Context) error
	var startErr error
	for _, e := range brokerExtensions {
		if e.start == nil {
			continue
		}
		stop, err := e.start(ctx, b, opts, log, stdout)
		if err != nil {
			startErr = fmt.Errorf("%s: %w", e.name, err)
			break
		}
		if stop != nil {
			stops = append(stops, stop)
		}
	}
	if startErr == nil {
		select {
		case <-ctx.Done():
			log.Info("shutting down", "grace", bf.shutdownGrace)
		case <-b.Done():
		}
	}
	sctx, cancel := context.WithTimeout(context.Background(), bf.shutdownGrace)
	defer cancel()
	var errs []error
	if startErr != nil {
		errs = append(errs, startErr)
	}
	for i := len(stops) - 1; i >= 0; i-- {
		if err := stops[i](sctx); err != nil {
			errs = append(errs, err)
		}
	}
	if err := b.Shutdown(sctx); err != nil {
		errs = append(errs, err)
	}
	st := b.Stats()
	var parts []string
	for _, p := range st.ProtocolNames() {
		ps := st.Protocols[p]
		parts = append(parts, fmt.Sprintf("%s in=%d out=%d conns=%d", p, ps.MessagesIn, ps.MessagesOut, ps.ConnsTotal))
	}
	log.Info("broker stopped", "protocols", strings.Join(parts, "; "), "dropped", st.Dropped, "cut_off", st.CutOff)
	return errors.Join(errs...)
}
