package qmetrics

import (
	"context"
	"maps"
	"sync"

	"github.com/quic-go/quic-go"
	h3qlog "github.com/quic-go/quic-go/http3/qlog"
	"github.com/quic-go/quic-go/qlog"
	"github.com/quic-go/quic-go/qlogwriter"
)

// TraceStats are the counters a Tracer collected over all its connections.
type TraceStats struct {
	// Connections is the number of connections traced.
	Connections uint64 `json:"connections"`
	// HandshakesCompleted counts connections that completed the handshake.
	HandshakesCompleted uint64 `json:"handshakes_completed"`
	// PacketsSent and PacketsReceived count QUIC packets (a datagram may
	// carry several coalesced packets).
	PacketsSent     uint64 `json:"packets_sent"`
	PacketsReceived uint64 `json:"packets_received"`
	// PacketBytesSent and PacketBytesReceived sum the QUIC packet lengths.
	PacketBytesSent     uint64 `json:"packet_bytes_sent"`
	PacketBytesReceived uint64 `json:"packet_bytes_received"`
	// PacketsLost counts packets quic-go's loss detection declared lost.
	PacketsLost uint64 `json:"packets_lost"`
	// SpuriousLosses counts packets declared lost that were acknowledged
	// later.
	SpuriousLosses uint64 `json:"spurious_losses"`
	// Retransmitted counts sent packets carrying STREAM or CRYPTO data that
	// had been sent before (quic-go retransmits frames, not packets).
	// Retransmitted control frames (MAX_STREAMS, ...) are not detected.
	Retransmitted uint64 `json:"retransmitted"`
	// PTOCount counts probe timeout (PTO) expiries.
	PTOCount uint64 `json:"pto_count"`
	// PacketsDropped counts received packets quic-go dropped (undecryptable,
	// duplicate, unknown connection, ...).
	PacketsDropped uint64 `json:"packets_dropped"`
	// FramesSent and FramesReceived count QUIC frames by type, named as in
	// RFC 9000 ("ACK", "STREAM", "MAX_STREAMS", ...).
	FramesSent     map[string]uint64 `json:"frames_sent"`
	FramesReceived map[string]uint64 `json:"frames_received"`
	// H3FramesSent and H3FramesReceived count HTTP/3 frames by type
	// ("HEADERS", "DATA", "SETTINGS", ...); empty for raw QUIC or MQTT.
	H3FramesSent     map[string]uint64 `json:"h3_frames_sent,omitempty"`
	H3FramesReceived map[string]uint64 `json:"h3_frames_received,omitempty"`
	// H3HeaderBytesSent and H3HeaderBytesReceived sum the lengths of
	// HTTP/3 HEADERS frames (QPACK-encoded field sections).
	H3HeaderBytesSent     uint64 `json:"h3_header_bytes_sent,omitempty"`
	H3HeaderBytesReceived uint64 `json:"h3_header_bytes_received,omitempty"`
}

// Tracer counts QUIC events of every connection it traces. Its zero value
// is not usable: create it with NewTracer. Methods are safe for concurrent
// use.
//
// Tracing has a cost: quic-go builds an event with a frame list for every
// packet when a tracer is set. Measure CPU with and without it if that
// matters.
type Tracer struct {
	next func(context.Context, bool, quic.ConnectionID) qlogwriter.Trace

	mu sync.Mutex
	st TraceStats
}

// NewTracer returns a Tracer. next, if not nil, is a further tracer (such
// as qlog.DefaultConnectionTracer) that receives every event as well.
func NewTracer(next func(ctx context.Context, isClient bool, connID quic.ConnectionID) qlogwriter.Trace) *Tracer {
	return &Tracer{next: next, st: newTraceStats()}
}

func newTraceStats() TraceStats {
	return TraceStats{
		FramesSent:       map[string]uint64{},
		FramesReceived:   map[string]uint64{},
		H3FramesSent:     map[string]uint64{},
		H3FramesReceived: map[string]uint64{},
	}
}

// ConnectionTracer is the function to set as quic.Config.Tracer.
func (t *Tracer) ConnectionTracer(ctx context.Context, isClient bool, connID quic.ConnectionID) qlogwriter.Trace {
	ct := &connTrace{t: t, sent: map[streamKey]spans{}}
	if t.next != nil {
		ct.next = t.next(ctx, isClient, connID)
	}
	t.mu.Lock()
	t.st.Connections++
	t.mu.Unlock()
	return ct
}

// Stats returns a copy of the counters so far.
func (t *Tracer) Stats() TraceStats {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.st
	s.FramesSent = maps.Clone(t.st.FramesSent)
	s.FramesReceived = maps.Clone(t.st.FramesReceived)
	s.H3FramesSent = maps.Clone(t.st.H3FramesSent)
	s.H3FramesReceived = maps.Clone(t.st.H3FramesReceived)
	return s
}

// streamKey identifies a data stream of one connection for retransmission
// detection: a QUIC stream, or the CRYPTO stream of an encryption level
// (stream < 0).
type streamKey struct {
	stream int64
	level  qlog.PacketType
}

// connTrace is the qlogwriter.Trace (and Recorder) of one connection.
type connTrace struct {
	t    *Tracer
	next qlogwriter.Trace

	mu    sync.Mutex
	sent  map[streamKey]spans // byte ranges sent per stream
	order []streamKey         // keys of sent, oldest first
}

// AddProducer implements qlogwriter.Trace.
func (c *connTrace) AddProducer() qlogwriter.Recorder {
	r := &recorder{c: c}
	if c.next != nil {
		r.next = c.next.AddProducer()
	}
	return r
}

// recorder is one producer's qlogwriter.Recorder.
type recorder struct {
	c    *connTrace
	next qlogwriter.Recorder
}

// Close implements qlogwriter.Recorder.
func (r *recorder) Close() error {
	if r.next != nil {
		return r.next.Close()
	}
	return nil
}

// RecordEvent implements qlogwriter.Recorder.
func (r *recorder) RecordEvent(ev qlogwriter.Event) {
	r.c.record(ev)
	if r.next != nil {
		r.next.RecordEvent(ev)
	}
}

func (c *connTrace) record(ev qlogwriter.Event) {
	switch e := ev.(type) {
	case qlog.PacketSent:
		retrans := c.isRetransmission(e)
		c.t.mu.Lock()
		c.t.st.PacketsSent++
		c.t.st.PacketBytesSent += uint64(max(e.Raw.Length, 0))
		if retrans {
			c.t.st.Retransmitted++
		}
		countFrames(c.t.st.FramesSent, e.Frames)
		c.t.mu.Unlock()
	case qlog.PacketReceived:
		c.t.mu.Lock()
		c.t.st.PacketsReceived++
		c.t.st.PacketBytesReceived += uint64(max(e.Raw.Length, 0))
		countFrames(c.t.st.FramesReceived, e.Frames)
		c.t.mu.Unlock()
	case qlog.PacketLost:
		c.t.mu.Lock()
		c.t.st.PacketsLost++
		c.t.mu.Unlock()
	case qlog.SpuriousLoss:
		c.t.mu.Lock()
		c.t.st.SpuriousLosses++
		c.t.mu.Unlock()
	case qlog.PacketDropped:
		c.t.mu.Lock()
		c.t.st.PacketsDropped++
		c.t.mu.Unlock()
	case qlog.TimerUpdated:
		if e.Type == qlog.TimerEventTypeExpired && e.TimerType == qlog.TimerTypePTO {
			c.t.mu.Lock()
			c.t.st.PTOCount++
			c.t.mu.Unlock()
		}
	case qlog.ConnectionStateUpdated:
		if e.State == qlog.ConnectionStateHandshakeComplete {
			c.t.mu.Lock()
			c.t.st.HandshakesCompleted++
			c.t.mu.Unlock()
		}
	case h3qlog.FrameCreated:
		name := h3FrameName(e.Frame.Frame)
		c.t.mu.Lock()
		c.t.st.H3FramesSent[name]++
		if name == "HEADERS" {
			c.t.st.H3HeaderBytesSent += uint64(max(e.Raw.Length, 0))
		}
		c.t.mu.Unlock()
	case h3qlog.FrameParsed:
		name := h3FrameName(e.Frame.Frame)
		c.t.mu.Lock()
		c.t.st.H3FramesReceived[name]++
		if name == "HEADERS" {
			c.t.st.H3HeaderBytesReceived += uint64(max(e.Raw.Length, 0))
		}
		c.t.mu.Unlock()
	}
}

// isRetransmission reports whether a sent packet carries STREAM or CRYPTO
// bytes that an earlier packet of the connection already carried. Frames
// sent out of order (quic-go scrambles the ClientHello's CRYPTO frames) are
// not retransmissions; only overlap with bytes already sent counts.
func (c *connTrace) isRetransmission(e qlog.PacketSent) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	retrans := false
	for _, f := range e.Frames {
		var k streamKey
		var off, n int64
		switch fr := f.Frame.(type) {
		case *qlog.StreamFrame:
			k, off, n = streamKey{stream: int64(fr.StreamID)}, fr.Offset, fr.Length
		case *qlog.CryptoFrame:
			k, off, n = streamKey{stream: -1, level: e.Header.PacketType}, fr.Offset, fr.Length
		default:
			continue
		}
		if n <= 0 {
			continue
		}
		set, seen := c.sent[k]
		if !seen {
			c.order = append(c.order, k)
			if len(c.order) > maxTrackedStreams {
				delete(c.sent, c.order[0])
				c.order = c.order[1:]
			}
		}
		var overlap bool
		c.sent[k], overlap = set.add(off, off+n)
		retrans = retrans || overlap
	}
	return retrans
}

// maxTrackedStreams bounds the memory of retransmission detection: the
// sent ranges of only the most recently opened streams are kept (a stream
// per message would otherwise grow the map, and the measured RSS, without
// bound). A retransmission on an older stream goes undetected.
const maxTrackedStreams = 1024

// span is a half-open byte range [start, end).
type span struct{ start, end int64 }

// spans is a sorted list of disjoint, non-adjacent byte ranges.
type spans []span

// add inserts [start, end) and reports whether it overlapped a range
// already present.
func (s spans) add(start, end int64) (spans, bool) {
	overlap := false
	out := s[:0:0]
	i := 0
	for ; i < len(s) && s[i].end < start; i++ {
		out = append(out, s[i])
	}
	merged := span{start, end}
	for ; i < len(s) && s[i].start <= end; i++ {
		if s[i].start < end && s[i].end > start {
			overlap = true
		}
		merged.start = min(merged.start, s[i].start)
		merged.end = max(merged.end, s[i].end)
	}
	out = append(out, merged)
	out = append(out, s[i:]...)
	return out, overlap
}

// countFrames adds the frames of one packet to m by type name.
func countFrames(m map[string]uint64, frames []qlog.Frame) {
	for _, f := range frames {
		m[FrameName(f.Frame)]++
	}
}

// FrameName returns the RFC 9000 name of a frame as quic-go's qlog events
// carry it (qlog.Frame.Frame): "ACK", "STREAM", "MAX_STREAMS", ...;
// "UNKNOWN" for anything else.
func FrameName(f any) string {
	switch f.(type) {
	case *qlog.PingFrame:
		return "PING"
	case *qlog.AckFrame:
		return "ACK"
	case *qlog.ResetStreamFrame:
		return "RESET_STREAM"
	case *qlog.StopSendingFrame:
		return "STOP_SENDING"
	case *qlog.CryptoFrame:
		return "CRYPTO"
	case *qlog.NewTokenFrame:
		return "NEW_TOKEN"
	case *qlog.StreamFrame:
		return "STREAM"
	case *qlog.MaxDataFrame:
		return "MAX_DATA"
	case *qlog.MaxStreamDataFrame:
		return "MAX_STREAM_DATA"
	case *qlog.MaxStreamsFrame:
		return "MAX_STREAMS"
	case *qlog.DataBlockedFrame:
		return "DATA_BLOCKED"
	case *qlog.StreamDataBlockedFrame:
		return "STREAM_DATA_BLOCKED"
	case *qlog.StreamsBlockedFrame:
		return "STREAMS_BLOCKED"
	case *qlog.NewConnectionIDFrame:
		return "NEW_CONNECTION_ID"
	case *qlog.RetireConnectionIDFrame:
		return "RETIRE_CONNECTION_ID"
	case *qlog.PathChallengeFrame:
		return "PATH_CHALLENGE"
	case *qlog.PathResponseFrame:
		return "PATH_RESPONSE"
	case *qlog.ConnectionCloseFrame:
		return "CONNECTION_CLOSE"
	case *qlog.HandshakeDoneFrame:
		return "HANDSHAKE_DONE"
	case *qlog.DatagramFrame:
		return "DATAGRAM"
	case *qlog.AckFrequencyFrame:
		return "ACK_FREQUENCY"
	case *qlog.ImmediateAckFrame:
		return "IMMEDIATE_ACK"
	default:
		return "UNKNOWN"
	}
}

// h3FrameName returns the RFC 9114 name of an HTTP/3 qlog frame.
func h3FrameName(f any) string {
	switch f.(type) {
	case h3qlog.DataFrame:
		return "DATA"
	case h3qlog.HeadersFrame:
		return "HEADERS"
	case h3qlog.GoAwayFrame:
		return "GOAWAY"
	case h3qlog.SettingsFrame:
		return "SETTINGS"
	case h3qlog.PushPromiseFrame:
		return "PUSH_PROMISE"
	case h3qlog.CancelPushFrame:
		return "CANCEL_PUSH"
	case h3qlog.MaxPushIDFrame:
		return "MAX_PUSH_ID"
	case h3qlog.PriorityUpdateFrame:
		return "PRIORITY_UPDATE"
	case h3qlog.ReservedFrame:
		return "RESERVED"
	default:
		return "UNKNOWN"
	}
}
