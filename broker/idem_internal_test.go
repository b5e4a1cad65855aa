package broker

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestIdemWindowRepeatGetsFirstAnswer(t *testing.T) {
	var w idemWindow
	var published atomic.Int32
	pub := func() (uint64, error) { return uint64(published.Add(1)) + 100, nil }
	ctx := context.Background()
	s1, rep1, err := w.do(ctx, "dev", "m1", pub)
	if err != nil || rep1 || s1 != 101 {
		t.Fatalf("first: %d %v %v", s1, rep1, err)
	}
	s2, rep2, err := w.do(ctx, "dev", "m1", pub)
	if err != nil || !rep2 || s2 != s1 {
		t.Fatalf("repeat: %d %v %v, want %d", s2, rep2, err, s1)
	}
	// The same id of another identity is another message.
	s3, rep3, err := w.do(ctx, "other", "m1", pub)
	if err != nil || rep3 || s3 != 102 {
		t.Fatalf("other identity: %d %v %v", s3, rep3, err)
	}
	if published.Load() != 2 {
		t.Fatalf("published %d times, want 2", published.Load())
	}
}

func TestIdemWindowConcurrentRepeatsPublishOnce(t *testing.T) {
	var w idemWindow
	var published atomic.Int32
	release := make(chan struct{})
	pub := func() (uint64, error) {
		<-release
		return uint64(published.Add(1)), nil
	}
	var wg sync.WaitGroup
	seqs := make([]uint64, 8)
	for i := range seqs {
		wg.Go(func() {
			s, _, err := w.do(context.Background(), "dev", "same", pub)
			if err != nil {
				t.Error(err)
			}
			seqs[i] = s
		})
	}
	close(release)
	wg.Wait()
	for _, s := range seqs {
		if s != 1 {
			t.Fatalf("answers %v, want all 1", seqs)
		}
	}
	if published.Load() != 1 {
		t.Fatalf("published %d times", published.Load())
	}
}

func TestIdemWindowFailureNotRemembered(t *testing.T) {
	var w idemWindow
	boom := errors.New("boom")
	if _, _, err := w.do(context.Background(), "dev", "m", func() (uint64, error) { return 0, boom }); !errors.Is(err, boom) {
		t.Fatal(err)
	}
	s, rep, err := w.do(context.Background(), "dev", "m", func() (uint64, error) { return 7, nil })
	if err != nil || rep || s != 7 {
		t.Fatalf("retry after failure: %d %v %v", s, rep, err)
	}
}

func TestIdemWindowBounds(t *testing.T) {
	now := time.Unix(1000, 0)
	w := idemWindow{window: time.Minute, perIdent: 4, total: 10, now: func() time.Time { return now }}
	ctx := context.Background()
	n := 0
	pub := func() (uint64, error) { n++; return uint64(n), nil }
	for i := range 100 {
		if _, _, err := w.do(ctx, "a", strconv.Itoa(i), pub); err != nil {
			t.Fatal(err)
		}
	}
	if got := w.size(); got != 4 {
		t.Fatalf("per-identity bound: %d ids remembered, want 4", got)
	}
	// The newest are kept: id 99 is a repeat, id 0 is new again.
	if _, rep, _ := w.do(ctx, "a", "99", pub); !rep {
		t.Fatal("newest id forgotten")
	}
	for i := range 100 {
		if _, _, err := w.do(ctx, "id"+strconv.Itoa(i), "x", pub); err != nil {
			t.Fatal(err)
		}
	}
	if got := w.size(); got != 10 {
		t.Fatalf("total bound: %d ids remembered, want 10", got)
	}
	now = now.Add(2 * time.Minute)
	if _, rep, _ := w.do(ctx, "id99", "x", pub); rep {
		t.Fatal("id remembered past the window")
	}
	if got := w.size(); got != 1 {
		t.Fatalf("after the window: %d ids remembered, want 1", got)
	}
}

func TestValidMsgID(t *testing.T) {
	for _, tc := range []struct {
		id string
		ok bool
	}{
		{"a", true}, {"0123-abc_DEF.9", true}, {strings.Repeat("x", MaxMsgIDLen), true},
		{"", false}, {strings.Repeat("x", MaxMsgIDLen+1), false}, {"a b", false}, {"a/b", false}, {"é", false},
	} {
		t.Run(tc.id, func(t *testing.T) {
			if err := validMsgID(tc.id); (err == nil) != tc.ok {
				t.Fatalf("validMsgID(%q) = %v", tc.id, err)
			}
		})
	}
}

func TestEarlyPublishOK(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	ts := strconv.FormatInt(now.UnixNano(), 10)
	old := strconv.FormatInt(now.Add(-IdemWindow-time.Second).UnixNano(), 10)
	for _, tc := range []struct {
		name, method, path, id, time string
		ok                           bool
	}{
		{"publish with id", http.MethodPost, "/v1/topics/a", "m1", ts, true},
		{"no id", http.MethodPost, "/v1/topics/a", "", ts, false},
		{"bad id", http.MethodPost, "/v1/topics/a", "a b", ts, false},
		{"no time", http.MethodPost, "/v1/topics/a", "m1", "", false},
		{"stale time", http.MethodPost, "/v1/topics/a", "m1", old, false},
		{"publish stream", http.MethodPost, "/v1/publish", "m1", ts, false},
		{"delete", http.MethodDelete, "/v1/topics/a", "m1", ts, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(tc.method, tc.path, nil)
			if tc.id != "" {
				r.Header.Set(HeaderMsgID, tc.id)
			}
			if tc.time != "" {
				r.Header.Set(HeaderTime, tc.time)
			}
			if got := earlyPublishOK(r, now); got != tc.ok {
				t.Fatalf("earlyPublishOK = %v, want %v", got, tc.ok)
			}
		})
	}
}

// TestPublishMessageIDOnce publishes the same message id twice through the
// HTTP handler: the second answer carries the first's sequence number and the
// broker holds one message.
func TestPublishMessageIDOnce(t *testing.T) {
	b := newTestBroker(t, Options{})
	post := func(id, body string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodPost, "/v1/topics/a", strings.NewReader(body))
		r.RemoteAddr = "127.0.0.1:1234"
		if id != "" {
			r.Header.Set(HeaderMsgID, id)
		}
		b.serveHTTP(rec, r)
		return rec
	}
	r1 := post("m1", "x")
	r2 := post("m1", "x")
	if r1.Code != http.StatusNoContent || r2.Code != http.StatusNoContent {
		t.Fatalf("answers %d %q, %d %q", r1.Code, r1.Body, r2.Code, r2.Body)
	}
	if s1, s2 := r1.Header().Get(HeaderSeq), r2.Header().Get(HeaderSeq); s1 == "" || s1 != s2 {
		t.Fatalf("sequence numbers %q, %q: want the same", s1, s2)
	}
	if n := b.Stats().HistoryMessages; n != 1 {
		t.Fatalf("broker holds %d messages, want 1", n)
	}
	if r := post("m2", "x"); r.Code != http.StatusNoContent || r.Header().Get(HeaderSeq) == r1.Header().Get(HeaderSeq) {
		t.Fatalf("another id: %d seq %q", r.Code, r.Header().Get(HeaderSeq))
	}
	if r := post("bad id", "x"); r.Code != http.StatusBadRequest {
		t.Fatalf("bad id: %d %q", r.Code, r.Body)
	}
}

func TestHeaderPayload(t *testing.T) {
	for _, tc := range []struct {
		name, hdr, body, want string
		ok                    bool
	}{
		{"body only", "", "abc", "abc", true},
		{"header only", "aGVsbG8", "", "hello", true},
		{"both", "aGVsbG8", "x", "", false},
		{"bad base64", "!!", "", "", false},
		{"too large", strings.Repeat("A", 40), "", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPost, "/v1/topics/a", nil)
			if tc.hdr != "" {
				r.Header.Set(HeaderPayload, tc.hdr)
			}
			got, err := headerPayload(r, []byte(tc.body), 16)
			if (err == nil) != tc.ok || (tc.ok && string(got) != tc.want) {
				t.Fatalf("headerPayload = %q, %v", got, err)
			}
		})
	}
}
