package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/quiot/quiot/internal/wire"
)

func newTestH3(t *testing.T, broker string) *h3Client {
	t.Helper()
	c, err := New(Options{Broker: broker, Insecure: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("New(%q): %v", broker, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c.(*h3Client)
}

func TestH3PathFor(t *testing.T) {
	c := newTestH3(t, "https://broker.example:4433")
	tests := []struct {
		name, in, query, want string
	}{
		{"plain", "a/b/c", "", "https://broker.example:4433/v1/topics/a%2Fb%2Fc"},
		{"hash escaped", "sensors/#", "", "https://broker.example:4433/v1/topics/sensors%2F%23"},
		{"plus kept", "+/temp", "", "https://broker.example:4433/v1/topics/+%2Ftemp"},
		{"space and percent", "a b/50%", "", "https://broker.example:4433/v1/topics/a%20b%2F50%25"},
		{"query", "a", "since=7", "https://broker.example:4433/v1/topics/a?since=7"},
		{"dollar", "$SYS/x", "", "https://broker.example:4433/v1/topics/$SYS%2Fx"},
		{"leading slash", "/TopicA", "", "https://broker.example:4433/v1/topics/%2FTopicA"},
		{"empty level", "a//b", "", "https://broker.example:4433/v1/topics/a%2F%2Fb"},
		{"dotdot level", "a/../b", "", "https://broker.example:4433/v1/topics/a%2F..%2Fb"},
		{"dotdot alone", "..", "since=7", "https://broker.example:4433/v1/topics?since=7&topic=.."},
		{"dot alone", ".", "", "https://broker.example:4433/v1/topics?topic=."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q, _ := url.ParseQuery(tt.query)
			if got := c.pathFor(tt.in, q).String(); got != tt.want {
				t.Fatalf("pathFor(%q) = %s, want %s", tt.in, got, tt.want)
			}
		})
	}
}

func TestH3PublishPathFor(t *testing.T) {
	c := newTestH3(t, "https://broker.example:4433")
	tests := []struct {
		name, in, query, want string
	}{
		{"raw levels", "a/b/c", "", "https://broker.example:4433/v1/topics/a/b/c"},
		{"escaped within levels", "a b/50%/x#y", "", "https://broker.example:4433/v1/topics/a%20b/50%25/x%23y"},
		{"query", "a/b", "qos=0", "https://broker.example:4433/v1/topics/a/b?qos=0"},
		{"encoded dot is not a dot segment", "a/%2e/b", "", "https://broker.example:4433/v1/topics/a/%252e/b"},
		// Levels that are not safe path segments: one percent-encoded segment.
		{"leading slash", "/TopicA", "", "https://broker.example:4433/v1/topics/%2FTopicA"},
		{"trailing slash", "a/", "", "https://broker.example:4433/v1/topics/a%2F"},
		{"empty level", "a//b", "", "https://broker.example:4433/v1/topics/a%2F%2Fb"},
		{"dot level", "a/./b", "", "https://broker.example:4433/v1/topics/a%2F.%2Fb"},
		{"dotdot level", "a/../b", "", "https://broker.example:4433/v1/topics/a%2F..%2Fb"},
		{"dotdot alone", "..", "", "https://broker.example:4433/v1/topics?topic=.."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q, _ := url.ParseQuery(tt.query)
			u := c.publishPathFor(tt.in, q)
			if got := u.String(); got != tt.want {
				t.Fatalf("publishPathFor(%q) = %s, want %s", tt.in, got, tt.want)
			}
			if u.Path != "/v1/topics/"+tt.in && u.Query().Get("topic") != tt.in {
				t.Fatalf("publishPathFor(%q): decoded path %q does not name the topic", tt.in, u.Path)
			}
		})
	}
}

func TestH3NewErrors(t *testing.T) {
	tests := []struct {
		name string
		opts Options
		want string
	}{
		{"path", Options{Broker: "https://h:1/x"}, "want no path"},
		{"mode", Options{Broker: "https://h:1", PublishMode: "burst"}, "unknown publish mode"},
		{"scheme", Options{Broker: "http://h:1"}, "unsupported broker URL scheme"},
		{"no host", Options{Broker: "https:///x"}, "no host"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.opts)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("New(%+v) = %v, want error containing %q", tt.opts, err, tt.want)
			}
		})
	}
}

func TestH3DefaultPort(t *testing.T) {
	c := newTestH3(t, "https://localhost")
	if c.hostport != "localhost:4433" {
		t.Fatalf("hostport = %q, want localhost:4433", c.hostport)
	}
}

func TestRetryable(t *testing.T) {
	tests := []struct {
		err  error
		want bool
	}{
		{nil, false},
		{context.Canceled, false},
		{fmt.Errorf("x: %w", context.DeadlineExceeded), false},
		{ErrClosed, false},
		{&StatusError{Code: 400}, false},
		{&StatusError{Code: 401}, false},
		{fmt.Errorf("wrapped: %w", &StatusError{Code: 403}), false},
		{&StatusError{Code: 413}, false},
		{&StatusError{Code: 429}, true},
		{&StatusError{Code: 503}, true},
		{&StatusError{Code: 500}, true},
		{io.ErrUnexpectedEOF, true},
		{errSubscriptionEnded, true},
		{errors.New("connection reset"), true},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.err), func(t *testing.T) {
			if got := retryable(tt.err); got != tt.want {
				t.Fatalf("retryable(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}

func TestStatusErrorMessage(t *testing.T) {
	e := &StatusError{Op: `publish to "a"`, Code: 403, Reason: "not allowed"}
	if got, want := e.Error(), `publish to "a": broker answered 403 Forbidden: not allowed`; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
}

func TestResumeState(t *testing.T) {
	st := &resumeState{since: 0, last: map[string]uint64{}}
	steps := []struct {
		m        Message
		accepted bool
		since    uint64
	}{
		{Message{Topic: "b", Seq: 3, Retained: true}, true, 3},
		{Message{Topic: "a", Seq: 5, Retained: true}, true, 5},
		{Message{Topic: "a", Seq: 8}, true, 8},
		{Message{Topic: "b", Seq: 9}, true, 9},
		{Message{Topic: "a", Seq: 8}, false, 9}, // replayed duplicate
		{Message{Topic: "b", Seq: 3, Retained: true}, false, 9},
		{Message{Topic: "a", Gap: true, Seq: 20}, true, 19},
		{Message{Topic: "a", Seq: 20}, true, 20},
		{Message{Topic: "c", Gap: true}, true, 20}, // unknown range
		{Message{Topic: "m"}, true, 20},            // unnumbered (MQTT bridge)
	}
	for i, s := range steps {
		if got := st.accept(&s.m, true); got != s.accepted {
			t.Fatalf("step %d accept(%+v) = %v, want %v", i, s.m, got, s.accepted)
		}
		if st.resumePoint() != s.since {
			t.Fatalf("step %d resume point %d, want %d", i, st.resumePoint(), s.since)
		}
	}
	st.reset()
	if st.resumePoint() != 0 || len(st.last) != 0 {
		t.Fatal("reset kept state")
	}
}

// TestResumeGapDuringReplay: a gap announced while the history is
// replayed does not move the resume point: the broker announces a topic's
// gap before the replay, and it can end above messages of other topics
// still to come (here b's message 1 after a's gap up to 7). A stream cut
// right after the gap resumes from before them, not after the gap.
func TestResumeGapDuringReplay(t *testing.T) {
	st := &resumeState{since: 0, fromStart: true, last: map[string]uint64{}}
	steps := []struct {
		m     Message
		live  bool
		since uint64
	}{
		{Message{Topic: "a", Gap: true, Seq: 8}, false, 0},
		{Message{Topic: "b", Seq: 1, Replayed: true}, false, 1},
		{Message{Topic: "a", Seq: 8, Replayed: true}, false, 8},
		{Message{Topic: "c", Gap: true, Seq: 12}, false, 8},
		{Message{Topic: "a", Seq: 9}, true, 9},
		{Message{Topic: "d", Gap: true, Seq: 15}, true, 14}, // live: it moves
	}
	for i, s := range steps {
		if !st.accept(&s.m, s.live) {
			t.Fatalf("step %d: %+v refused", i, s.m)
		}
		if st.resumePoint() != s.since {
			t.Fatalf("step %d (%+v, live %v): resume point %d, want %d", i, s.m, s.live, st.resumePoint(), s.since)
		}
	}
}

func TestResumeQuery(t *testing.T) {
	tests := []struct {
		name         string
		since, epoch uint64
		want         string
	}{
		{"fresh", 0, 0, ""},
		{"fresh, epoch known", 0, 0xabc, ""},
		{"since, no epoch (older broker or the caller's since)", 7, 0, "since=7"},
		{"since and epoch", 7, 0x00c0ffee12345678, "epoch=00c0ffee12345678&since=7"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := &resumeState{since: tt.since, epoch: tt.epoch, last: map[string]uint64{}}
			if got := st.query().Encode(); got != tt.want {
				t.Fatalf("query = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestReadMessages(t *testing.T) {
	sent := time.Unix(1700000000, 5)
	var b []byte
	b = wire.AppendFrame(b, &wire.Frame{Seq: 1, Time: sent.UnixNano(), Topic: "a/b", Payload: []byte("hi"), Flags: wire.FlagRetained})
	b = wire.AppendFrame(b, &wire.Frame{Seq: 2, Topic: "a/c", Payload: nil})
	g := wire.GapFrame(wire.Gap{Topic: "a/b", From: 3, To: 9})
	b = wire.AppendFrame(b, &g)
	r := wire.GapFrame(wire.Gap{From: 77})
	hb := wire.HeartbeatFrame()
	b = wire.AppendFrame(b, &hb) // heartbeats anywhere: never delivered
	b = wire.AppendFrame(b, &r)
	b = wire.AppendFrame(b, &hb)
	var got []Message
	restarts := 0
	if err := readMessages(strings.NewReader(string(b)), func() { restarts++ }, func(m Message) { got = append(got, m) }); err != nil {
		t.Fatalf("readMessages: %v", err)
	}
	if len(got) != 4 || restarts != 1 {
		t.Fatalf("got %d messages and %d restarts, want 4 and 1", len(got), restarts)
	}
	if m := got[0]; m.Topic != "a/b" || m.Seq != 1 || string(m.Payload) != "hi" || !m.Retained || !m.Sent.Equal(sent) || m.Gap {
		t.Fatalf("message 0 = %+v", m)
	}
	if m := got[1]; m.Topic != "a/c" || m.Seq != 2 || !m.Sent.IsZero() || m.Latency() != 0 {
		t.Fatalf("message 1 = %+v", m)
	}
	if m := got[2]; !m.Gap || m.Topic != "a/b" || m.Seq != 10 {
		t.Fatalf("gap = %+v, want Gap on a/b with Seq 10 (first after the gap)", m)
	}
	// A stream cut inside a frame is an error, not a clean end.
	if m := got[3]; !m.Gap || m.Topic != "" || m.Seq != 0 {
		t.Fatalf("restart gap = %+v", m)
	}
	if err := readMessages(strings.NewReader(string(b[:len(b)-2])), func() {}, func(Message) {}); err == nil {
		t.Fatal("readMessages of a truncated stream returned nil")
	}
}
