package main

import (
	"context"
	"net"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/promexport"
	"github.com/quiot/quiot/internal/qmetrics"
)

// metricsListenDefault is --metrics-listen's default.
const metricsListenDefault = "127.0.0.1:9464"

// metricsCollectors are more collectors for the broker's metrics, added by
// extensions' configure (the cluster link: cmd_broker_cluster.go).
var metricsCollectors []promexport.Collector

// serveMetrics serves the broker's metrics on addr (see broker/promexport).
func serveMetrics(addr string, b *broker.Broker, wire func() qmetrics.WireStats, trace func() qmetrics.TraceStats) (net.Addr, func(context.Context) error, error) {
	cs := []promexport.Collector{promexport.NewBrokerCollector(b.Stats), promexport.NewQUICCollector(wire, trace)}
	reg := promexport.NewRegistry(append(cs, metricsCollectors...)...)
	srv, err := promexport.Listen(addr, reg)
	if err != nil {
		return nil, nil, err
	}
	return srv.Addr(), srv.Shutdown, nil
}
