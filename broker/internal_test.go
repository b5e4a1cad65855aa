package broker

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/quiot/quiot/internal/certs"
	"github.com/quiot/quiot/internal/quictune"
)

func newTestBroker(t *testing.T, o Options) *Broker {
	t.Helper()
	c, err := certs.SelfSigned(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	o.Certificates = []tls.Certificate{c.TLS}
	o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	b, err := New(&o)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestNewRequestsDuringShutdownGet503(t *testing.T) {
	b := newTestBroker(t, Options{})
	b.space.Shutdown()
	for _, target := range []string{"/v1/topics/a", "/v1/publish", "/healthz"} {
		rec := httptest.NewRecorder()
		b.serveHTTP(rec, httptest.NewRequest(http.MethodPost, target, strings.NewReader("x")))
		if rec.Code != http.StatusServiceUnavailable || !strings.HasSuffix(rec.Body.String(), "\n") || strings.Count(rec.Body.String(), "\n") != 1 {
			t.Fatalf("%s: %d %q", target, rec.Code, rec.Body.String())
		}
	}
}

func TestNewWithoutCertificate(t *testing.T) {
	if _, err := New(nil); err == nil {
		t.Fatal("New without a certificate succeeded")
	}
	if _, err := New(&Options{CertFile: "/nonexistent.pem", KeyFile: "/nonexistent-key.pem"}); err == nil {
		t.Fatal("New with missing files succeeded")
	}
}

func TestHistoryBounds(t *testing.T) {
	per := int64(10 + 1 + entryOverhead)                                                             // payload, topic "a", overhead
	b := newTestBroker(t, Options{Limits: Limits{HistoryPerTopic: 3, HistoryBytes: 10 * (per + 3)}}) // ten "t/xx" messages
	ctx := context.Background()
	for i := 0; i < 10; i++ {
		if _, err := b.Publish(ctx, Message{Topic: "a", Payload: []byte("0123456789")}); err != nil {
			t.Fatal(err)
		}
	}
	st := b.Stats()
	if st.HistoryMessages != 3 || st.HistoryBytes != 3*per {
		t.Fatalf("per-topic bound: %+v", st)
	}
	// Many topics: the global byte bound evicts the oldest first.
	for i := 0; i < 50; i++ {
		if _, err := b.Publish(ctx, Message{Topic: "t/" + string(rune('a'+i%26)) + string(rune('a'+i/26)), Payload: []byte("0123456789")}); err != nil {
			t.Fatal(err)
		}
	}
	st = b.Stats()
	if st.HistoryBytes > 10*(per+3) || st.HistoryMessages != 10 {
		t.Fatalf("global bound: %+v", st)
	}
	if st.Topics > 10 {
		t.Fatalf("emptied topics kept: %d", st.Topics)
	}
	// A resume from before the forgotten topics is told about the gap.
	since := uint64(1)
	s, initial, err := b.space.Subscribe("#", &since, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(initial) == 0 || !initial[0].IsGap() {
		t.Fatalf("no gap first: %+v", initial)
	}
	b.space.Unsubscribe(s)
	if b.Stats().Subscriptions != 0 {
		t.Fatal("subscription not removed")
	}
}

func TestRetainedBound(t *testing.T) {
	per := int64(10 + 3 + entryOverhead) // payload, topic "r/x", overhead
	b := newTestBroker(t, Options{Limits: Limits{RetainedBytes: 2 * per}})
	ctx := context.Background()
	pub := func(topic, payload string) error {
		_, err := b.Publish(ctx, Message{Topic: topic, Payload: []byte(payload), Retain: true})
		return err
	}
	for _, tp := range []string{"r/a", "r/b", "r/a"} { // replacing does not add up
		if err := pub(tp, "0123456789"); err != nil {
			t.Fatal(err)
		}
	}
	if err := pub("r/c", "0123456789"); !errors.Is(err, ErrRetainedFull) || errStatus(err) != http.StatusInsufficientStorage {
		t.Fatalf("third retained topic: %v", err)
	}
	if err := pub("r/a", ""); err != nil {
		t.Fatalf("clearing: %v", err)
	}
	if err := pub("r/c", "0123456789"); err != nil {
		t.Fatalf("after clearing: %v", err)
	}
	if st := b.Stats(); st.Retained != 2 || st.RetainedBytes != 2*per {
		t.Fatalf("stats %+v", st)
	}
}

func TestHeartbeatDefault(t *testing.T) {
	tests := []struct {
		name string
		o    Options
		want time.Duration
	}{
		{"default", Options{}, 15 * time.Second},
		{"lean tuning (90 s idle)", Options{Tuning: quictune.Lean()}, 15 * time.Second},
		{"short idle timeout", Options{Tuning: &quictune.Profile{MaxIdleTimeout: quictune.Duration(10 * time.Second)}}, 5 * time.Second},
		{"set", Options{Heartbeat: time.Second}, time.Second},
		{"disabled", Options{Heartbeat: -1}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.o.ensureDefaults().Heartbeat; got != tt.want {
				t.Fatalf("Heartbeat = %v, want %v", got, tt.want)
			}
		})
	}
}
