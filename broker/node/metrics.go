package node

import (
	"context"
	"log/slog"

	"github.com/quiot/quiot/broker/bridge"
	"github.com/quiot/quiot/broker/mqttquic"
	"github.com/quiot/quiot/broker/promexport"
	"github.com/quiot/quiot/internal/qmetrics"
)

// startMetrics serves the node's metrics on Metrics.Listen (see
// broker/promexport): the broker's, its QUIC socket's, and those of the
// MQTT listeners, the cluster link and the bridges that run.
func (n *Node) startMetrics(context.Context) error {
	addr := n.c.Metrics.Listen
	if addr == "" {
		return nil
	}
	var wire func() qmetrics.WireStats
	var trace func() qmetrics.TraceStats
	if n.counting != nil {
		wire = n.counting.Stats
	}
	if n.tracer != nil {
		trace = n.tracer.Stats
	}
	cs := []promexport.Collector{promexport.NewBrokerCollector(n.b.Stats), promexport.NewQUICCollector(wire, trace)}
	if n.mqtt != nil {
		cs = append(cs, n.mqtt)
	}
	if n.link != nil {
		cs = append(cs, n.link)
	}
	if mgr := n.bridges; mgr != nil {
		cs = append(cs, bridge.Collector(mgr.Bridges))
	}
	srv, err := promexport.Listen(addr, promexport.NewRegistry(cs...))
	if err != nil {
		return err
	}
	warnMetricsListen(n.log, addr)
	n.metrics = srv.Addr()
	n.stops = append(n.stops, srv.Shutdown)
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
