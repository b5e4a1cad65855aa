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
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/auth"
	"github.com/quiot/quiot/broker/node"
	"github.com/quiot/quiot/internal/certs"
	"github.com/quiot/quiot/internal/gctune"
	"github.com/quiot/quiot/internal/proctune"
	"github.com/quiot/quiot/internal/quictune"
	"github.com/quiot/quiot/internal/sdnotify"
)

func init() {
	register(command{
		name:    "broker",
		summary: "run the broker (HTTP/3 pub-sub; MQTT over QUIC when enabled)",
		run:     runBroker,
	})
}

// brokerCmd is every flag of `quiot broker`, by group; config maps them
// to the node.Config that broker/node runs. Each group lives in its
// cmd_broker_*.go file (cmd_web.go for the browser part).
type brokerCmd struct {
	core    brokerFlags
	auth    authFlags
	bridges bridgeFlags
	cluster clusterFlags
	gc      gcFlags
	limits  limitFlags
	mqtt    mqttFlags
	procs   procsFlags
	service serviceFlags
	web     webFlags
}

// register registers every flag of `quiot broker` on fs.
func (c *brokerCmd) register(fs *flag.FlagSet) {
	c.core.register(fs)
	c.auth.register(fs)
	c.cluster.register(fs)
	c.gc.register(fs)
	c.limits.register(fs)
	c.mqtt.register(fs)
	c.procs.register(fs)
	c.service.register(fs)
	c.web.register(fs)
}

// config maps the parsed flags (and the configuration file's values) to
// the node's configuration. It prints the dev certificate's fingerprint.
func (c *brokerCmd) config(stdout io.Writer, log *slog.Logger) (node.Config, error) {
	cfg, err := c.core.config(stdout, log)
	if err != nil {
		return cfg, err
	}
	if err := c.auth.apply(cfg.Auth); err != nil {
		return cfg, err
	}
	cfg.Bridges, cfg.BridgeFile = c.bridges.cfgs, c.bridges.path
	cfg.Cluster = c.cluster.config()
	if c.gc.opts, err = c.gc.options(); err != nil {
		return cfg, fmt.Errorf("gc: %w", err)
	}
	if err := c.procs.parse(); err != nil {
		return cfg, err
	}
	if err := c.limits.apply(&cfg.HTTP.Limits); err != nil {
		return cfg, err
	}
	cfg.MQTT = c.mqtt.config()
	cfg.Metrics = node.Metrics{Listen: c.service.metricsListen, Trace: c.service.metricsTrace}
	if cfg.HTTP.Web, err = c.web.options(); err != nil {
		return cfg, err
	}
	return cfg, nil
}

// flagError names, in an error of broker/node about a Config field, the
// flag that set the field.
func flagError(err error) error {
	var fe *node.FieldError
	if !errors.As(err, &fe) {
		return err
	}
	switch {
	case strings.HasPrefix(fe.Field, "Bridges["):
		return fmt.Errorf("bridge: %w", fe.Err) // the error names the file's table and key
	case fe.Field == "DataDir":
		return fmt.Errorf("--data-dir %w", fe.Err) // a directory that does not open: no usage error
	}
	name := map[string]string{"HTTP.Listen": "listen", "Metrics.Listen": "metrics-listen", "TLS": "cert",
		"Cluster": "cluster", "Cluster.URLs": "cluster"}[fe.Field]
	if name == "" {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	return fmt.Errorf("%w: --%s: %v", errUsage, name, fe.Err)
}

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
	// dataDir keeps retained messages, resume history, the epoch and
	// persistent MQTT sessions across restarts. Off by default (also with
	// --dev, whose defaults an explicit --data-dir overrides); the packaged
	// configuration sets /var/lib/quiot.
	dataDir string
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
	fs.StringVar(&f.dataDir, "data-dir", "", "directory where retained messages, resume history, the epoch and persistent MQTT sessions survive restarts (created 0700); empty = memory only")
}

// config turns the flags into the node's core configuration: listener,
// certificate, tuning, ACL, limits, data directory. It prints the dev
// certificate's fingerprint to stdout.
func (f *brokerFlags) config(stdout io.Writer, log *slog.Logger) (node.Config, error) {
	o := node.Config{HTTP: node.HTTP{Listen: f.listen}, TLS: node.TLS{ClientCAFile: f.clientCA},
		DataDir: f.dataDir, ShutdownGrace: f.shutdownGrace, Logger: log}
	switch {
	case f.dev && (f.cert != "" || f.key != ""):
		return o, fmt.Errorf("%w: --dev and --cert/--key exclude each other", errUsage)
	case f.dev:
		c, err := certs.SelfSigned(nil, nil)
		if err != nil {
			return o, err
		}
		o.TLS.Certificates = []tls.Certificate{c.TLS}
		fp := certs.Fingerprint(c.TLS.Certificate[0])
		fmt.Fprintf(stdout, "dev certificate (self-signed, localhost/127.0.0.1/::1) SHA-256 fingerprint: %s\n", fp)
		f.devCertPEM = c.CertPEM // written once the broker listens (writeDevCert)
	case f.cert == "" || f.key == "":
		return o, fmt.Errorf("%w: give --cert and --key, or --dev for a throwaway certificate", errUsage)
	default:
		o.TLS.CertFile, o.TLS.KeyFile = f.cert, f.key
	}
	prof, err := quictune.Load(f.tuning)
	if err != nil {
		return o, fmt.Errorf("%w: --tuning: %v", errUsage, err)
	}
	o.Tuning = prof
	a, err := f.authenticator(log)
	if err != nil {
		return o, err
	}
	o.Auth = a
	if f.maxPayload <= 0 || f.queue <= 0 || f.maxSubs <= 0 || f.historyBytes <= 0 || f.retainedBytes <= 0 || f.history < 0 {
		return o, fmt.Errorf("%w: limits must be positive (--history may be 0)", errUsage)
	}
	l := &o.HTTP.Limits
	*l = broker.Limits{
		MaxPayload:              f.maxPayload,
		HistoryPerTopic:         f.history,
		HistoryBytes:            f.historyBytes,
		RetainedBytes:           f.retainedBytes,
		QueueLength:             f.queue,
		MaxSubscriptionsPerConn: f.maxSubs,
	}
	if f.history == 0 {
		l.HistoryPerTopic = -1
	}
	switch f.queuePolicy {
	case "drop-oldest":
	case "disconnect":
		l.QueuePolicy = broker.Disconnect
	default:
		return o, fmt.Errorf("%w: --queue-policy %q (want drop-oldest or disconnect)", errUsage, f.queuePolicy)
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

// applyDevDefaults makes --dev listen on loopback only: each listener flag
// whose default is on (--listen, --mqtt-quic) not given explicitly (on the command line or by a
// configuration file) keeps its port on 127.0.0.1. Explicit flags win.
func applyDevDefaults(fs *flag.FlagSet) error {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	for _, name := range []string{"listen", "mqtt-quic"} {
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
	var c brokerCmd
	c.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := c.bridges.parsed(fs); err != nil {
		return fmt.Errorf("bridge: %w", err)
	}
	if c.core.dev {
		if err := applyDevDefaults(fs); err != nil {
			return err
		}
	}
	log, err := newLogger(stderr, c.core.logLevel)
	if err != nil {
		return err
	}
	cfg, err := c.config(stdout, log)
	if err != nil {
		return err
	}
	if c.service.checkConfig {
		if err := node.Check(cfg); err != nil {
			return flagError(err)
		}
		fmt.Fprintln(stdout, "configuration OK")
		return nil
	}
	gctune.Apply(c.gc.opts)
	ctx, stopProcs := context.WithCancel(ctx)
	defer stopProcs()
	log.Info("processors", "setting", applyProcs(ctx, c.procs.mode, proctune.Options{}, log).String())
	// SIGHUP reloads the ACL file and the bridge tables (broker/node);
	// without --auth and bridges it is logged and ignored.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	cfg.Reload = hup
	cfg.OnReady = func(n *node.Node) { c.ready(ctx, n, cfg, stdout, log) }
	cfg.OnStopping = sdnotify.Stopping
	return flagError(node.Run(ctx, cfg))
}
