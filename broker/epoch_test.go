package broker_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/quiot/quiot/broker/brokertest"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/internal/testutil"
	"github.com/quiot/quiot/internal/wire"
)

// Epochs: a resume point carries the broker run it came from, so a restart
// is announced even when the new run has numbered more messages than the
// resume point.

// expectRestart reads the restart gap for a resume point since.
func (s *sub) expectRestart(since uint64) {
	s.t.Helper()
	f := s.mustNext()
	g, err := f.Gap()
	if err != nil || !g.Restarted() || g.From != since+1 {
		s.t.Fatalf("frame %+v (%v): want the restart gap from %d", f, err, since+1)
	}
}

func TestEpochHeader(t *testing.T) {
	b := brokertest.Start(t, nil, nil)
	b2 := brokertest.Start(t, b.PKI, nil)
	if b.Epoch() == 0 || b.Epoch() == b2.Epoch() {
		t.Fatalf("epochs %x and %x: want two different non-zero epochs", b.Epoch(), b2.Epoch())
	}
	c := newClient(t, b, nil)
	for _, sse := range []bool{false, true} {
		s := c.mustSubscribe("e/#", "", sse)
		if got := s.resp.Header.Get(broker.HeaderEpoch); got != wire.FormatEpoch(b.Epoch()) {
			t.Fatalf("sse=%v: %s %q, want %q", sse, broker.HeaderEpoch, got, wire.FormatEpoch(b.Epoch()))
		}
	}
}

func TestResumeWithEpoch(t *testing.T) {
	b := brokertest.Start(t, nil, nil)
	c := newClient(t, b, nil)
	var seqs []uint64
	for i := range 6 {
		seqs = append(seqs, c.mustPublish("ep/a", fmt.Sprint(i)))
	}
	own := wire.FormatEpoch(b.Epoch())
	other := wire.FormatEpoch(b.Epoch() ^ 1)
	since := seqs[2] // below the broker's last sequence number: only the epoch tells
	tests := []struct {
		name    string
		query   string
		hdr     []string
		sse     bool
		restart bool
	}{
		{"own epoch", fmt.Sprintf("since=%d&epoch=%s", since, own), nil, false, false},
		{"own epoch in since", fmt.Sprintf("since=%s-%d", own, since), nil, false, false},
		{"other epoch", fmt.Sprintf("since=%d&epoch=%s", since, other), nil, false, true},
		{"other epoch in since", fmt.Sprintf("since=%s-%d", other, since), nil, true, true},
		{"no epoch", fmt.Sprintf("since=%d", since), nil, false, false},
		{"last-event-id own", "", []string{"Last-Event-ID", fmt.Sprintf("%s-%d", own, since)}, true, false},
		{"last-event-id other", "", []string{"Last-Event-ID", fmt.Sprintf("%s-%d", other, since)}, true, true},
		{"last-event-id plain", "", []string{"Last-Event-ID", fmt.Sprint(since)}, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, st, body := c.subscribe("ep/#", tt.query, tt.sse, tt.hdr...)
			if st != http.StatusOK {
				t.Fatalf("status %d: %s", st, body)
			}
			first := 3
			if tt.restart {
				s.expectRestart(since)
				first = 0 // all the history of this run
			}
			for i := first; i < 6; i++ {
				s.expect("ep/a", fmt.Sprint(i))
			}
			c.mustPublish("ep/a", "live")
			s.expect("ep/a", "live")
			s.close()
		})
	}
}

// TestResumeAcrossRestart restarts the broker on the same port; the new run
// numbers more messages than the subscriber's resume point before the
// subscriber comes back. With the epoch nothing of the new history is lost
// and the restart is announced; without it (an old client) the broker
// cannot tell, as before.
func TestResumeAcrossRestart(t *testing.T) {
	pki := testutil.NewPKI(t)
	b1 := brokertest.Start(t, pki, nil)
	addr := b1.Addr().String()
	c1 := newClient(t, b1, nil)
	s := c1.mustSubscribe("rr/#", "", false)
	sseSub := c1.mustSubscribe("rr/#", "", true)
	c1.mustPublish("rr/a", "old-0")
	c1.mustPublish("rr/a", "old-1")
	last := s.expect("rr/a", "old-0", "rr/a", "old-1")[1].Seq
	sseSub.expect("rr/a", "old-0", "rr/a", "old-1")
	epoch1 := s.epoch
	s.close()
	sseSub.close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b1.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}

	b2 := brokertest.Start(t, pki, &broker.Options{Listen: addr})
	c2 := newClient(t, b2, nil)
	const n = 5
	for i := range n {
		if seq := c2.mustPublish("rr/a", fmt.Sprintf("new-%d", i)); i == n-1 && seq <= last {
			t.Fatalf("new run's last seq %d not above the resume point %d: the test proves nothing", seq, last)
		}
	}
	all := func(s *sub) {
		t.Helper()
		for i := range n {
			s.expect("rr/a", fmt.Sprintf("new-%d", i))
		}
	}
	t.Run("since and epoch", func(t *testing.T) {
		s := c2.mustSubscribe("rr/#", fmt.Sprintf("since=%d&epoch=%s", last, wire.FormatEpoch(epoch1)), false)
		s.expectRestart(last)
		all(s)
	})
	t.Run("last-event-id", func(t *testing.T) {
		// What an EventSource resends: the id of the last event it saw.
		id := string(wire.AppendEventID(nil, epoch1, last))
		s, st, body := c2.subscribe("rr/#", "", true, "Last-Event-ID", id)
		if st != http.StatusOK {
			t.Fatalf("status %d: %s", st, body)
		}
		s.expectRestart(last)
		all(s)
	})
	t.Run("old client without epoch", func(t *testing.T) {
		s := c2.mustSubscribe("rr/#", fmt.Sprintf("since=%d", last), false)
		for i := int(last); i < n; i++ { // the known limit without an epoch
			s.expect("rr/a", fmt.Sprintf("new-%d", i))
		}
	})
}

func TestHeartbeat(t *testing.T) {
	b := brokertest.Start(t, nil, &broker.Options{Heartbeat: 20 * time.Millisecond})
	c := newClient(t, b, nil)
	asked, st, body := c.subscribe("hb/#", "", false, broker.HeaderHeartbeat, "1")
	if st != http.StatusOK {
		t.Fatalf("status %d: %s", st, body)
	}
	if got := asked.resp.Header.Get(broker.HeaderHeartbeat); got != "20" {
		t.Fatalf("%s answer %q, want the interval in ms (20)", broker.HeaderHeartbeat, got)
	}
	plain := c.mustSubscribe("hb/#", "", false)
	if got := plain.resp.Header.Get(broker.HeaderHeartbeat); got != "" {
		t.Fatalf("%s answer %q to a request that did not ask", broker.HeaderHeartbeat, got)
	}
	// Raw SSE: heartbeats are comment lines.
	req, _ := http.NewRequest(http.MethodGet, b.URL+"/v1/topics/hb/%23", nil)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := c.c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()

	// Heartbeat frames arrive on the stream that asked for them...
	beats := 0
	for beats < 3 {
		raw, err := asked.dec.Next()
		if err != nil {
			t.Fatalf("reading heartbeats: %v", err)
		}
		f, err := wire.ParseFrame(raw)
		if err != nil || !f.IsHeartbeat() || f.Seq != 0 || f.Topic != "" || len(f.Payload) != 0 {
			t.Fatalf("frame %+v (%v), want a bare heartbeat", f, err)
		}
		beats++
	}
	br := bufio.NewReader(resp.Body)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("reading sse: %v", err)
		}
		if strings.HasPrefix(line, ": keep-alive") {
			break
		}
	}
	// ...and Decoder.Frame skips them: the next frame is the message. The
	// stream that did not ask, silent for several intervals by now, has no
	// heartbeat before the message.
	c.mustPublish("hb/x", "after the beats")
	asked.expect("hb/x", "after the beats")
	raw, err := plain.dec.Next()
	if err != nil {
		t.Fatal(err)
	}
	if f, err := wire.ParseFrame(raw); err != nil || f.IsHeartbeat() || string(f.Payload) != "after the beats" {
		t.Fatalf("first frame of the plain stream %+v (%v), want the message", f, err)
	}
}
