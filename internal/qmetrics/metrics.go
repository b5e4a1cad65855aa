package qmetrics

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/quiot/quiot/internal/sysstat"
)

// RoleMetrics is one role's measurements of one run: docs/BENCH.md's eight
// metrics at the top level, diagnostics under "diag". It is what
// --metrics-out writes. A metric that does not apply to the role (latency
// at a publisher, TTFD at a subscriber) is 0.
type RoleMetrics struct {
	// Role is "pub", "sub" or "broker".
	Role string `json:"role"`
	// Proto is the protocol: "h3" or "mqtt".
	Proto string `json:"proto,omitempty"`
	// MessagesSent is the number of messages the role sent (acknowledged,
	// for QoS 1); MessagesReceived the number it received.
	MessagesSent     uint64 `json:"messages_sent"`
	MessagesReceived uint64 `json:"messages_received"`

	// HandshakeMs is dial -> QUIC handshake complete (metric 1).
	HandshakeMs float64 `json:"handshake_ms"`
	// TTFDMs is first publish started (connection setup included) -> broker
	// acknowledgement received (metric 2).
	TTFDMs float64 `json:"ttfd_ms"`
	// LatencyMs is publish send time -> delivery at the subscriber (metric 3).
	LatencyMs LatencyMs `json:"latency_ms"`
	// ThroughputMsgsS is delivered messages per second (metric 4).
	ThroughputMsgsS float64 `json:"throughput_msgs_s"`
	// DeliveryRatio is delivered/sent (metric 4).
	DeliveryRatio float64 `json:"delivery_ratio"`
	// CompletionS is the time to deliver all N messages (metric 4).
	CompletionS float64 `json:"completion_s"`
	// WireBytes is UDP payload bytes sent + received at the role's own
	// socket (metric 5).
	WireBytes uint64 `json:"wire_bytes"`
	// WireDatagrams is UDP datagrams sent + received, same place (metric 6).
	WireDatagrams uint64 `json:"wire_datagrams"`
	// CPUMsPerMsg is user+sys CPU time of the process per message (metric 7).
	CPUMsPerMsg float64 `json:"cpu_ms_per_msg"`
	// CPUPct is user+sys CPU time as a percentage of one core (metric 7).
	CPUPct float64 `json:"cpu_pct"`
	// PeakRSSKiB is the process's peak resident memory, VmHWM (metric 8).
	PeakRSSKiB uint64 `json:"peak_rss_kib"`

	// Diag holds the diagnostics.
	Diag Diag `json:"diag"`
	// LatenciesMs are raw per-message latencies (a bounded prefix), for CDF
	// plots; omitted when not recorded.
	LatenciesMs []float64 `json:"latencies_ms,omitempty"`
	// StampDelaysMs are a publisher's per-message waits between the
	// application's publish call and the send-time stamp (connection
	// setup), in call order (a bounded prefix); with the subscriber's
	// LatenciesMs they give the latency from the publish call (issue 12's
	// common clock). Omitted when not recorded.
	StampDelaysMs []float64 `json:"stamp_delays_ms,omitempty"`
}

// Diag are the diagnostics beside the eight metrics.
type Diag struct {
	// PacketsLost, Retransmitted and PTOCount come from the tracer.
	PacketsLost   uint64 `json:"packets_lost"`
	Retransmitted uint64 `json:"retransmitted"`
	PTOCount      uint64 `json:"pto_count"`
	// FramesSent and FramesReceived count QUIC frames by type.
	FramesSent     map[string]uint64 `json:"frames_sent"`
	FramesReceived map[string]uint64 `json:"frames_received"`
	// GCCycles is the number of Go GC cycles during the run.
	GCCycles uint32 `json:"gc_cycles"`
	// Wire splits wire_bytes and wire_datagrams by direction.
	Wire WireStats `json:"wire"`
	// Trace holds every tracer counter (packets, HTTP/3 frames, ...).
	Trace *TraceStats `json:"trace,omitempty"`
	// CPUMs is the total user+sys CPU time in ms; RSSKiB the resident
	// memory at the end.
	CPUMs  float64 `json:"cpu_ms"`
	RSSKiB uint64  `json:"rss_kib"`
	// LatencyCount is the number of latencies recorded; LatencyNegative
	// how many of them were negative (clock offset between hosts).
	LatencyCount    int64  `json:"latency_count"`
	LatencyNegative uint64 `json:"latency_negative"`
	// WallS is the measured interval's wall-clock duration.
	WallS float64 `json:"wall_s"`
	// Replayed and Retained count a subscriber's messages replayed from the
	// broker's history (a resume point asked for) and retained messages:
	// included in messages_received, left out of latency_ms, which is of
	// live messages only.
	Replayed uint64 `json:"replayed,omitempty"`
	Retained uint64 `json:"retained,omitempty"`
}

// NewRoleMetrics returns RoleMetrics for role with empty frame maps.
func NewRoleMetrics(role, proto string) *RoleMetrics {
	return &RoleMetrics{
		Role:  role,
		Proto: proto,
		Diag:  Diag{FramesSent: map[string]uint64{}, FramesReceived: map[string]uint64{}},
	}
}

// SetWire sets wire_bytes, wire_datagrams and their split.
func (m *RoleMetrics) SetWire(s WireStats) {
	m.WireBytes = s.Bytes()
	m.WireDatagrams = s.Datagrams()
	m.Diag.Wire = s
}

// SetTrace sets the tracer diagnostics.
func (m *RoleMetrics) SetTrace(s TraceStats) {
	m.Diag.PacketsLost = s.PacketsLost
	m.Diag.Retransmitted = s.Retransmitted
	m.Diag.PTOCount = s.PTOCount
	m.Diag.FramesSent = s.FramesSent
	m.Diag.FramesReceived = s.FramesReceived
	m.Diag.Trace = &s
}

// SetUsage sets cpu_ms_per_msg (over msgs messages), cpu_pct, peak_rss_kib
// and the GC count from a sysstat.Usage.
func (m *RoleMetrics) SetUsage(u sysstat.Usage, msgs uint64) {
	m.CPUMsPerMsg = u.CPUMsPer(int(min(msgs, uint64(^uint(0)>>1))))
	m.CPUPct = u.CPUPercent()
	m.PeakRSSKiB = u.PeakRSSKiB
	m.Diag.GCCycles = u.GCCycles
	m.Diag.CPUMs = float64(u.CPU()) / float64(time.Millisecond)
	m.Diag.RSSKiB = u.RSSKiB
	m.Diag.WallS = u.Wall.Seconds()
}

// SetLatency sets latency_ms from l, and the raw samples if withSamples.
func (m *RoleMetrics) SetLatency(l *Latency, withSamples bool) {
	m.LatencyMs = l.Summary()
	m.Diag.LatencyCount = l.Count()
	m.Diag.LatencyNegative = l.Negatives()
	if withSamples {
		m.LatenciesMs = l.Samples()
	}
}

// SetDelivery sets throughput_msgs_s, delivery_ratio and completion_s from
// the number of messages expected and delivered and the time it took
// (from the first send to the last delivery).
func (m *RoleMetrics) SetDelivery(expected, delivered uint64, took time.Duration) {
	m.CompletionS = took.Seconds()
	if took > 0 {
		m.ThroughputMsgsS = float64(delivered) / took.Seconds()
	}
	if expected > 0 {
		m.DeliveryRatio = float64(delivered) / float64(expected)
	}
}

// Ms converts a duration to float milliseconds.
func Ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// WriteFile writes m as indented JSON to path, atomically (a temporary
// file in the same directory, then rename).
func (m *RoleMetrics) WriteFile(path string) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return fmt.Errorf("encode metrics: %w", err)
	}
	b = append(b, '\n')
	tmp, err := os.CreateTemp(filepath.Dir(path), ".metrics-*.json")
	if err != nil {
		return fmt.Errorf("write metrics: %w", err)
	}
	_, werr := tmp.Write(b)
	cerr := tmp.Close()
	if err := errors.Join(werr, cerr); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("write metrics %s: %w", path, err)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("write metrics %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("write metrics %s: %w", path, err)
	}
	return nil
}

// ReadFile reads a RoleMetrics JSON file.
func ReadFile(path string) (*RoleMetrics, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read metrics: %w", err)
	}
	var m RoleMetrics
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("parse metrics %s: %w", path, err)
	}
	return &m, nil
}
