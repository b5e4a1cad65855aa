//go:build quiot_nometrics

package main

import (
	"context"
	"errors"
	"net"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/internal/qmetrics"
)

// metricsListenDefault: this build has no Prometheus endpoint.
const metricsListenDefault = ""

// serveMetrics fails: the binary was built with -tags quiot_nometrics.
func serveMetrics(string, *broker.Broker, func() qmetrics.WireStats, func() qmetrics.TraceStats) (net.Addr, func(context.Context) error, error) {
	return nil, nil, errors.New("this quiot was built without Prometheus metrics (-tags quiot_nometrics): set metrics-listen to \"\"")
}
