package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/quiot/quiot/broker/node"
	"github.com/quiot/quiot/internal/sdnotify"
	"github.com/quiot/quiot/internal/startpages"
)

// Running `quiot broker` as a service: --check-config, the Prometheus
// metrics listener (--metrics-listen, served by broker/node) and systemd
// readiness and watchdog.

// metricsListenDefault is --metrics-listen's default.
const metricsListenDefault = "127.0.0.1:9464"

type serviceFlags struct {
	metricsListen string
	metricsTrace  bool
	checkConfig   bool
}

func (f *serviceFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.metricsListen, "metrics-listen", metricsListenDefault, "TCP address of the Prometheus metrics endpoint (plain HTTP, GET /metrics); empty = off")
	fs.BoolVar(&f.metricsTrace, "metrics-trace", true, "count QUIC packets, losses, PTOs and frames for /metrics (a little CPU per packet; false keeps only UDP byte and datagram counts)")
	fs.BoolVar(&f.checkConfig, "check-config", false, "check the configuration file and flags (certificates, ACL, tuning, addresses), print the result and exit")
}

// ready runs once the node serves: it prints where it listens, writes the
// dev certificate and tells systemd the broker is ready (READY=1, then the
// watchdog while the broker runs).
func (c *brokerCmd) ready(ctx context.Context, n *node.Node, cfg node.Config, stdout io.Writer, log *slog.Logger) {
	a := n.Addrs()
	fmt.Fprintf(stdout, "broker listening: https://%s (HTTP/3, UDP)", a.HTTP3)
	if a.HTTPTCP != nil {
		fmt.Fprintf(stdout, ", HTTP/1.1+HTTP/2 on TCP %s", a.HTTPTCP)
	}
	fmt.Fprintln(stdout)
	if f := &c.core; f.devCertPEM != nil && f.devCertOut != "" {
		if err := writeDevCert(f.devCertOut, f.devCertPEM); err != nil {
			log.Warn("dev certificate not written; clients can use --pin or --insecure", "error", err)
		} else {
			fmt.Fprintf(stdout, "dev certificate written to %s: clients trust it with --ca %s\n", f.devCertOut, f.devCertOut)
		}
	}
	for _, b := range cfg.Bridges {
		fmt.Fprintf(stdout, "bridge %s: %s (out %v, in %v)\n", b.Name, b.URL, b.Out, b.In)
	}
	if id := n.ClusterID(); id != "" {
		fmt.Fprintf(stdout, "cluster: joining through %s as %s (state on /healthz)\n", cfg.Cluster.URLs, id)
	}
	c.mqtt.printAddrs(stdout, a)
	if a.Metrics != nil {
		fmt.Fprintf(stdout, "metrics: http://%s/metrics\n", a.Metrics)
	}
	healthy := func() error {
		select {
		case <-n.Done():
			return errors.New("broker stopped")
		default:
			return nil
		}
	}
	if err := sdnotify.Start(ctx, "serving https://"+a.HTTP3.String(), healthy); err != nil {
		log.Warn("systemd notification failed", "err", err)
	}
	brokerGiveBack(n.Done(), log)
}

// brokerGiveBackEvery bounds how often the broker gives back the binary's
// pages after a collection (internal/startpages): an idle broker collects
// when the runtime forces it, every two minutes; a busy one much more
// often, and it pays the minor faults of its hot pages at most this often.
const brokerGiveBackEvery = 2 * time.Minute

// brokerGiveBack gives back the pages of the binary that start-up touched
// (inits, the configuration, certificates) once the broker serves, and
// from then on those a collection maps back after it, until done is
// closed: an idle broker otherwise keeps about 12 MB of the binary's pages
// on amd64 (docs/deploy.md).
func brokerGiveBack(done <-chan struct{}, log *slog.Logger) {
	report := func(what string) func(int64, error) {
		return func(n int64, err error) {
			if err != nil {
				log.Debug("binary pages kept", "after", what, "error", err)
				return
			}
			log.Debug("binary pages released", "after", what, "bytes", n)
		}
	}
	report("start-up")(startpages.Release())
	stop := startpages.AfterGC(brokerGiveBackEvery, report("collection"))
	go func() {
		<-done
		stop()
	}()
}
