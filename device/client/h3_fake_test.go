package client

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/quiot/quiot/internal/certs"
	"github.com/quiot/quiot/internal/wire"
)

// fakeBroker is a real HTTP/3 server with a scripted handler, for the
// client behaviour a real broker does not expose: which requests carried
// credentials, and how often a request was retried.
type fakeBroker struct {
	url string

	mu       sync.Mutex
	requests []fakeRequest
}

type fakeRequest struct {
	conn   *quic.Conn
	method string
	path   string
	auth   string
}

type connKey struct{}

func startFakeBroker(t *testing.T, h func(w http.ResponseWriter, r *http.Request)) *fakeBroker {
	t.Helper()
	cert, err := certs.SelfSigned(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	pc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	fb := &fakeBroker{url: "https://" + pc.LocalAddr().String()}
	srv := &http3.Server{
		TLSConfig: http3.ConfigureTLSConfig(&tls.Config{Certificates: []tls.Certificate{cert.TLS}}),
		ConnContext: func(ctx context.Context, c *quic.Conn) context.Context {
			return context.WithValue(ctx, connKey{}, c)
		},
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			qc, _ := r.Context().Value(connKey{}).(*quic.Conn)
			fb.mu.Lock()
			fb.requests = append(fb.requests, fakeRequest{conn: qc, method: r.Method, path: r.URL.EscapedPath(), auth: r.Header.Get("Authorization")})
			fb.mu.Unlock()
			h(w, r)
		}),
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(pc) }()
	t.Cleanup(func() {
		_ = srv.Close()
		_ = pc.Close()
		<-done
	})
	return fb
}

func (fb *fakeBroker) snapshot() []fakeRequest {
	fb.mu.Lock()
	defer fb.mu.Unlock()
	return append([]fakeRequest(nil), fb.requests...)
}

func newFakeClient(t *testing.T, fb *fakeBroker, mod func(*Options)) Client {
	t.Helper()
	o := Options{Broker: fb.url, Insecure: true, Logger: slog.New(slog.DiscardHandler), Reconnect: true, MaxBackoff: 200 * time.Millisecond}
	if mod != nil {
		mod(&o)
	}
	c, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func okPublish(w http.ResponseWriter, r *http.Request) {
	w.Header().Set(wire.HeaderSeq, "1")
	w.WriteHeader(http.StatusNoContent)
}

func TestH3TokenOncePerConnection(t *testing.T) {
	fb := startFakeBroker(t, okPublish)
	c := newFakeClient(t, fb, func(o *Options) { o.Token = "s3cret" })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Concurrent first publishes: exactly one carries the token and the
	// others wait for its answer.
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			if _, err := c.Publish(ctx, "a/b", []byte("x"), PublishOptions{QoS: 1}); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("publish: %v", err)
	}
	reqs := fb.snapshot()
	if len(reqs) != 8 {
		t.Fatalf("broker saw %d requests, want 8", len(reqs))
	}
	if reqs[0].auth != "Bearer s3cret" {
		t.Fatalf("first request's Authorization = %q, want the bearer token", reqs[0].auth)
	}
	for i, r := range reqs[1:] {
		if r.auth != "" {
			t.Fatalf("request %d carried Authorization %q again", i+1, r.auth)
		}
		if r.conn != reqs[0].conn {
			t.Fatalf("request %d on another connection", i+1)
		}
	}
	if s := c.Stats(); s.Handshake <= 0 || s.Reconnects != 0 {
		t.Fatalf("Stats = %+v, want a handshake time and no reconnects", s)
	}
}

func TestH3BasicAuthWithUsername(t *testing.T) {
	fb := startFakeBroker(t, okPublish)
	c := newFakeClient(t, fb, func(o *Options) { o.Token = "pw"; o.Username = "dev1" })
	if _, err := c.Publish(context.Background(), "a", nil, PublishOptions{QoS: 1}); err != nil {
		t.Fatal(err)
	}
	if got := fb.snapshot()[0].auth; got != "Basic ZGV2MTpwdw==" {
		t.Fatalf("Authorization = %q, want Basic dev1:pw", got)
	}
}

func TestH3FinalErrorsNotRetried(t *testing.T) {
	codes := []int{http.StatusBadRequest, http.StatusUnauthorized, http.StatusForbidden, http.StatusRequestEntityTooLarge}
	for _, code := range codes {
		t.Run(http.StatusText(code), func(t *testing.T) {
			fb := startFakeBroker(t, func(w http.ResponseWriter, r *http.Request) {
				http.Error(w, "reason for "+http.StatusText(code), code)
			})
			c := newFakeClient(t, fb, nil)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err := c.Publish(ctx, "a", []byte("x"), PublishOptions{QoS: 1})
			var se *StatusError
			if !errors.As(err, &se) || se.Code != code {
				t.Fatalf("publish error = %v, want a StatusError %d", err, code)
			}
			if !strings.Contains(err.Error(), "reason for") {
				t.Fatalf("error %q lacks the broker's reason", err)
			}
			serr := c.Subscribe(ctx, "a/#", 0, func(Message) { t.Error("message delivered") })
			if !errors.As(serr, &se) || se.Code != code {
				t.Fatalf("subscribe error = %v, want a StatusError %d", serr, code)
			}
			if n := len(fb.snapshot()); n != 2 {
				t.Fatalf("broker saw %d requests, want 2 (no retries)", n)
			}
		})
	}
}

func TestH3RetriesUnavailable(t *testing.T) {
	var n atomic.Int32
	fb := startFakeBroker(t, func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) <= 2 {
			http.Error(w, "shutting down", http.StatusServiceUnavailable)
			return
		}
		okPublish(w, r)
	})
	c := newFakeClient(t, fb, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ack, err := c.Publish(ctx, "a", []byte("x"), PublishOptions{QoS: 1})
	if err != nil {
		t.Fatalf("publish: %v", err)
	}
	if ack.Seq != 1 || n.Load() != 3 {
		t.Fatalf("ack %+v after %d requests, want seq 1 after 3", ack, n.Load())
	}
}

func TestH3NoReconnectReturnsUnavailable(t *testing.T) {
	fb := startFakeBroker(t, func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "shutting down", http.StatusServiceUnavailable)
	})
	c := newFakeClient(t, fb, func(o *Options) { o.Reconnect = false })
	_, err := c.Publish(context.Background(), "a", []byte("x"), PublishOptions{QoS: 1})
	var se *StatusError
	if !errors.As(err, &se) || se.Code != http.StatusServiceUnavailable {
		t.Fatalf("publish error = %v, want 503", err)
	}
}

func TestH3PublishRequestShape(t *testing.T) {
	got := make(chan *http.Request, 1)
	fb := startFakeBroker(t, func(w http.ResponseWriter, r *http.Request) {
		got <- r.Clone(context.Background())
		okPublish(w, r)
	})
	c := newFakeClient(t, fb, nil)
	sent := time.Unix(1700000000, 42)
	if _, err := c.Publish(context.Background(), "s/#x", []byte("p"), PublishOptions{QoS: 0, Retain: true, Sent: sent}); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.Method != http.MethodPost || r.URL.EscapedPath() != "/v1/topics/s/%23x" {
		t.Fatalf("request %s %s", r.Method, r.URL.EscapedPath())
	}
	// The payload is one DATA frame ended by the FIN: no content-length.
	if _, ok := r.Header["Content-Length"]; ok || r.ContentLength != -1 {
		t.Fatalf("content-length %q (ContentLength %d), want none", r.Header.Get("Content-Length"), r.ContentLength)
	}
	if q := r.URL.Query(); q.Get("qos") != "0" || q.Get("retain") != "1" {
		t.Fatalf("query %q", r.URL.RawQuery)
	}
	if r.Header.Get(wire.HeaderTime) != "1700000000000000042" {
		t.Fatalf("%s = %q", wire.HeaderTime, r.Header.Get(wire.HeaderTime))
	}
}

func TestH3ClosedClient(t *testing.T) {
	fb := startFakeBroker(t, okPublish)
	c := newFakeClient(t, fb, nil)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Publish(context.Background(), "a", nil, PublishOptions{}); !errors.Is(err, ErrClosed) {
		t.Fatalf("publish after Close = %v, want ErrClosed", err)
	}
}

func TestH3TokenResentAfterRejection(t *testing.T) {
	fb := startFakeBroker(t, func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, "bad") {
			http.Error(w, "bad topic", http.StatusBadRequest)
			return
		}
		okPublish(w, r)
	})
	c := newFakeClient(t, fb, func(o *Options) { o.Token = "tok" })
	ctx := context.Background()
	if _, err := c.Publish(ctx, "bad", nil, PublishOptions{QoS: 1}); err == nil {
		t.Fatal("publish to the bad topic succeeded")
	}
	for range 2 {
		if _, err := c.Publish(ctx, "good", nil, PublishOptions{QoS: 1}); err != nil {
			t.Fatal(err)
		}
	}
	var auths []string
	for _, r := range fb.snapshot() {
		auths = append(auths, r.auth)
	}
	// A broker may reject before it reads credentials: the token goes
	// again until a request succeeds, then never again.
	if want := []string{"Bearer tok", "Bearer tok", ""}; strings.Join(auths, "|") != strings.Join(want, "|") {
		t.Fatalf("Authorization headers %q, want %q", auths, want)
	}
}

// TestH3ResumeCarriesEpoch: a resubscription sends the resume point with
// the epoch of the broker run it came from, and asks for heartbeats; after
// a restart gap it resumes in the new run's epoch.
func TestH3ResumeCarriesEpoch(t *testing.T) {
	type got struct{ query, heartbeat string }
	reqs := make(chan got, 8)
	var n atomic.Int32
	frames := func(fs ...wire.Frame) []byte {
		var b []byte
		for i := range fs {
			b = wire.AppendFrame(b, &fs[i])
		}
		return b
	}
	fb := startFakeBroker(t, func(w http.ResponseWriter, r *http.Request) {
		reqs <- got{r.URL.RawQuery, r.Header.Get(wire.HeaderHeartbeat)}
		switch n.Add(1) {
		case 1: // first run: one message, then the stream ends
			w.Header().Set(wire.HeaderEpoch, "00000000000000aa")
			_, _ = w.Write(frames(wire.Frame{Seq: 5, Topic: "a/x", Payload: []byte("one")}))
		case 2: // restarted run: the restart gap, then its history
			w.Header().Set(wire.HeaderEpoch, "00000000000000bb")
			_, _ = w.Write(frames(wire.GapFrame(wire.Gap{From: 6}), wire.HeartbeatFrame(), wire.Frame{Seq: 1, Topic: "a/x", Payload: []byte("two")}))
		default:
			w.Header().Set(wire.HeaderEpoch, "00000000000000bb")
			w.WriteHeader(http.StatusOK)
			<-r.Context().Done()
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := newFakeClient(t, fb, nil)
	var mu sync.Mutex
	var msgs []Message
	done := make(chan error, 1)
	go func() {
		done <- c.Subscribe(ctx, "a/#", 0, func(m Message) {
			mu.Lock()
			msgs = append(msgs, m)
			mu.Unlock()
		})
	}()
	want := []got{{"", "1"}, {"epoch=00000000000000aa&since=5", "1"}, {"epoch=00000000000000bb&since=1", "1"}}
	for i, w := range want {
		select {
		case g := <-reqs:
			if g != w {
				t.Fatalf("subscription %d: query %q heartbeat %q, want %q %q", i+1, g.query, g.heartbeat, w.query, w.heartbeat)
			}
		case <-ctx.Done():
			t.Fatalf("subscription %d not made", i+1)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Subscribe = %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(msgs) != 3 || string(msgs[0].Payload) != "one" || !msgs[1].Gap || string(msgs[2].Payload) != "two" {
		t.Fatalf("delivered %+v: want one, the restart gap, two (no heartbeat)", msgs)
	}
}

func TestH3TokenEveryRequest(t *testing.T) {
	tests := []struct {
		name     string
		every    bool
		wantAuth int // requests carrying the header, of 5
	}{
		{"once per connection (default)", false, 1},
		{"every request", true, 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fb := startFakeBroker(t, okPublish)
			c := newFakeClient(t, fb, func(o *Options) { o.Token = "s3cret"; o.AuthEveryRequest = tt.every })
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			for i := range 5 {
				if _, err := c.Publish(ctx, "a/b", []byte("x"), PublishOptions{QoS: 1}); err != nil {
					t.Fatalf("publish %d: %v", i, err)
				}
			}
			reqs := fb.snapshot()
			if len(reqs) != 5 {
				t.Fatalf("broker saw %d requests, want 5", len(reqs))
			}
			n := 0
			for i, r := range reqs {
				if r.conn != reqs[0].conn {
					t.Fatalf("request %d on another connection", i)
				}
				switch r.auth {
				case "Bearer s3cret":
					n++
				case "":
				default:
					t.Fatalf("request %d: Authorization %q", i, r.auth)
				}
			}
			if n != tt.wantAuth || reqs[0].auth == "" {
				t.Fatalf("%d of 5 requests carried the token (first: %q), want %d", n, reqs[0].auth, tt.wantAuth)
			}
		})
	}
}
