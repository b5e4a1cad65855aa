package qmetrics

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"

	"github.com/quic-go/quic-go"
	h3qlog "github.com/quic-go/quic-go/http3/qlog"
	"github.com/quic-go/quic-go/qlog"
	"github.com/quic-go/quic-go/qlogwriter"
)

// closeNotifier is an io.WriteCloser that says when it is closed.
type closeNotifier struct {
	io.Writer
	closed chan struct{}
}

func (c closeNotifier) Close() error { close(c.closed); return nil }

// TestTracerEvents feeds synthetic events (loss, PTO, retransmission,
// HTTP/3 frames) that a loopback connection does not produce, and checks
// that the next tracer in the chain sees every event.
func TestTracerEvents(t *testing.T) {
	var qlogOut bytes.Buffer
	qlogClosed := make(chan struct{})
	next := func(context.Context, bool, quic.ConnectionID) qlogwriter.Trace {
		fs := qlogwriter.NewFileSeq(closeNotifier{&qlogOut, qlogClosed})
		go fs.Run()
		return fs
	}
	tr := NewTracer(next)
	trace := tr.ConnectionTracer(context.Background(), true, quic.ConnectionID{})
	rec := trace.AddProducer()
	h3rec := trace.AddProducer()

	stream := func(id, off, n int64) qlog.Frame {
		return qlog.Frame{Frame: &qlog.StreamFrame{StreamID: quic.StreamID(id), Offset: off, Length: n}}
	}
	events := []qlogwriter.Event{
		qlog.PacketSent{Header: qlog.PacketHeader{PacketType: qlog.PacketType1RTT, PacketNumber: 1}, Raw: qlog.RawInfo{Length: 100},
			Frames: []qlog.Frame{stream(0, 0, 50), {Frame: &qlog.MaxStreamsFrame{MaxStreamNum: 10}}}},
		qlog.PacketSent{Header: qlog.PacketHeader{PacketType: qlog.PacketType1RTT, PacketNumber: 2}, Raw: qlog.RawInfo{Length: 100},
			Frames: []qlog.Frame{stream(0, 50, 50)}},
		qlog.PacketLost{Header: qlog.PacketHeader{PacketType: qlog.PacketType1RTT, PacketNumber: 2}},
		qlog.TimerUpdated{Type: qlog.TimerEventTypeExpired, TimerType: qlog.TimerTypePTO},
		qlog.TimerUpdated{Type: qlog.TimerEventTypeExpired, TimerType: qlog.TimerTypeACK},
		qlog.PTOCountUpdated{PTOCount: 1},
		// The retransmission of packet 2's data.
		qlog.PacketSent{Header: qlog.PacketHeader{PacketType: qlog.PacketType1RTT, PacketNumber: 3}, Raw: qlog.RawInfo{Length: 100},
			Frames: []qlog.Frame{stream(0, 50, 50), {Frame: &qlog.PingFrame{}}}},
		qlog.PacketReceived{Header: qlog.PacketHeader{PacketType: qlog.PacketType1RTT, PacketNumber: 1}, Raw: qlog.RawInfo{Length: 40},
			Frames: []qlog.Frame{{Frame: &qlog.AckFrame{}}, {Frame: &qlog.StreamsBlockedFrame{}}}},
		qlog.SpuriousLoss{},
		qlog.PacketDropped{},
		qlog.ConnectionStateUpdated{State: qlog.ConnectionStateHandshakeComplete},
	}
	for _, ev := range events {
		rec.RecordEvent(ev)
	}
	h3rec.RecordEvent(h3qlog.FrameCreated{Raw: h3qlog.RawInfo{Length: 30}, Frame: h3qlog.Frame{Frame: h3qlog.HeadersFrame{}}})
	h3rec.RecordEvent(h3qlog.FrameCreated{Raw: h3qlog.RawInfo{Length: 200}, Frame: h3qlog.Frame{Frame: h3qlog.DataFrame{}}})
	h3rec.RecordEvent(h3qlog.FrameParsed{Raw: h3qlog.RawInfo{Length: 12}, Frame: h3qlog.Frame{Frame: h3qlog.HeadersFrame{}}})
	if err := h3rec.Close(); err != nil {
		t.Fatal(err)
	}
	if err := rec.Close(); err != nil {
		t.Fatal(err)
	}

	s := tr.Stats()
	checks := []struct {
		name      string
		got, want uint64
	}{
		{"connections", s.Connections, 1},
		{"handshakes", s.HandshakesCompleted, 1},
		{"packets sent", s.PacketsSent, 3},
		{"packet bytes sent", s.PacketBytesSent, 300},
		{"packets received", s.PacketsReceived, 1},
		{"packets lost", s.PacketsLost, 1},
		{"spurious", s.SpuriousLosses, 1},
		{"dropped", s.PacketsDropped, 1},
		{"pto", s.PTOCount, 1},
		{"retransmitted", s.Retransmitted, 1},
		{"STREAM sent", s.FramesSent["STREAM"], 3},
		{"MAX_STREAMS sent", s.FramesSent["MAX_STREAMS"], 1},
		{"PING sent", s.FramesSent["PING"], 1},
		{"ACK received", s.FramesReceived["ACK"], 1},
		{"STREAMS_BLOCKED received", s.FramesReceived["STREAMS_BLOCKED"], 1},
		{"h3 HEADERS sent", s.H3FramesSent["HEADERS"], 1},
		{"h3 DATA sent", s.H3FramesSent["DATA"], 1},
		{"h3 header bytes sent", s.H3HeaderBytesSent, 30},
		{"h3 header bytes received", s.H3HeaderBytesReceived, 12},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %d, want %d", c.name, c.got, c.want)
		}
	}
	// The stats are a copy.
	s.FramesSent["STREAM"] = 99
	if tr.Stats().FramesSent["STREAM"] != 3 {
		t.Error("Stats() shares its maps with the tracer")
	}
	// The chained qlog writer got the events; it closes its writer once
	// both producers are closed.
	<-qlogClosed
	if out := qlogOut.String(); !strings.Contains(out, "recovery:packet_lost") || !strings.Contains(out, "http3:frame_created") {
		t.Errorf("chained qlog lacks events:\n%.500s", out)
	}
}

func TestFrameName(t *testing.T) {
	tests := []struct {
		f    any
		want string
	}{
		{&qlog.AckFrame{}, "ACK"},
		{&qlog.MaxStreamsFrame{}, "MAX_STREAMS"},
		{&qlog.CryptoFrame{}, "CRYPTO"},
		{&qlog.HandshakeDoneFrame{}, "HANDSHAKE_DONE"},
		{&qlog.DatagramFrame{}, "DATAGRAM"},
		{&qlog.ConnectionCloseFrame{}, "CONNECTION_CLOSE"},
		{struct{}{}, "UNKNOWN"},
	}
	for _, tt := range tests {
		if got := FrameName(tt.f); got != tt.want {
			t.Errorf("FrameName(%T) = %q, want %q", tt.f, got, tt.want)
		}
	}
}
