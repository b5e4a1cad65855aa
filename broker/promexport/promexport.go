// Package promexport exposes the broker's counters to Prometheus: a
// collector over (*broker.Broker).Stats (connections, subscriptions,
// messages in and out and refusals per protocol, drops, queue depths,
// history, retained messages), one over
// the QUIC statistics of internal/qmetrics (UDP bytes and datagrams at the
// broker's socket, packets, losses, PTOs, frames by type), process metrics
// (CPU, RSS, open files) and Go runtime metrics, served as plain HTTP on a
// TCP listener (the broker's --metrics-listen) in the Prometheus text
// exposition format (version 0.0.4).
//
// Every family is written here, each with its # HELP and # TYPE line once,
// for the size of the Raspberry Pi binary, whose budget is 12 MB (ARMv6,
// `make pi`, checked by device/arm_test.go). Measured with size(1) on that
// binary at commit bcfc1da: Prometheus' client_golang with protobuf,
// client_model, prometheus/common and their other dependencies added
// 2.12 MB of text and data; github.com/VictoriaMetrics/metrics added
// 0.13 MB. This package used the latter for the process_* and go_* families
// until the Pi binary went over its budget: the library compiles a regexp
// in its package init (run in every quiot process, a publisher too) and
// brings the runtime/metrics descriptions. process.go writes the process_*
// families (the names the Prometheus client libraries use) from /proc/self
// read through github.com/prometheus/procfs, and the go_* families from
// runtime.ReadMemStats and debug.ReadGCStats. OpenMetrics is not offered: Prometheus scrapes the text
// format.
package promexport

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/internal/qmetrics"
	"github.com/quiot/quiot/internal/version"
)

// Namespace prefixes every quiot metric.
const Namespace = "quiot"

// ContentType is the media type of /metrics: the Prometheus text
// exposition format.
const ContentType = "text/plain; version=0.0.4; charset=utf-8"

// Collector writes metric families in the Prometheus text exposition
// format, each family's # HELP and # TYPE lines once, then its samples.
type Collector interface {
	WritePrometheus(w io.Writer)
}

// BrokerCollector turns broker.Stats snapshots into metrics. Each scrape
// takes one snapshot.
type BrokerCollector struct {
	stats func() broker.Stats
}

// NewBrokerCollector returns a collector over stats, usually
// (*broker.Broker).Stats.
func NewBrokerCollector(stats func() broker.Stats) *BrokerCollector {
	return &BrokerCollector{stats: stats}
}

// WritePrometheus implements Collector: quiot_broker_*.
func (c *BrokerCollector) WritePrometheus(w io.Writer) {
	s := c.stats()
	e := expo{w: w, prefix: Namespace + "_broker_"}
	protos := s.ProtocolNames()
	perProto := func(name, typ, help string, v func(broker.ProtoStats) string) {
		if len(protos) == 0 {
			return
		}
		e.family(name, typ, help)
		for _, p := range protos {
			e.sample(name, v(s.Protocols[p]), "proto", p)
		}
	}
	perProto("connections", gauge, "Open client connections.",
		func(ps broker.ProtoStats) string { return strconv.FormatInt(ps.ConnsOpen, 10) })
	perProto("connections_total", counter, "Client connections accepted.",
		func(ps broker.ProtoStats) string { return u(ps.ConnsTotal) })
	perProto("messages_in_total", counter, "Messages accepted from publishers.",
		func(ps broker.ProtoStats) string { return u(ps.MessagesIn) })
	perProto("messages_out_total", counter, "Messages delivered to subscribers.",
		func(ps broker.ProtoStats) string { return u(ps.MessagesOut) })
	e.single("subscriptions", gauge, "Live HTTP/3 pub-sub subscriptions.", i(s.Subscriptions))
	e.single("dropped_messages_total", counter, "Messages discarded from full subscriber queues.", u(s.Dropped))
	e.single("subscriptions_cut_off_total", counter, "Subscriptions ended because their queue was full (disconnect policy).", u(s.CutOff))
	e.single("queue_depth_messages", gauge, "Messages waiting in all subscriber queues.", i(s.QueueDepthSum))
	e.single("queue_depth_max_messages", gauge, "Messages waiting in the fullest subscriber queue.", i(s.QueueDepthMax))
	e.single("topics", gauge, "Topics with history or a retained message.", i(s.Topics))
	e.single("history_messages", gauge, "Messages held for resume.", i(s.HistoryMessages))
	e.single("history_bytes", gauge, "Payload bytes held for resume.", strconv.FormatInt(s.HistoryBytes, 10))
	e.single("last_sequence", gauge, "Last sequence number assigned.", u(s.LastSeq))
	e.single("stream_inflight_waits_total", counter, "Times a publish stream waited for its QoS 0 frames to be stored (Limits.StreamInflight).", u(s.StreamInflightWaits))
	e.single("quic_retries_total", counter, "HTTP/3 connection attempts asked to prove their source address with a Retry (Limits.QUICRetryAbove).", u(s.QUICRetries))
	e.single("quic_half_open", gauge, "HTTP/3 handshakes in progress from addresses not yet validated.", strconv.FormatInt(s.QUICHalfOpen, 10))
	e.single("http_requests", gauge, "HTTP requests being handled (subscriptions and publish streams included).", i(s.Requests))
	e.single("retained_messages", gauge, "Retained messages held.", i(s.Retained))
	e.single("retained_bytes", gauge, "Bytes of the retained messages held (as Limits.RetainedBytes counts them).", strconv.FormatInt(s.RetainedBytes, 10))
	if len(protos) > 0 {
		// Every reason of every protocol, zero included: the reasons are a
		// fixed set, and a series that appears only at the first refusal
		// hides the refusals before a scrape (rate, increase).
		e.family("refused_total", counter, "Connections, requests, publishes and subscriptions refused, by protocol and reason.")
		for _, p := range protos {
			for _, r := range broker.Reasons() {
				e.sample("refused_total", u(s.Protocols[p].Refused[r.String()]), "proto", p, "reason", r.String())
			}
		}
	}
	if len(s.Refused) > 0 {
		limits := slices.Sorted(maps.Keys(s.Refused))
		e.family("limit_refused_total", counter, "Connections and subscriptions of the HTTP side refused by a limit (broker.Limits), by limit.")
		for _, l := range limits {
			e.sample("limit_refused_total", u(s.Refused[l]), "limit", l)
		}
	}
}

// QUICCollector exports the QUIC statistics of the broker's UDP socket
// (qmetrics.CountingPacketConn) and its connections (qmetrics.Tracer).
// Either source may be nil.
type QUICCollector struct {
	wire  func() qmetrics.WireStats
	trace func() qmetrics.TraceStats
}

// NewQUICCollector returns a collector over the given sources, e.g. a
// CountingPacketConn's Stats and a Tracer's Stats.
func NewQUICCollector(wire func() qmetrics.WireStats, trace func() qmetrics.TraceStats) *QUICCollector {
	return &QUICCollector{wire: wire, trace: trace}
}

// WritePrometheus implements Collector: quiot_quic_*.
func (c *QUICCollector) WritePrometheus(w io.Writer) {
	e := expo{w: w, prefix: Namespace + "_quic_"}
	byDir := func(name, help string, sent, received uint64) {
		e.family(name, counter, help)
		e.sample(name, u(sent), "direction", "sent")
		e.sample(name, u(received), "direction", "received")
	}
	if c.wire != nil {
		s := c.wire()
		byDir("udp_bytes_total", "UDP payload bytes at the broker's QUIC socket.", s.BytesSent, s.BytesReceived)
		byDir("udp_datagrams_total", "UDP datagrams at the broker's QUIC socket.", s.DatagramsSent, s.DatagramsReceived)
	}
	if c.trace == nil {
		return
	}
	t := c.trace()
	e.single("connections_total", counter, "QUIC connections traced.", u(t.Connections))
	e.single("handshakes_completed_total", counter, "QUIC handshakes completed.", u(t.HandshakesCompleted))
	byDir("packets_total", "QUIC packets.", t.PacketsSent, t.PacketsReceived)
	byDir("packet_bytes_total", "QUIC packet bytes.", t.PacketBytesSent, t.PacketBytesReceived)
	e.single("packets_lost_total", counter, "QUIC packets declared lost.", u(t.PacketsLost))
	e.single("spurious_losses_total", counter, "QUIC packets declared lost and acknowledged later.", u(t.SpuriousLosses))
	e.single("retransmitted_packets_total", counter, "Sent packets carrying STREAM or CRYPTO data sent before.", u(t.Retransmitted))
	e.single("pto_total", counter, "Probe timeout expiries.", u(t.PTOCount))
	e.single("packets_dropped_total", counter, "Received QUIC packets dropped.", u(t.PacketsDropped))
	byType := func(name, help string, sent, received map[string]uint64) {
		if len(sent)+len(received) == 0 {
			return
		}
		e.family(name, counter, help)
		for _, d := range []struct {
			dir string
			m   map[string]uint64
		}{{"sent", sent}, {"received", received}} {
			for _, ty := range slices.Sorted(maps.Keys(d.m)) {
				e.sample(name, u(d.m[ty]), "direction", d.dir, "type", ty)
			}
		}
	}
	byType("frames_total", "QUIC frames by type.", t.FramesSent, t.FramesReceived)
	byType("h3_frames_total", "HTTP/3 frames by type.", t.H3FramesSent, t.H3FramesReceived)
}

// Registry is what /metrics serves: its collectors, a quiot_build_info
// gauge, the process metrics (CPU seconds, resident memory, open files, ...)
// and the Go runtime metrics.
type Registry struct {
	collectors []Collector
}

// NewRegistry returns a registry over the given collectors; it writes the
// process_* and go_* families after theirs.
func NewRegistry(cs ...Collector) *Registry {
	return &Registry{collectors: slices.Clone(cs)}
}

// WritePrometheus implements Collector: every metric of the registry.
func (r *Registry) WritePrometheus(w io.Writer) {
	for _, c := range r.collectors {
		c.WritePrometheus(w)
	}
	e := expo{w: w, prefix: Namespace + "_"}
	e.family("build_info", gauge, "Always 1; the version label says which quiot runs.")
	e.sample("build_info", "1", "version", version.Version)
	writeProcess(w, readProc(procRoot))
	writeGo(w)
}

// ServeHTTP writes the registry's metrics, gzip-compressed when the client
// accepts it (Prometheus does).
func (r *Registry) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	var buf bytes.Buffer
	r.WritePrometheus(&buf)
	w.Header().Set("Content-Type", ContentType)
	w.Header().Add("Vary", "Accept-Encoding")
	if !acceptsGzip(req.Header.Get("Accept-Encoding")) {
		w.Header().Set("Content-Length", strconv.Itoa(buf.Len()))
		_, _ = buf.WriteTo(w)
		return
	}
	w.Header().Set("Content-Encoding", "gzip")
	zw := gzip.NewWriter(w)
	_, _ = buf.WriteTo(zw)
	_ = zw.Close()
}

// acceptsGzip reports whether an Accept-Encoding header value lists gzip
// with a nonzero quality.
func acceptsGzip(accept string) bool {
	for part := range strings.SplitSeq(accept, ",") {
		coding, params, _ := strings.Cut(part, ";")
		if !strings.EqualFold(strings.TrimSpace(coding), "gzip") {
			continue
		}
		q, ok := strings.CutPrefix(strings.ReplaceAll(params, " ", ""), "q=")
		if !ok {
			return true
		}
		v, err := strconv.ParseFloat(q, 64)
		return err == nil && v > 0
	}
	return false
}

// Server serves /metrics over plain HTTP.
type Server struct {
	ln  net.Listener
	srv *http.Server
	err chan error
}

// Listen starts serving reg on addr (host:port; port 0 picks one): GET
// /metrics in the Prometheus text format, and a one-line index at /.
func Listen(addr string, reg *Registry) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics listener: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", reg)
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

// Metric types of # TYPE lines.
const (
	counter = "counter"
	gauge   = "gauge"
)

// expo writes families of the text exposition format whose names start
// with prefix (see the package comment for why not the library's writers).
type expo struct {
	w      io.Writer
	prefix string
}

// family writes the # HELP and # TYPE lines of family name.
func (e expo) family(name, typ, help string) {
	fmt.Fprintf(e.w, "# HELP %s%s %s\n# TYPE %s%s %s\n", e.prefix, name, helpEscaper.Replace(help), e.prefix, name, typ)
}

// sample writes one sample of family name; labels are name, value pairs.
func (e expo) sample(name, value string, labels ...string) {
	var b strings.Builder
	b.WriteString(e.prefix)
	b.WriteString(name)
	for i := 0; i+1 < len(labels); i += 2 {
		if i == 0 {
			b.WriteByte('{')
		} else {
			b.WriteByte(',')
		}
		b.WriteString(labels[i])
		b.WriteString(`="`)
		b.WriteString(labelEscaper.Replace(labels[i+1]))
		b.WriteByte('"')
	}
	if len(labels) >= 2 {
		b.WriteByte('}')
	}
	b.WriteByte(' ')
	b.WriteString(value)
	b.WriteByte('\n')
	_, _ = io.WriteString(e.w, b.String())
}

// single writes a family of one sample without labels.
func (e expo) single(name, typ, help, value string) {
	e.family(name, typ, help)
	e.sample(name, value)
}

var (
	helpEscaper  = strings.NewReplacer(`\`, `\\`, "\n", `\n`)
	labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
)

func u(v uint64) string { return strconv.FormatUint(v, 10) }
func i(v int) string    { return strconv.Itoa(v) }
