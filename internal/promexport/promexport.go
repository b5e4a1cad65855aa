// Package promexport exposes the broker's counters to Prometheus: a
// prometheus.Collector over (*broker.Broker).Stats (connections,
// subscriptions, messages in and out per protocol, drops, queue depths,
// history), one over the QUIC statistics of internal/qmetrics (UDP bytes
// and datagrams at the broker's socket, packets, losses, PTOs, frames by
// type), the process collector (CPU, RSS) and the Go collector, served as
// plain HTTP on a TCP listener (the broker's --metrics-listen).
package promexport

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/internal/qmetrics"
	"github.com/quiot/quiot/internal/version"
)

// Namespace prefixes every quiot metric.
const Namespace = "quiot"

// BrokerCollector turns broker.Stats snapshots into metrics. Each scrape
// takes one snapshot.
type BrokerCollector struct {
	stats func() broker.Stats

	conns, connsTotal, msgsIn, msgsOut   *prometheus.Desc
	subs, dropped, cutOff, qSum, qMax    *prometheus.Desc
	topics, histMsgs, histBytes, lastSeq *prometheus.Desc
}

// NewBrokerCollector returns a collector over stats, usually
// (*broker.Broker).Stats.
func NewBrokerCollector(stats func() broker.Stats) *BrokerCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(Namespace, "broker", name), help, labels, nil)
	}
	return &BrokerCollector{
		stats:      stats,
		conns:      d("connections", "Open client connections.", "proto"),
		connsTotal: d("connections_total", "Client connections accepted.", "proto"),
		msgsIn:     d("messages_in_total", "Messages accepted from publishers.", "proto"),
		msgsOut:    d("messages_out_total", "Messages delivered to subscribers.", "proto"),
		subs:       d("subscriptions", "Live HTTP/3 pub-sub subscriptions."),
		dropped:    d("dropped_messages_total", "Messages discarded from full subscriber queues."),
		cutOff:     d("subscriptions_cut_off_total", "Subscriptions ended because their queue was full (disconnect policy)."),
		qSum:       d("queue_depth_messages", "Messages waiting in all subscriber queues."),
		qMax:       d("queue_depth_max_messages", "Messages waiting in the fullest subscriber queue."),
		topics:     d("topics", "Topics with history or a retained message."),
		histMsgs:   d("history_messages", "Messages held for resume."),
		histBytes:  d("history_bytes", "Payload bytes held for resume."),
		lastSeq:    d("last_sequence", "Last sequence number assigned."),
	}
}

// Describe implements prometheus.Collector.
func (c *BrokerCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.conns, c.connsTotal, c.msgsIn, c.msgsOut, c.subs, c.dropped,
		c.cutOff, c.qSum, c.qMax, c.topics, c.histMsgs, c.histBytes, c.lastSeq} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *BrokerCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.stats()
	for _, p := range s.ProtocolNames() {
		ps := s.Protocols[p]
		ch <- prometheus.MustNewConstMetric(c.conns, prometheus.GaugeValue, float64(ps.ConnsOpen), p)
		ch <- prometheus.MustNewConstMetric(c.connsTotal, prometheus.CounterValue, float64(ps.ConnsTotal), p)
		ch <- prometheus.MustNewConstMetric(c.msgsIn, prometheus.CounterValue, float64(ps.MessagesIn), p)
		ch <- prometheus.MustNewConstMetric(c.msgsOut, prometheus.CounterValue, float64(ps.MessagesOut), p)
	}
	gauge := func(d *prometheus.Desc, v float64) { ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v) }
	counter := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v)
	}
	gauge(c.subs, float64(s.Subscriptions))
	counter(c.dropped, float64(s.Dropped))
	counter(c.cutOff, float64(s.CutOff))
	gauge(c.qSum, float64(s.QueueDepthSum))
	gauge(c.qMax, float64(s.QueueDepthMax))
	gauge(c.topics, float64(s.Topics))
	gauge(c.histMsgs, float64(s.HistoryMessages))
	gauge(c.histBytes, float64(s.HistoryBytes))
	gauge(c.lastSeq, float64(s.LastSeq))
}

// QUICCollector exports the QUIC statistics of the broker's UDP socket
// (qmetrics.CountingPacketConn) and its connections (qmetrics.Tracer).
// Either source may be nil.
type QUICCollector struct {
	wire  func() qmetrics.WireStats
	trace func() qmetrics.TraceStats

	udpBytes, udpDatagrams, conns, handshakes, packets, packetBytes *prometheus.Desc
	lost, spurious, retrans, pto, dropped, frames, h3frames         *prometheus.Desc
}

// NewQUICCollector returns a collector over the given sources, e.g. a
// CountingPacketConn's Stats and a Tracer's Stats.
func NewQUICCollector(wire func() qmetrics.WireStats, trace func() qmetrics.TraceStats) *QUICCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(Namespace, "quic", name), help, labels, nil)
	}
	return &QUICCollector{
		wire: wire, trace: trace,
		udpBytes:     d("udp_bytes_total", "UDP payload bytes at the broker's QUIC socket.", "direction"),
		udpDatagrams: d("udp_datagrams_total", "UDP datagrams at the broker's QUIC socket.", "direction"),
		conns:        d("connections_total", "QUIC connections traced."),
		handshakes:   d("handshakes_completed_total", "QUIC handshakes completed."),
		packets:      d("packets_total", "QUIC packets.", "direction"),
		packetBytes:  d("packet_bytes_total", "QUIC packet bytes.", "direction"),
		lost:         d("packets_lost_total", "QUIC packets declared lost."),
		spurious:     d("spurious_losses_total", "QUIC packets declared lost and acknowledged later."),
		retrans:      d("retransmitted_packets_total", "Sent packets carrying STREAM or CRYPTO data sent before."),
		pto:          d("pto_total", "Probe timeout expiries."),
		dropped:      d("packets_dropped_total", "Received QUIC packets dropped."),
		frames:       d("frames_total", "QUIC frames by type.", "direction", "type"),
		h3frames:     d("h3_frames_total", "HTTP/3 frames by type.", "direction", "type"),
	}
}

// Describe implements prometheus.Collector.
func (c *QUICCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.udpBytes, c.udpDatagrams, c.conns, c.handshakes, c.packets,
		c.packetBytes, c.lost, c.spurious, c.retrans, c.pto, c.dropped, c.frames, c.h3frames} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *QUICCollector) Collect(ch chan<- prometheus.Metric) {
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	if c.wire != nil {
		w := c.wire()
		counter(c.udpBytes, w.BytesSent, "sent")
		counter(c.udpBytes, w.BytesReceived, "received")
		counter(c.udpDatagrams, w.DatagramsSent, "sent")
		counter(c.udpDatagrams, w.DatagramsReceived, "received")
	}
	if c.trace != nil {
		t := c.trace()
		counter(c.conns, t.Connections)
		counter(c.handshakes, t.HandshakesCompleted)
		counter(c.packets, t.PacketsSent, "sent")
		counter(c.packets, t.PacketsReceived, "received")
		counter(c.packetBytes, t.PacketBytesSent, "sent")
		counter(c.packetBytes, t.PacketBytesReceived, "received")
		counter(c.lost, t.PacketsLost)
		counter(c.spurious, t.SpuriousLosses)
		counter(c.retrans, t.Retransmitted)
		counter(c.pto, t.PTOCount)
		counter(c.dropped, t.PacketsDropped)
		for dir, m := range map[string]map[string]uint64{"sent": t.FramesSent, "received": t.FramesReceived} {
			for ty, n := range m {
				counter(c.frames, n, dir, ty)
			}
		}
		for dir, m := range map[string]map[string]uint64{"sent": t.H3FramesSent, "received": t.H3FramesReceived} {
			for ty, n := range m {
				counter(c.h3frames, n, dir, ty)
			}
		}
	}
}

// NewRegistry returns a registry with the process collector (CPU seconds,
// resident memory, open files), the Go runtime collector, a
// quiot_build_info gauge and the given collectors.
func NewRegistry(cs ...prometheus.Collector) (*prometheus.Registry, error) {
	reg := prometheus.NewRegistry()
	info := prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: Namespace, Name: "build_info", Help: "Always 1; the version label says which quiot runs.",
		ConstLabels: prometheus.Labels{"version": version.Version},
	})
	info.Set(1)
	all := append([]prometheus.Collector{
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		collectors.NewGoCollector(),
		info,
	}, cs...)
	for _, c := range all {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register collector: %w", err)
		}
	}
	return reg, nil
}

// Server serves /metrics over plain HTTP.
type Server struct {
	ln  net.Listener
	srv *http.Server
	err chan error
}

// Listen starts serving reg on addr (host:port; port 0 picks one): GET
// /metrics in the Prometheus text or OpenMetrics format, and a one-line
// index at /.
func Listen(addr string, reg *prometheus.Registry) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics listener: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg, EnableOpenMetrics: true}))
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "quiot metrics: GET /metrics")
	})
	s := &Server{ln: ln, srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}, err: make(chan error, 1)}
	go func() { s.err <- s.srv.Serve(ln) }()
	return s, nil
}

// Addr is the listening address.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Shutdown stops the server, waiting for scrapes in progress until ctx ends.
func (s *Server) Shutdown(ctx context.Context) error {
	err := s.srv.Shutdown(ctx)
	if serr := <-s.err; serr != nil && !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	if err != nil {
		return fmt.Errorf("metrics server shutdown: %w", err)
	}
	return nil
}
