//go:build !quiot_nometrics

package main

import (
	"context"
	"net"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/internal/promexport"
	"github.com/quiot/quiot/internal/qmetrics"
)

// metricsListenDefault is --metrics-listen's default; builds with the tag
// quiot_nometrics leave out Prometheus (client_golang and protobuf add
// about 2.7 MB to the ARMv6 binary) and default to "".
const metricsListenDefault = "127.0.0.1:9464"

// serveMetrics serves the broker's metrics on addr (see internal/promexport).
func serveMetrics(addr string, b *broker.Broker, wire func() qmetrics.WireStats, trace func() qmetrics.TraceStats) (net.Addr, func(context.Context) error, error) {
	reg, err := promexport.NewRegistry(promexport.NewBrokerCollector(b.Stats), promexport.NewQUICCollector(wire, trace))
	if err != nil {
		return nil, nil, err
	}
	srv, err := promexport.Listen(addr, reg)
	if err != nil {
		return nil, nil, err
	}
	return srv.Addr(), srv.Shutdown, nil
}
