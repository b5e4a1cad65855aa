//go:build !arm || quiot_cluster

package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/cluster"
)

// The cluster link of `quiot broker` (flags: cmd_broker_cluster_flags.go).

// clusterState is what the flags made: the link (nil: no --cluster).
type clusterState struct {
	link *cluster.Link
}

// configure makes the link and hands it to the broker's options.
func (f *clusterFlags) configure(o *broker.Options, _ io.Writer) error {
	if f.urls == "" {
		if f.user != "" || f.token != "" || f.nkey != "" || f.creds != "" || f.ca != "" || f.cert != "" {
			return fmt.Errorf("%w: --cluster-* options need --cluster URLS", errUsage)
		}
		return nil
	}
	if f.replicas < 0 || f.holdMessages < 0 || f.holdBytes < 0 || f.ackTimeout < 0 || f.reconnectWait < 0 || f.maxReconnectWait < 0 {
		return fmt.Errorf("%w: --cluster-* numbers must not be negative (0 = default)", errUsage)
	}
	l, err := cluster.New(cluster.Options{
		URLs: f.urls, Name: f.name,
		User: f.user, Password: f.password, Token: f.token, NKeySeedFile: f.nkey, CredsFile: f.creds,
		CAFile: f.ca, CertFile: f.cert, KeyFile: f.key,
		Prefix: f.prefix, Replicas: f.replicas,
		HoldMessages: f.holdMessages, HoldBytes: f.holdBytes,
		AckTimeout: f.ackTimeout, ReconnectWait: f.reconnectWait, MaxReconnectWait: f.maxReconnectWait,
		LocalNumbering: f.localNumbering,
		Logger:         o.Logger,
	})
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	f.link = l
	o.Cluster = l
	metricsCollectors = append(metricsCollectors, l) // quiot_cluster_* on --metrics-listen
	return nil
}

// start connects the link (in the background when NATS is unreachable).
func (f *clusterFlags) start(_ context.Context, b *broker.Broker, _ *broker.Options, log *slog.Logger, stdout io.Writer) (func(context.Context) error, error) {
	if f.link == nil {
		return nil, nil
	}
	if err := f.link.Start(b); err != nil {
		return nil, err
	}
	fmt.Fprintf(stdout, "cluster: joining through %s as %s (state on /healthz)\n", f.urls, f.link.ID())
	log.Info("cluster link started", "nats", f.urls, "id", f.link.ID())
	return func(context.Context) error { return f.link.Close() }, nil
}
