package mqttquic

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/quic-go/http3"

	"github.com/quiot/quiot/broker/brokertest"
	"github.com/quiot/quiot/device/client"
	"github.com/quiot/quiot/internal/chromium"
	"github.com/quiot/quiot/internal/testenv"
	"github.com/quiot/quiot/internal/testutil"
	"github.com/quiot/quiot/internal/wire"
)

// mqttJSPage is docs/browser.md's MQTT.js page, made observable: the
// broker URL comes in the fragment, and what happens lands in window.
const mqttJSPage = `<!doctype html>
<script src="/mqtt.min.js"></script>
<pre id="log"></pre>
<script>
  const cfg = new URLSearchParams(location.hash.slice(1));
  window.got = []; window.subscribed = false; window.closed = 0;
  const c = mqtt.connect(cfg.get('broker'), {reconnectPeriod: 0});
  c.on('connect', () => c.subscribe('browser/#', {qos: 1}, () => {
    window.subscribed = true;
    c.publish('browser/from-page', 'hello from ' + location.origin, {qos: 1});
  }));
  c.on('message', (topic, payload) => {
    window.got.push(topic + '=' + payload);
    document.getElementById('log').textContent += topic + ' ' + payload + '\n';
  });
  c.on('close', () => { window.closed++; });
</script>`

// TestWebSocketBrowser: MQTT.js's browser bundle (dist/mqtt.min.js) in
// headless Chromium, on a page of a listed origin, over wss:// on the
// broker's port and on --mqtt-wss: it receives a message published over
// HTTP/3, and its own publish reaches an HTTP/3 subscriber (quiot's client,
// binary frames) and an HTTP/3 EventSource subscriber (Server-Sent Events,
// the UTF-8 payload as "text"). The same page from an unlisted origin gets
// no connection.
func TestWebSocketBrowser(t *testing.T) {
	npm := mqttJSDir(t)
	bundle, err := os.ReadFile(filepath.Join(npm, "node_modules", "mqtt", "dist", "mqtt.min.js"))
	if err != nil {
		testenv.Unavailable(t, "MQTT.js's browser bundle: %v", err)
	}
	serve := func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/mqtt.min.js" {
			w.Header().Set("Content-Type", "text/javascript")
			_, _ = w.Write(bundle)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write([]byte(mqttJSPage))
	}
	listed := httptest.NewServer(http.HandlerFunc(serve))
	t.Cleanup(listed.Close)
	other := httptest.NewServer(http.HandlerFunc(serve))
	t.Cleanup(other.Close)

	// No client CAs: a server that asks for a client certificate makes
	// headless Chromium cancel the WebSocket handshake (it cannot ask
	// the user which certificate to send).
	p := newPKI(t)
	h3 := brokertest.Start(t, p, nil)
	s := startServer(t, p, func(o *Options) {
		o.Broker = h3.Broker
		o.QUICAddr = "off"
		o.ClientCAs = nil
		o.WSSAddr = "127.0.0.1:0"
		o.WSOnBroker = true
		o.CORSOrigins = []string{listed.URL}
	})
	b := &wsBroker{bridged: &bridged{pki: p, h3: h3, mqtt: s}, npm: npm}
	leaf, err := x509.ParseCertificate(b.pki.Server.TLS.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	br := chromium.Start(t, chromium.Options{TrustCert: leaf})
	pub := newClient(t, b.pki, b.h3URL(), nil)
	h3Sub := newClient(t, b.pki, b.h3URL(), nil)
	fromPage := subscribe(t, h3Sub, "browser/from-page")
	waitSubscribed(t, pub, fromPage, "browser/from-page")
	// Subscribed once the response header is in: the broker registers a
	// subscriber before it answers.
	sse := subscribeSSE(t, b.pki, b.h3URL(), "browser/from-page")

	for _, u := range []struct{ name, url string }{{"broker", b.brokerURL()}, {"wss", b.wssURL()}} {
		t.Run(u.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), rawTimeout) // a hang, not a timing
			defer cancel()
			p, err := br.NewPage(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := p.Navigate(ctx, listed.URL+"/#broker="+url.QueryEscape(u.url)); err != nil {
				t.Fatal(err)
			}
			var subscribed bool
			if err := p.WaitFor(ctx, "window.subscribed || window.closed > 0", "window.subscribed", &subscribed); err != nil || !subscribed {
				t.Fatalf("page not subscribed: %v; console: %q", err, p.Errors())
			}
			if m := recv(t, fromPage, "the page's publish over HTTP/3"); string(m.Payload) != "hello from "+listed.URL {
				t.Fatalf("HTTP/3 subscriber got %q", m.Payload)
			}
			if ev := recvSSE(t, sse, "the page's publish as an HTTP/3 Server-Sent Event"); ev.Topic != "browser/from-page" || ev.Text == nil || *ev.Text != "hello from "+listed.URL {
				t.Fatalf("HTTP/3 EventSource subscriber got %s, want topic browser/from-page, text %q", ev.raw, "hello from "+listed.URL)
			}
			if _, err := pub.Publish(context.Background(), "browser/h3", []byte("from h3 "+u.name), client.PublishOptions{QoS: 1}); err != nil {
				t.Fatal(err)
			}
			var got []string
			if err := p.WaitFor(ctx, "window.got.includes('browser/h3=from h3 "+u.name+"')", "window.got", &got); err != nil {
				t.Fatal(err)
			}
			if errs := p.Errors(); len(errs) > 0 {
				t.Fatalf("console errors: %q", errs)
			}
		})
	}
	t.Run("unlisted origin", func(t *testing.T) {
		var subscribedOf bool
		ctx, cancel := context.WithTimeout(context.Background(), rawTimeout)
		defer cancel()
		p, err := br.NewPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Navigate(ctx, other.URL+"/#broker="+url.QueryEscape(b.brokerURL())); err != nil {
			t.Fatal(err)
		}
		// The browser's own WebSocket shows the refusal (MQTT.js in a
		// browser reports a failed handshake by no event at all).
		var got string
		js := `new Promise((resolve) => {
			const ws = new WebSocket(` + strconv.Quote(b.brokerURL()) + `, 'mqtt');
			ws.onopen = () => resolve('open');
			ws.onclose = (e) => resolve('closed ' + e.code);
		})`
		if err := p.Eval(ctx, js, &got); err != nil {
			t.Fatal(err)
		}
		if got != "closed 1006" || !strings.Contains(strings.Join(p.Errors(), "\n"), "Unexpected response code: 403") {
			t.Fatalf("WebSocket from an unlisted origin: %s; console: %q; want closed 1006 after a 403", got, p.Errors())
		}
		if err := p.Eval(ctx, "window.subscribed", &subscribedOf); err != nil || subscribedOf {
			t.Fatalf("the page's MQTT.js subscribed (%v)", err)
		}
	})
}

// sseMessage is the data of an SSE "message" event (docs/pubsub.md).
type sseMessage struct {
	Topic   string  `json:"topic"`
	Text    *string `json:"text"`
	Payload *string `json:"payload"`
	raw     string  // the event's data as sent
}

// subscribeSSE subscribes to topic on the HTTP/3 broker at base as an
// EventSource does (GET of the topic's path, Accept: text/event-stream)
// with an HTTP/3 client trusting p, and returns its events as they are
// read; it ends the subscription at the end of the test.
func subscribeSSE(t *testing.T, p *testPKI, base, topic string) <-chan wire.SSEEvent {
	t.Helper()
	bu, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	c := testutil.H3Client(p.Pool(), nil)
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, wire.TopicURL(bu, topic, nil).String(), nil)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	req.Header.Set("Accept", wire.ContentTypeSSE)
	resp, err := c.Do(req)
	if err != nil {
		cancel()
		t.Fatalf("SSE subscription to %s: %v", topic, err)
	}
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || ct != wire.ContentTypeSSE {
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		cancel()
		t.Fatalf("SSE subscription to %s: %d %s %q", topic, resp.StatusCode, ct, body)
	}
	events := make(chan wire.SSEEvent, 16)
	go func() {
		r := wire.NewSSEReader(resp.Body)
		for {
			ev, err := r.Next()
			if err != nil {
				close(events)
				return
			}
			events <- ev
		}
	}()
	t.Cleanup(func() {
		cancel()
		_ = resp.Body.Close()
		for range events { // unblocks the reader until it ends
		}
		_ = c.Transport.(*http3.Transport).Close()
	})
	return events
}

// recvSSE waits for the next "message" event of events (rawTimeout at
// most: a hang, not a timing) and returns its data.
func recvSSE(t *testing.T, events <-chan wire.SSEEvent, what string) sseMessage {
	t.Helper()
	select {
	case ev, ok := <-events:
		if !ok {
			t.Fatalf("no %s: the event stream ended", what)
		}
		if ev.Event != "message" {
			t.Fatalf("waiting for %s: event %q (%s)", what, ev.Event, ev.Data)
		}
		m := sseMessage{raw: ev.Data}
		if err := json.Unmarshal([]byte(ev.Data), &m); err != nil {
			t.Fatalf("%s: data %q: %v", what, ev.Data, err)
		}
		return m
	case <-time.After(rawTimeout):
		t.Fatalf("no %s within %v", what, rawTimeout)
	}
	return sseMessage{}
}
