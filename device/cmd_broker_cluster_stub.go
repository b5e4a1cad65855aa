//go:build arm && !quiot_cluster

package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/quiot/quiot/broker"
)

// The 32-bit ARM (Raspberry Pi edge) build has no cluster link: the NATS
// client adds 1.18 MB and would push the ARMv6 binary past its 12 MB
// budget (docs/cluster.md). The --cluster flags exist (a shared config file
// stays valid) and --cluster says clearly that this build cannot join a
// cluster. Build with -tags quiot_cluster to include it anyway.

// clusterState: no link in this build.
type clusterState struct{}

func (f *clusterFlags) configure(*broker.Options, io.Writer) error {
	if f.urls != "" {
		return fmt.Errorf("%w: --cluster: this build (32-bit ARM, the Pi edge build) has no cluster support; run clustered brokers on amd64 or arm64, or build with -tags quiot_cluster (docs/cluster.md)", errUsage)
	}
	return nil
}

func (f *clusterFlags) start(context.Context, *broker.Broker, *broker.Options, *slog.Logger, io.Writer) (func(context.Context) error, error) {
	return nil, nil
}
