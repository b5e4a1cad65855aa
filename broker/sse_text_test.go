package broker_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/quiot/quiot/broker/brokertest"
	"github.com/quiot/quiot/internal/wire"
)

// nextEvent reads one raw SSE event (10 s at most).
func (s *sub) nextEvent() wire.SSEEvent {
	s.t.Helper()
	type res struct {
		ev  wire.SSEEvent
		err error
	}
	ch := make(chan res, 1)
	go func() {
		ev, err := s.sse.Next()
		ch <- res{ev, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			s.t.Fatalf("reading events: %v", r.err)
		}
		return r.ev
	case <-time.After(10 * time.Second):
		s.close()
		s.t.Fatal("timeout waiting for an event")
	}
	return wire.SSEEvent{}
}

// TestSSEPayloadText: an SSE message carries a UTF-8 payload as JSON text
// in "text" and any other payload as base64 in "payload" (exactly one of
// the two); ?payload=base64 gives every payload as base64, as brokers did
// before "text". History replayed for a resume point (since=0: from the
// first message) is marked "replayed"; live messages are not.
func TestSSEPayloadText(t *testing.T) {
	b := brokertest.Start(t, nil, nil)
	c := newClient(t, b, nil)
	first := c.mustPublish("sse/text", "21.5 °C\n\"ok\"")
	if st, _, body := c.publish("sse/bin", []byte{0xff, 0x00, 'a'}, ""); st != http.StatusNoContent {
		t.Fatalf("publish binary: %d %s", st, body)
	}
	type data struct {
		Seq      uint64  `json:"seq"`
		Text     *string `json:"text"`
		Payload  *string `json:"payload"`
		Replayed bool    `json:"replayed"`
	}
	parse := func(ev wire.SSEEvent) data {
		t.Helper()
		if ev.Event != "message" {
			t.Fatalf("event %q (%s), want a message", ev.Event, ev.Data)
		}
		var d data
		if err := json.Unmarshal([]byte(ev.Data), &d); err != nil {
			t.Fatalf("data %q: %v", ev.Data, err)
		}
		if (d.Text == nil) == (d.Payload == nil) {
			t.Fatalf("data %s: want exactly one of text and payload", ev.Data)
		}
		return d
	}
	str := func(p *string) string {
		if p == nil {
			return "<none>"
		}
		return *p
	}

	s := c.mustSubscribe("sse/#", "since=0", true)
	d := parse(s.nextEvent())
	if d.Seq != first || str(d.Text) != "21.5 °C\n\"ok\"" || !d.Replayed {
		t.Fatalf("first replayed event %+v (text %q), want seq %d, the text, replayed", d, str(d.Text), first)
	}
	d = parse(s.nextEvent())
	if str(d.Payload) != "/wBh" || !d.Replayed {
		t.Fatalf("binary event %+v (payload %q), want base64 /wBh, replayed", d, str(d.Payload))
	}
	c.mustPublish("sse/text", "live")
	if d = parse(s.nextEvent()); str(d.Text) != "live" || d.Replayed {
		t.Fatalf("live event %+v (text %q), want text live, not replayed", d, str(d.Text))
	}

	old := c.mustSubscribe("sse/text", "since=0&payload=base64", true)
	if d = parse(old.nextEvent()); str(d.Payload) != "MjEuNSDCsEMKIm9rIg==" || d.Seq != first {
		t.Fatalf("?payload=base64 event %+v (payload %q), want the text as base64", d, str(d.Payload))
	}
	if _, st, body := c.subscribe("sse/text", "payload=hex", true); st != http.StatusBadRequest {
		t.Fatalf("?payload=hex: status %d %s, want 400", st, body)
	}
}

// TestSinceZeroReplaysAll: since=0 (or Last-Event-ID: 0) replays from the
// first message the history holds, marked as replayed, on binary streams
// too; no resume point sends the retained message instead, not marked.
func TestSinceZeroReplaysAll(t *testing.T) {
	b := brokertest.Start(t, nil, nil)
	c := newClient(t, b, nil)
	var seqs []uint64
	for _, p := range []string{"a", "b", "c"} {
		seqs = append(seqs, c.mustPublish("zero/x", p, "retain=1"))
	}
	check := func(name string, s *sub) {
		t.Helper()
		for i, want := range seqs {
			f := s.mustNext()
			if f.Seq != want || !f.Replayed() || f.Retained() || string(f.Payload) != []string{"a", "b", "c"}[i] {
				t.Fatalf("%s: frame %d = %+v, want seq %d replayed", name, i, f, want)
			}
		}
	}
	check("since=0", c.mustSubscribe("zero/#", "since=0", false))
	s, st, body := c.subscribe("zero/#", "", false, "Last-Event-ID", "0")
	if st != http.StatusOK {
		t.Fatalf("Last-Event-ID 0: %d %s", st, body)
	}
	check("Last-Event-ID 0", s)
	s = c.mustSubscribe("zero/#", "", false)
	if f := s.mustNext(); f.Seq != seqs[2] || !f.Retained() || f.Replayed() {
		t.Fatalf("without since: %+v, want the retained message %d, not replayed", f, seqs[2])
	}
}
