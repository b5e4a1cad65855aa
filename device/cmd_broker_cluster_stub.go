//go:build arm && !quiot_cluster

package main

import (
	"flag"
	"fmt"
	"io"

	"github.com/quiot/quiot/broker"
)

// The 32-bit ARM (Raspberry Pi edge) build has no cluster link: the NATS
// client would push the ARMv6 binary past its 12 MB budget
// (docs/cluster.md). --cluster says so instead of being unknown. Build with
// -tags quiot_cluster to include it anyway.
func init() {
	var urls string
	registerBrokerExtension(brokerExtension{
		name: "cluster",
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&urls, "cluster", "", "not in this build: the 32-bit ARM (Pi edge) build has no cluster support (docs/cluster.md)")
		},
		configure: func(*broker.Options, io.Writer) error {
			if urls != "" {
				return fmt.Errorf("%w: --cluster: this build (32-bit ARM, the Pi edge build) has no cluster support; run the clustered broker on amd64 or arm64, or build with -tags quiot_cluster (docs/cluster.md)", errUsage)
			}
			return nil
		},
	})
}
