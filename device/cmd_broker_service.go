package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/mqttquic"
	"github.com/quiot/quiot/internal/qmetrics"
	"github.com/quiot/quiot/internal/quictune"
	"github.com/quiot/quiot/internal/sdnotify"
)

// Running `quiot broker` as a service: --check-config, the Prometheus
// metrics listener (--metrics-listen) and systemd readiness and watchdog.
//
// This extension registers after cmd_broker_mqtt.go's (init runs in file
// name order), so READY=1 goes to systemd once the MQTT listeners run too.

type serviceFlags struct {
	metricsListen string
	metricsTrace  bool
	checkConfig   bool

	counting qmetrics.CountingPacketConn
	tracer   *qmetrics.Tracer
}

// errConfigChecked ends `quiot broker --check-config` successfully.
var errConfigChecked = errors.New("configuration checked")

func init() {
	var f serviceFlags
	registerBrokerExtension(brokerExtension{
		name: "service",
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&f.metricsListen, "metrics-listen", metricsListenDefault, "TCP address of the Prometheus metrics endpoint (plain HTTP, GET /metrics); empty = off")
			fs.BoolVar(&f.metricsTrace, "metrics-trace", true, "count QUIC packets, losses, PTOs and frames for /metrics (a little CPU per packet; false keeps only UDP byte and datagram counts)")
			fs.BoolVar(&f.checkConfig, "check-config", false, "check the configuration file and flags (certificates, ACL, tuning, addresses), print the result and exit")
		},
		configure: f.configure,
		start:     f.start,
	})
}

// configure checks addresses and, with metrics on, puts a counting socket
// and the QUIC tracer under the broker. With --check-config it stops the
// command here.
func (f *serviceFlags) configure(opts *broker.Options, stdout io.Writer) error {
	listen := opts.Listen
	if listen == "" {
		listen = ":4433"
	}
	udpAddr, err := net.ResolveUDPAddr("udp", listen)
	if err != nil {
		return fmt.Errorf("%w: --listen %q: %v", errUsage, listen, err)
	}
	if f.metricsListen != "" {
		if _, err := net.ResolveTCPAddr("tcp", f.metricsListen); err != nil {
			return fmt.Errorf("%w: --metrics-listen %q: %v", errUsage, f.metricsListen, err)
		}
	}
	if f.checkConfig {
		// New loads the certificates and client CA without listening.
		if _, err := broker.New(opts); err != nil {
			return err
		}
		fmt.Fprintln(stdout, "configuration OK")
		return errConfigChecked
	}
	if f.metricsListen == "" {
		return nil
	}
	if opts.PacketConn == nil {
		// The TCP listener of the same port is opened with the socket, as
		// the broker does for its own: with port 0 a number free on UDP
		// may be taken on TCP, and the pair is then tried again.
		udp, tln, err := broker.ListenPair(udpAddr.String(), !opts.DisableTCP && opts.TCPListener == nil)
		if err != nil {
			return err
		}
		// The broker does not close a PacketConn it was given; this one
		// lives as long as the process.
		f.counting = qmetrics.NewCountingPacketConn(udp)
		opts.PacketConn = f.counting
		if tln != nil {
			opts.TCPListener = tln
		}
	}
	if f.metricsTrace {
		if opts.QUIC == nil {
			t := opts.Tuning
			if t == nil {
				t = quictune.Default()
			}
			opts.QUIC = t.QUICConfig()
		} else {
			opts.QUIC = opts.QUIC.Clone()
		}
		f.tracer = qmetrics.NewTracer(opts.QUIC.Tracer)
		opts.QUIC.Tracer = f.tracer.ConnectionTracer
	}
	return nil
}

// warnMetricsListen warns when the metrics endpoint (plain HTTP, no
// authentication) listens beyond loopback, as the MQTT side warns for
// plain MQTT/TCP (the same loopback test: mqttquic.IsLoopbackAddr).
func warnMetricsListen(log *slog.Logger, addr string) {
	if mqttquic.IsLoopbackAddr(addr) {
		return
	}
	log.Warn("the metrics endpoint listens on a non-loopback address: anyone who reaches it reads the broker's metrics (plain HTTP, no authentication); listen on 127.0.0.1 (the default) or keep it behind a firewall (docs/security.md)", "address", addr)
}

// start serves the metrics and tells systemd the broker is ready.
func (f *serviceFlags) start(ctx context.Context, b *broker.Broker, _ *broker.Options, log *slog.Logger, stdout io.Writer) (func(context.Context) error, error) {
	var shutdown func(context.Context) error
	if f.metricsListen != "" {
		var wire func() qmetrics.WireStats
		var trace func() qmetrics.TraceStats
		if f.counting != nil {
			wire = f.counting.Stats
		}
		if f.tracer != nil {
			trace = f.tracer.Stats
		}
		addr, stop, err := serveMetrics(f.metricsListen, b, wire, trace)
		if err != nil {
			return nil, err
		}
		warnMetricsListen(log, f.metricsListen)
		shutdown = stop
		fmt.Fprintf(stdout, "metrics: http://%s/metrics\n", addr)
	}
	healthy := func() error {
		select {
		case <-b.Done():
			return errors.New("broker stopped")
		default:
			return nil
		}
	}
	if err := sdnotify.Start(ctx, "serving https://"+b.Addr().String(), healthy); err != nil {
		log.Warn("systemd notification failed", "err", err)
	}
	return func(sctx context.Context) error {
		sdnotify.Stopping()
		if shutdown != nil {
			return shutdown(sctx)
		}
		return nil
	}, nil
}
