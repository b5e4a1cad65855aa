//go:build arm && !quiot_cluster

package node

import "log/slog"

// The 32-bit ARM (Raspberry Pi edge) build has no cluster link: the NATS
// client adds 1.18 MB and would push the ARMv6 binary past its 12 MB
// budget (docs/cluster.md). Build with -tags quiot_cluster to include it.

// newLink refuses a cluster in this build.
func newLink(c Cluster, _ *slog.Logger) (clusterLink, error) {
	if c.URLs != "" {
		return nil, fieldErr("Cluster.URLs", "this build (32-bit ARM, the Pi edge build) has no cluster support; run clustered brokers on amd64 or arm64, or build with -tags quiot_cluster (docs/cluster.md)")
	}
	return nil, nil
}
