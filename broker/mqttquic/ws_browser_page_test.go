package mqttquic

import (
	"context"
	"crypto/x509"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/auth"
	"github.com/quiot/quiot/broker/brokertest"
	"github.com/quiot/quiot/broker/web"
	"github.com/quiot/quiot/device/client"
	"github.com/quiot/quiot/internal/chromium"
	"github.com/quiot/quiot/internal/testenv"
)

// pageScript runs in the page the broker served: it logs in as a browser
// does (POST /v1/session sets the session cookie) if asked, then MQTT.js
// connects to wss://HOST/mqtt of the page's own origin with no
// credentials (the cookie, or the Basic credentials the browser holds,
// authenticate the upgrade) and subscribes. Its timers are native: its
// default timer worker comes from a blob: URL, which the dashboard's
// Content-Security-Policy refuses.
const pageScript = `(async (login) => {
  if (login) {
    const r = await fetch(location.origin + '/v1/session', {method: 'POST', headers: {Authorization: 'Basic ' + btoa('alice:pw-alice')}});
    if (!r.ok) { window.failed = 'login ' + r.status; return; }
  }
  window.got = []; window.subscribed = false; window.closed = 0;
  const c = mqtt.connect('wss://' + location.host + '/mqtt', {reconnectPeriod: 0, protocolVersion: 5, timerVariant: 'native'});
  c.on('connect', () => c.subscribe('browser/#', {qos: 1}, (err, granted) => {
    window.granted = granted.map((g) => g.qos);
    window.subscribed = true;
  }));
  c.on('message', (topic, payload) => window.got.push(topic + '=' + payload));
  c.on('error', (e) => { window.failed = String(e); });
  c.on('close', () => { window.closed++; });
  return true;
})`

// pageACL: alice logs in from the page and publishes with mosquitto_pub
// (she may subscribe to "#", the dashboard's live view); pub is the HTTP/3
// publisher's token user. No anonymous access.
const pageACL = `
[[user]]
name      = "alice"
password  = "pw-alice"
publish   = ["browser/#"]
subscribe = ["#"]

[[user]]
name      = "pub"
publish   = ["browser/#"]
`

// TestWebSocketBrowserOnBrokerPage: pages the broker serves itself (it
// serves no arbitrary pages, so MQTT.js's browser bundle is loaded into
// them through the DevTools protocol): https://HOST/healthz, which logs in
// with POST /v1/session, and the dashboard, its Basic prompt answered.
// MQTT.js connects over wss://HOST/mqtt with no MQTT credentials on a
// broker with an ACL, authenticated by the session cookie or the Basic
// credentials the browser holds; it receives a message mosquitto_pub
// published over MQTT/TCP and one quiot's client published over HTTP/3.
func TestWebSocketBrowserOnBrokerPage(t *testing.T) {
	npm := mqttJSDir(t)
	mosq := testenv.RequireTool(t, "mosquitto_pub") // Debian's mosquitto-clients (scripts/deps.sh)
	bundle, err := os.ReadFile(filepath.Join(npm, "node_modules", "mqtt", "dist", "mqtt.min.js"))
	if err != nil {
		testenv.Unavailable(t, "MQTT.js's browser bundle: %v", err)
	}
	pubTok, pubEntry := auth.NewToken("pub", time.Time{}, "")
	a, err := auth.Parse([]byte(pageACL + pubEntry.TOML()))
	if err != nil {
		t.Fatal(err)
	}
	// No client CAs: headless Chromium cancels a WebSocket handshake when
	// the server asks for a client certificate (docs/browser.md).
	p := newPKI(t)
	h3 := brokertest.Start(t, p, &broker.Options{Auth: a, Web: &web.Options{Dashboard: true}})
	s := startServer(t, p, func(o *Options) {
		o.Broker = h3.Broker
		o.QUICAddr = "off"
		o.ClientCAs = nil
		o.TCPAddr = "127.0.0.1:0"
		o.WSOnBroker = true
	})
	b := &bridged{pki: p, h3: h3, mqtt: s}
	leaf, err := x509.ParseCertificate(p.Server.TLS.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	br := chromium.Start(t, chromium.Options{TrustCert: leaf})
	pub := newClient(t, p, b.h3URL(), func(o *client.Options) { o.Token = pubTok })
	host := h3.Broker.TCPAddr().String()
	for _, tt := range []struct {
		name, url string
		login     bool // the page logs in with POST /v1/session
	}{
		// A page of the broker's origin that logs in as the
		// dashboard's form does: the cookie authenticates.
		{"session cookie", "https://" + host + "/healthz", true},
		// The dashboard, its Basic prompt answered: the browser sends
		// the credentials with the upgrade too.
		{"dashboard", "https://alice:pw-alice@" + host + "/", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), rawTimeout) // a hang, not a timing
			defer cancel()
			page, err := br.NewPage(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := page.Navigate(ctx, tt.url); err != nil {
				t.Fatal(err)
			}
			var ok bool
			if err := page.Eval(ctx, string(bundle)+"\n;typeof mqtt === 'object'", &ok); err != nil || !ok {
				t.Fatalf("MQTT.js bundle not loaded into the page (%v): %q", err, page.Errors())
			}
			if err := page.Eval(ctx, pageScript+"("+strconv.FormatBool(tt.login)+")", &ok); err != nil {
				t.Fatal(err)
			}
			var subscribed bool
			if err := page.WaitFor(ctx, "window.subscribed || window.closed > 0 || !!window.failed", "window.subscribed", &subscribed); err != nil || !subscribed {
				var failed string
				_ = page.Eval(ctx, "String(window.failed)", &failed)
				t.Fatalf("page not subscribed: %v %s; console: %q", err, failed, page.Errors())
			}
			var granted []int
			if err := page.Eval(ctx, "window.granted", &granted); err != nil || len(granted) != 1 || granted[0] != 1 {
				t.Fatalf("SUBACK %v (%v), want QoS 1 granted to alice", granted, err)
			}
			out, err := exec.CommandContext(ctx, mosq, "-h", "127.0.0.1", "-p", portOf(s.TCPAddr()), "-V", "mqttv311",
				"-u", "alice", "-P", "pw-alice", "-q", "1", "-t", "browser/mosquitto", "-m", "from mosquitto_pub to "+tt.name).CombinedOutput()
			if err != nil {
				t.Fatalf("mosquitto_pub: %v: %s", err, out)
			}
			if _, err := pub.Publish(ctx, "browser/h3", []byte("from h3 to "+tt.name), client.PublishOptions{QoS: 1}); err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{"browser/mosquitto=from mosquitto_pub to " + tt.name, "browser/h3=from h3 to " + tt.name} {
				var got []string
				if err := page.WaitFor(ctx, "window.got.includes("+strconv.Quote(want)+")", "window.got", &got); err != nil {
					t.Fatalf("the page did not get %q: %v; console: %q", want, err, page.Errors())
				}
			}
			for _, e := range page.Errors() {
				if !strings.Contains(e, "/favicon.ico") { // a plain-text page's favicon: the broker serves none
					t.Errorf("console error: %q", e)
				}
			}
		})
	}
}
