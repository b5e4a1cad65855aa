package mqttquic

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/auth"
	"github.com/quiot/quiot/broker/brokertest"
	"github.com/quiot/quiot/device/client"
	"github.com/quiot/quiot/internal/testenv"
	"github.com/quiot/quiot/internal/testutil"
)

// MQTT over WebSocket (ws.go) with a client not written here: MQTT.js from
// npm, in Node, the version scripts/deps.sh pins, run by testdata/mqttjs.mjs.

// mqttJSDir returns the npm prefix holding node_modules/mqtt: $QUIOT_NPM_DIR,
// else the user cache folder's quiot/npm (where scripts/deps.sh installs
// it). Without Node or MQTT.js the test skips, or fails under CI=true.
func mqttJSDir(t testing.TB) string {
	t.Helper()
	testenv.RequireTool(t, "node") // Debian package nodejs (scripts/deps.sh)
	dir := os.Getenv("QUIOT_NPM_DIR")
	if dir == "" {
		c, err := os.UserCacheDir()
		if err != nil {
			testenv.Unavailable(t, "MQTT.js: no cache folder (%v); set QUIOT_NPM_DIR or run scripts/deps.sh", err)
		}
		dir = filepath.Join(c, "quiot", "npm")
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "mqtt", "package.json")); err != nil {
		testenv.Unavailable(t, "MQTT.js is not installed in %s (run scripts/deps.sh): %v", dir, err)
	}
	return dir
}

// wsBroker is an HTTP/3 broker joined to an MQTT server with WebSocket
// listeners (plain and TLS) on loopback.
type wsBroker struct {
	*bridged
	npm, caFile string
}

func (b *wsBroker) wsURL() string  { return "ws://" + b.mqtt.WSAddr() + WSPath }
func (b *wsBroker) wssURL() string { return "wss://" + b.mqtt.WSSAddr() + WSPath }

// brokerURL is MQTT over WebSocket on the HTTP broker's own port.
func (b *wsBroker) brokerURL() string {
	return "wss://" + b.h3.Broker.TCPAddr().String() + broker.MQTTWebSocketPath
}

// wsURLs are the three ways to MQTT over WebSocket.
func (b *wsBroker) wsURLs() []struct{ name, url string } {
	return []struct{ name, url string }{{"ws", b.wsURL()}, {"wss", b.wssURL()}, {"broker", b.brokerURL()}}
}

func startWSBroker(t *testing.T, a *auth.Authenticator, origins ...string) *wsBroker {
	t.Helper()
	npm := mqttJSDir(t)
	p := newPKI(t)
	h3 := brokertest.Start(t, p, &broker.Options{Auth: a, ClientCAs: p.Pool()})
	s := startServer(t, p, func(o *Options) {
		o.Broker = h3.Broker
		o.WSAddr = "127.0.0.1:0"
		o.WSSAddr = "127.0.0.1:0"
		o.CORSOrigins = origins
		o.WSOnBroker = true
	})
	ca := p.CAFile(t)
	return &wsBroker{bridged: &bridged{pki: p, h3: h3, mqtt: s}, npm: npm, caFile: ca}
}

// node starts testdata/mqttjs.mjs with args and env; its stdout lines come
// on the channel (closed at exit). It is killed at the end of the test.
func (b *wsBroker) node(t *testing.T, env []string, args ...string) (<-chan string, *bytes.Buffer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, "node", append([]string{filepath.Join("testdata", "mqttjs.mjs")}, args...)...)
	cmd.Env = append(os.Environ(), append([]string{"MQTTJS_DIR=" + b.npm, "CA_FILE=" + b.caFile}, env...)...)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 64)
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		_ = cmd.Wait()
		close(lines)
	}()
	t.Cleanup(func() { cancel(); <-done })
	return lines, &errb
}

// nodeLine returns the next line of a node run, failing the test when it
// ends first (what it wrote to stderr says why).
func nodeLine(t *testing.T, lines <-chan string, errb *bytes.Buffer, what string) string {
	t.Helper()
	select {
	case l, ok := <-lines:
		if !ok {
			t.Fatalf("MQTT.js ended while waiting for %s: %s", what, errb.String())
		}
		return l
	case <-time.After(rawTimeout): // a hang, not a timing
		t.Fatalf("no %s from MQTT.js within %v: %s", what, rawTimeout, errb.String())
	}
	return ""
}

// TestWebSocketMQTTJS: MQTT.js over ws:// and wss://, MQTT 3.1.1 and 5:
// QoS 0, 1 and 2 round trips, a retained message replayed to a later
// subscriber, a will sent when its client is killed, and a persistent
// session resumed with the QoS 1 message queued while its client was away.
func TestWebSocketMQTTJS(t *testing.T) {
	b := startWSBroker(t, nil)
	for _, u := range b.wsURLs() {
		for _, v := range []string{"4", "5"} {
			t.Run(u.name+"/v"+v, func(t *testing.T) {
				lines, errb := b.node(t, nil, "suite", u.url, v, u.name+"-v"+v)
				var got []string
				for l := range lines {
					got = append(got, l)
				}
				tag := fmt.Sprintf("%s-v%s", u.name, v)
				want := []string{"ok " + tag + " qos0", "ok " + tag + " qos1", "ok " + tag + " qos2", "ok " + tag + " retained", "ok " + tag + " will", "ok " + tag + " session"}
				if strings.Join(got, "\n") != strings.Join(want, "\n") {
					t.Fatalf("MQTT.js printed %q, want %q; stderr: %s", got, want, errb.String())
				}
			})
		}
	}
}

// TestWebSocketOneTopicSpace: a message published over HTTP/3 reaches an
// MQTT.js subscriber over WebSocket, and what MQTT.js publishes reaches an
// HTTP/3 subscriber.
func TestWebSocketOneTopicSpace(t *testing.T) {
	b := startWSBroker(t, nil)
	pub := newClient(t, b.pki, b.h3URL(), nil)
	h3Sub := newClient(t, b.pki, b.h3URL(), nil)
	for _, u := range b.wsURLs() {
		t.Run(u.name, func(t *testing.T) {
			back := "h3ws/" + u.name + "/back"
			backCh := subscribe(t, h3Sub, back)
			waitSubscribed(t, pub, backCh, back)
			lines, errb := b.node(t, []string{"ECHO_TOPIC=" + back}, "sub", u.url, "5", "h3ws/"+u.name+"/#")
			if l := nodeLine(t, lines, errb, "subscribed"); l != "subscribed" {
				t.Fatalf("MQTT.js printed %q, want subscribed", l)
			}
			topic := "h3ws/" + u.name + "/t"
			if _, err := pub.Publish(context.Background(), topic, []byte("from h3"), client.PublishOptions{QoS: 1}); err != nil {
				t.Fatal(err)
			}
			var m struct{ Topic, Payload string }
			if err := json.Unmarshal([]byte(nodeLine(t, lines, errb, "the HTTP/3 message")), &m); err != nil {
				t.Fatal(err)
			}
			if m.Topic != topic || m.Payload != "from h3" {
				t.Fatalf("MQTT.js got %+v, want %q on %q", m, "from h3", topic)
			}
			if got := recv(t, backCh, "MQTT.js's publish over HTTP/3"); string(got.Payload) != "from h3" {
				t.Fatalf("HTTP/3 subscriber got %q", got.Payload)
			}
		})
	}
}

// wsDial opens a WebSocket to url/mqtt with an Origin header (none when
// empty) and returns the connection, or the HTTP status and body of a
// refusal.
func wsDial(t *testing.T, b *wsBroker, url, origin string) (*websocket.Conn, int, string) {
	t.Helper()
	d := websocket.Dialer{Subprotocols: []string{"mqtt"}, TLSClientConfig: &tls.Config{RootCAs: b.pki.Pool()}, HandshakeTimeout: rawTimeout}
	h := http.Header{}
	if origin != "" {
		h.Set("Origin", origin)
	}
	c, resp, err := d.Dial(url, h)
	if err == nil {
		t.Cleanup(func() { _ = c.Close() })
		return c, resp.StatusCode, ""
	}
	if resp == nil {
		t.Fatalf("dial %s: %v", url, err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	return nil, resp.StatusCode, string(body)
}

// TestWebSocketOrigin: a page from an origin not in --cors-origins is
// refused with 403 and the reason before the upgrade; a listed origin and
// a client without Origin (not a browser) connect, and MQTT.js with a
// refused Origin gets no connection.
func TestWebSocketOrigin(t *testing.T) {
	const listed = "https://app.example:8443"
	b := startWSBroker(t, nil, listed)
	for _, u := range b.wsURLs() {
		tests := []struct {
			origin string
			ok     bool
		}{
			// A page of the broker's own origin: served on its port
			// only (another port is another origin).
			{"https://" + b.h3.Broker.TCPAddr().String(), u.name == "broker"},
			{"", true},
			{listed, true},
			{"https://APP.example:8443", true}, // origins compare case-insensitively
			{"https://evil.example", false},
			{"https://app.example:8444", false},
			{"null", false},
		}
		for _, tt := range tests {
			t.Run(u.name+"/"+tt.origin, func(t *testing.T) {
				c, code, body := wsDial(t, b, u.url, tt.origin)
				if !tt.ok {
					if c != nil || code != http.StatusForbidden || !strings.Contains(body, "not allowed (broker --cors-origins)") {
						t.Fatalf("origin %q: status %d body %q, want 403 naming --cors-origins", tt.origin, code, body)
					}
					return
				}
				if c == nil {
					t.Fatalf("origin %q refused: %d %q", tt.origin, code, body)
				}
				if c.Subprotocol() != "mqtt" {
					t.Fatalf("subprotocol %q, want mqtt", c.Subprotocol())
				}
				connackOverWS(t, c)
			})
		}
		t.Run(u.name+"/mqttjs", func(t *testing.T) {
			lines, errb := b.node(t, []string{"MQTT_ORIGIN=https://evil.example"}, "connect", u.url, "5")
			if l := nodeLine(t, lines, errb, "the refusal"); !strings.Contains(l, "403") {
				t.Fatalf("MQTT.js with a refused origin printed %q, want an error naming 403", l)
			}
			lines, errb = b.node(t, []string{"MQTT_ORIGIN=" + listed}, "connect", u.url, "5")
			if l := nodeLine(t, lines, errb, "the CONNACK"); l != "connack" {
				t.Fatalf("MQTT.js with a listed origin printed %q, want connack", l)
			}
		})
	}
}

// connackOverWS sends an MQTT 3.1.1 CONNECT in a binary message and wants
// a successful CONNACK back.
func connackOverWS(t *testing.T, c *websocket.Conn) {
	t.Helper()
	connect := []byte{0x10, 12, 0, 4, 'M', 'Q', 'T', 'T', 4, 2, 0, 30, 0, 0} // clean session, empty client id
	if err := c.WriteMessage(websocket.BinaryMessage, connect); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(rawTimeout))
	op, msg, err := c.ReadMessage()
	if err != nil {
		t.Fatal(err)
	}
	if op != websocket.BinaryMessage || !bytes.Equal(msg, []byte{0x20, 2, 0, 0}) {
		t.Fatalf("got message type %d %x, want a binary CONNACK 20020000", op, msg)
	}
}

// TestWebSocketFrames: a text frame and a message larger than the maximum
// packet size each close their connection with a close code and reason,
// and a client connected beside them is unaffected; a request for another
// path, without the mqtt subprotocol or without an upgrade is refused.
func TestWebSocketFrames(t *testing.T) {
	b := startWSBroker(t, nil)
	other, _, _ := wsDial(t, b, b.wsURL(), "")
	connackOverWS(t, other)
	tests := []struct {
		name string
		send func(*websocket.Conn) error
		code int
		text string
	}{
		{"text frame", func(c *websocket.Conn) error { return c.WriteMessage(websocket.TextMessage, []byte{0x10, 0}) },
			websocket.CloseUnsupportedData, "binary frames only"},
		// Only the header of a binary frame one byte over the maximum
		// packet size: it is refused from the header, no payload read.
		{"oversized message", func(c *websocket.Conn) error {
			hdr := []byte{0x82, 0x80 | 127, 0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4} // FIN, binary; masked, 64-bit length; mask key
			binary.BigEndian.PutUint64(hdr[2:10], 320<<10+1)
			_, err := c.UnderlyingConn().Write(hdr)
			return err
		}, websocket.CloseMessageTooBig, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, _, _ := wsDial(t, b, b.wsURL(), "")
			if err := tt.send(c); err != nil {
				t.Fatal(err)
			}
			_ = c.SetReadDeadline(time.Now().Add(rawTimeout))
			_, _, err := c.ReadMessage()
			var ce *websocket.CloseError
			if !errors.As(err, &ce) || ce.Code != tt.code || !strings.Contains(ce.Text, tt.text) {
				t.Fatalf("read after %s: %v, want close %d %q", tt.name, err, tt.code, tt.text)
			}
		})
	}
	// The connection beside them still works: a PINGREQ gets its PINGRESP.
	_ = other.SetReadDeadline(time.Now().Add(rawTimeout))
	if err := other.WriteMessage(websocket.BinaryMessage, []byte{0xc0, 0}); err != nil {
		t.Fatal(err)
	}
	if _, msg, err := other.ReadMessage(); err != nil || !bytes.Equal(msg, []byte{0xd0, 0}) {
		t.Fatalf("PINGRESP: %x %v", msg, err)
	}

	hc := &http.Client{Timeout: rawTimeout}
	for _, tt := range []struct {
		name, path string
		header     map[string]string
		code       int
	}{
		{"other path", "/", map[string]string{"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Protocol": "mqtt"}, http.StatusNotFound},
		{"no upgrade", WSPath, nil, http.StatusBadRequest},
		{"no subprotocol", WSPath, map[string]string{"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13", "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}, http.StatusBadRequest},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodGet, "http://"+b.mqtt.WSAddr()+tt.path, nil)
			for k, v := range tt.header {
				req.Header.Set(k, v)
			}
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode != tt.code {
				t.Fatalf("status %d %q, want %d", resp.StatusCode, body, tt.code)
			}
		})
	}
}

// wsACL has no [anonymous] table: clients without credentials are refused.
const wsACL = `
[[user]]
name      = "alice"
password  = "pw-alice"
publish   = ["a/#"]
subscribe = ["a/#"]
`

// TestWebSocketAuth: on a broker with an ACL, MQTT.js over WebSocket
// without credentials, or with a wrong password, is refused at CONNECT
// (MQTT 5 0x86 Bad user name or password; 3.1.1 return code 5 Not
// authorized, as over MQTT/TCP); with the ACL's password it connects.
func TestWebSocketAuth(t *testing.T) {
	a, err := auth.Parse([]byte(wsACL))
	if err != nil {
		t.Fatal(err)
	}
	b := startWSBroker(t, a)
	tests := []struct {
		name string
		env  []string
		v    string
		want string
	}{
		{"anonymous v5", nil, "5", "refused 134"},
		{"anonymous v3.1.1", nil, "4", "refused 5"},
		{"wrong password", []string{"MQTT_USER=alice", "MQTT_PASS=wrong"}, "5", "refused 134"},
		{"password", []string{"MQTT_USER=alice", "MQTT_PASS=pw-alice"}, "5", "connack"},
	}
	for _, u := range b.wsURLs() {
		for _, tt := range tests {
			t.Run(u.name+"/"+tt.name, func(t *testing.T) {
				lines, errb := b.node(t, tt.env, "connect", u.url, tt.v)
				if l := nodeLine(t, lines, errb, "the CONNACK"); l != tt.want {
					t.Fatalf("MQTT.js printed %q, want %q", l, tt.want)
				}
			})
		}
	}
}

// TestPlainWebSocketWarning: plain MQTT over WebSocket on a non-loopback
// address is warned about at start, as plain MQTT/TCP is; on loopback it
// is not.
func TestPlainWebSocketWarning(t *testing.T) {
	p := newPKI(t)
	for _, tt := range []struct {
		addr string
		warn bool
	}{{"127.0.0.1:0", false}, {":0", true}} {
		t.Run(tt.addr, func(t *testing.T) {
			var buf testutil.SyncBuffer
			startServer(t, p, func(o *Options) {
				o.WSAddr = tt.addr
				o.Logger = slog.New(slog.NewTextHandler(&buf, nil))
			})
			if got := strings.Contains(buf.String(), "plain MQTT over WebSocket listens on a non-loopback address"); got != tt.warn {
				t.Fatalf("warning logged %v, want %v; log:\n%s", got, tt.warn, buf.String())
			}
		})
	}
}

// TestWebSocketTLS13Only: the wss:// listener refuses a TLS 1.2 client and
// serves a TLS 1.3 one.
func TestWebSocketTLS13Only(t *testing.T) {
	p := newPKI(t)
	s := startServer(t, p, func(o *Options) { o.WSSAddr = "127.0.0.1:0" })
	for _, tt := range []struct {
		max uint16
		ok  bool
	}{{tls.VersionTLS12, false}, {tls.VersionTLS13, true}} {
		t.Run(tls.VersionName(tt.max), func(t *testing.T) {
			d := websocket.Dialer{Subprotocols: []string{"mqtt"}, HandshakeTimeout: rawTimeout,
				TLSClientConfig: &tls.Config{RootCAs: p.Pool(), MaxVersion: tt.max}}
			c, _, err := d.Dial("wss://"+s.WSSAddr()+WSPath, nil)
			if (err == nil) != tt.ok {
				t.Fatalf("dial with %s: %v, want success %v", tls.VersionName(tt.max), err, tt.ok)
			}
			if c != nil {
				_ = c.Close()
			}
		})
	}
}

// wsFrame is a client frame (masked with the key 0, so the payload stays
// as it is): fin, opcode op, payload.
func wsFrame(fin bool, op byte, payload []byte) []byte {
	b0 := op
	if fin {
		b0 |= 0x80
	}
	var h []byte
	switch n := len(payload); {
	case n < 126:
		h = []byte{b0, 0x80 | byte(n)}
	case n < 1<<16:
		h = []byte{b0, 0x80 | 126, byte(n >> 8), byte(n)}
	default:
		h = binary.BigEndian.AppendUint64([]byte{b0, 0x80 | 127}, uint64(n))
	}
	h = append(h, 0, 0, 0, 0)
	return append(h, payload...)
}

// FuzzWebSocketFrames writes arbitrary bytes as WebSocket frames after
// the upgrade (seeds: fragmented packets, control frames between
// fragments, a text frame, an oversized length, a close frame in the
// middle of a packet, unmasked and unexpected continuation frames). The
// server never panics, ends that connection, keeps serving a client
// connected beside it and answers a new CONNECT
// (`go test ./broker/mqttquic -run '^$' -fuzz FuzzWebSocketFrames`).
func FuzzWebSocketFrames(f *testing.F) {
	const bin, text, cont, closeOp, ping = 0x2, 0x1, 0x0, 0x8, 0x9
	c := connect311
	cat := func(fs ...[]byte) []byte { return bytes.Join(fs, nil) }
	f.Add(wsFrame(true, bin, c))
	f.Add(cat(wsFrame(false, bin, c[:5]), wsFrame(true, cont, c[5:])))
	f.Add(cat(wsFrame(false, bin, c[:3]), wsFrame(true, ping, []byte("p")), wsFrame(true, cont, c[3:])))
	f.Add(cat(wsFrame(true, bin, c[:4]), wsFrame(true, bin, c[4:]), wsFrame(true, bin, []byte{0xc0, 0})))
	f.Add(wsFrame(true, text, c))
	f.Add([]byte{0x82, 0x80 | 127, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Add(cat(wsFrame(true, bin, c[:4]), wsFrame(true, closeOp, []byte{0x03, 0xe8})))
	f.Add([]byte{0x82, 0x02, 0xc0, 0x00}) // unmasked
	f.Add(wsFrame(true, cont, c))
	f.Add(cat(wsFrame(true, bin, c), wsFrame(true, bin, []byte{0x10, 0xff, 0xff, 0xff, 0x7f})))
	p := newPKI(f)
	s := startServer(f, p, func(o *Options) { o.QUICAddr = "off"; o.WSAddr = "127.0.0.1:0" })
	url := "ws://" + s.WSAddr() + WSPath
	dial := func(t testing.TB) *websocket.Conn {
		t.Helper()
		d := websocket.Dialer{Subprotocols: []string{"mqtt"}, HandshakeTimeout: rawTimeout}
		conn, _, err := d.Dial(url, nil)
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		return conn
	}
	// The client beside the fuzzed ones: MQTT 3.1.1, no keep-alive, a
	// client id a fuzzed CONNECT is unlikely to take over.
	other := dial(f)
	f.Cleanup(func() { _ = other.Close() })
	id := "beside-the-fuzzed-7f3a9c"
	if err := other.WriteMessage(websocket.BinaryMessage, append([]byte{0x10, byte(12 + len(id)), 0, 4, 'M', 'Q', 'T', 'T', 4, 2, 0, 0, 0, byte(len(id))}, id...)); err != nil {
		f.Fatal(err)
	}
	_ = other.SetReadDeadline(time.Now().Add(rawTimeout))
	if _, msg, err := other.ReadMessage(); err != nil || !bytes.Equal(msg, []byte{0x20, 2, 0, 0}) {
		f.Fatalf("CONNACK: %x %v", msg, err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		conn := dial(t)
		raw := conn.UnderlyingConn().(*net.TCPConn)
		_, _ = raw.Write(b) // the server may close first
		_ = raw.CloseWrite()
		// The server ends the connection (EOF, or a reset when it closed
		// with bytes unread); the deadline only catches a hang.
		_ = raw.SetReadDeadline(time.Now().Add(rawTimeout))
		if _, err := io.Copy(io.Discard, raw); err != nil && !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("after % x: the server did not end the connection: %v", b, err)
		}
		_ = conn.Close()
		_ = other.SetReadDeadline(time.Now().Add(rawTimeout))
		if err := other.WriteMessage(websocket.BinaryMessage, []byte{0xc0, 0}); err != nil {
			t.Fatal(err)
		}
		if _, msg, err := other.ReadMessage(); err != nil || !bytes.Equal(msg, []byte{0xd0, 0}) {
			t.Fatalf("after % x: PINGRESP to the client beside it: %x %v", b, msg, err)
		}
		fresh := dial(t)
		defer fresh.Close()
		connackOverWS(t, fresh)
	})
}

// TestWebSocketOnBrokerPort: /mqtt on the HTTP broker's port answers a
// request that is no HTTP/1.1 upgrade with the reason (HTTP/2: 400), and
// once the MQTT server is closed the path is 404 (nothing serves it).
func TestWebSocketOnBrokerPort(t *testing.T) {
	b := startWSBroker(t, nil)
	url := "https://" + b.h3.Broker.TCPAddr().String() + broker.MQTTWebSocketPath
	get := func(t *testing.T, h2 bool) (int, string) {
		t.Helper()
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: b.pki.Pool()}, ForceAttemptHTTP2: h2}
		if !h2 {
			tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
		}
		defer tr.CloseIdleConnections()
		resp, err := (&http.Client{Transport: tr, Timeout: rawTimeout}).Get(url)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		return resp.StatusCode, string(body)
	}
	for _, tt := range []struct {
		name string
		h2   bool
		want string
	}{
		{"HTTP/2", true, "needs an HTTP/1.1 upgrade"},
		{"HTTP/1.1 without upgrade", false, "needs a WebSocket upgrade"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if code, body := get(t, tt.h2); code != http.StatusBadRequest || !strings.Contains(body, tt.want) {
				t.Fatalf("status %d %q, want 400 saying %q", code, body, tt.want)
			}
		})
	}
	t.Run("MQTT server closed", func(t *testing.T) {
		if err := b.mqtt.Close(); err != nil {
			t.Fatal(err)
		}
		if code, body := get(t, false); code != http.StatusNotFound || !strings.Contains(body, "not served on this port") {
			t.Fatalf("status %d %q, want 404", code, body)
		}
	})
}

// TestWebSocketOnBrokerPortCountsConnections: an MQTT over WebSocket
// connection on the broker's port holds its TCP connection slot
// (MaxConnsPerAddr, 3 here) while it lives: of ten connections kept open,
// one within the first four is refused with 503 and the reason.
func TestWebSocketOnBrokerPortCountsConnections(t *testing.T) {
	p := newPKI(t)
	h3 := brokertest.Start(t, p, &broker.Options{Limits: broker.Limits{MaxConnsPerAddr: 3}})
	startServer(t, p, func(o *Options) { o.Broker = h3.Broker; o.QUICAddr = "off"; o.WSOnBroker = true })
	url := "wss://" + h3.Broker.TCPAddr().String() + broker.MQTTWebSocketPath
	d := websocket.Dialer{Subprotocols: []string{"mqtt"}, TLSClientConfig: &tls.Config{RootCAs: p.Pool()}, HandshakeTimeout: rawTimeout}
	for i := 1; i <= 10; i++ {
		c, resp, err := d.Dial(url, nil)
		if err != nil {
			if resp == nil {
				t.Fatalf("dial %d: %v", i, err)
			}
			body, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "too many connections") || i > 4 {
				t.Fatalf("dial %d: %d %q, want 503 too many connections within the first 4", i, resp.StatusCode, body)
			}
			return
		}
		t.Cleanup(func() { _ = c.Close() })
		connackOverWS(t, c)
	}
	t.Fatal("ten MQTT over WebSocket connections from one address, none refused: they hold no TCP connection slot")
}

// TestWebSocketConnectDue: a client that upgrades and sends no CONNECT is
// closed (1008 with the reason) once Options.StreamTimeout has passed
// (mochi itself would wait for ever), on its own port and on the
// broker's.
func TestWebSocketConnectDue(t *testing.T) {
	p := newPKI(t)
	h3 := brokertest.Start(t, p, nil)
	s := startServer(t, p, func(o *Options) {
		o.Broker = h3.Broker
		o.QUICAddr = "off"
		o.WSAddr = "127.0.0.1:0"
		o.WSOnBroker = true
		o.StreamTimeout = 100 * time.Millisecond
	})
	d := websocket.Dialer{Subprotocols: []string{"mqtt"}, TLSClientConfig: &tls.Config{RootCAs: p.Pool()}, HandshakeTimeout: rawTimeout}
	for _, url := range []string{"ws://" + s.WSAddr() + WSPath, "wss://" + h3.Broker.TCPAddr().String() + broker.MQTTWebSocketPath} {
		t.Run(strings.SplitN(url, ":", 2)[0], func(t *testing.T) {
			c, _, err := d.Dial(url, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = c.SetReadDeadline(time.Now().Add(rawTimeout)) // a hang, not a timing
			_, _, err = c.ReadMessage()
			var ce *websocket.CloseError
			if !errors.As(err, &ce) || ce.Code != websocket.ClosePolicyViolation || !strings.Contains(ce.Text, "no MQTT packet in time") {
				t.Fatalf("read on a connection without CONNECT: %v, want close 1008 with the reason", err)
			}
		})
	}
}

// BenchmarkWebSocketVersusTCP: MQTT.js (the same client library and
// payload on all) against the bridged broker over MQTT/TCP and over MQTT
// over WebSocket, and, as the anchor of the same run, against Debian's
// mosquitto over both (its plain listener and a "protocol websockets" one):
// fan-out 1 -> 100 (QoS 0, 128 bytes, b.N messages) and publish ->
// delivery latency at 100 msg/s (QoS 1, b.N messages), client and brokers
// on one host. Sub-benchmarks are named fanout100/BROKER-PROTO and
// latency/BROKER-PROTO (quiot-tcp, quiot-ws, mosquitto-tcp, mosquitto-ws).
// Without mosquitto it skips, saying why (fails under CI=true). Run with a
// fixed count, e.g.
// go test -run '^$' -bench WebSocketVersusTCP -benchtime 1000x -count 3 ./broker/mqttquic/
func BenchmarkWebSocketVersusTCP(b *testing.B) {
	npm := mqttJSDir(b)
	p := newPKI(b)
	h3 := brokertest.Start(b, p, nil)
	s := startServer(b, p, func(o *Options) {
		o.Broker = h3.Broker
		o.QUICAddr = "off"
		o.TCPAddr = "127.0.0.1:0"
		o.WSAddr = "127.0.0.1:0"
	})
	// mosquitto 2.0.11's websockets listener ignores the bind address and
	// listens on every address (ss -ltn: *:PORT) while the benchmark runs.
	tcpLine, mosqTCP := mosquittoListener(b)
	wsLine, mosqWS := mosquittoListener(b)
	startMosquitto(b, tcpLine+wsLine+"protocol websockets\n", mosqTCP, mosqWS)
	run := func(b *testing.B, env []string, args ...string) map[string]float64 {
		b.Helper()
		cmd := exec.Command("node", append([]string{filepath.Join("testdata", "mqttjs.mjs")}, args...)...)
		cmd.Env = append(os.Environ(), append([]string{"MQTTJS_DIR=" + npm}, env...)...)
		var errb bytes.Buffer
		cmd.Stderr = &errb
		out, err := cmd.Output()
		if err != nil {
			b.Fatalf("node %v: %v: %s", args, err, errb.String())
		}
		var m map[string]float64
		if err := json.Unmarshal(out, &m); err != nil {
			b.Fatalf("node %v printed %q: %v", args, out, err)
		}
		return m
	}
	for _, u := range []struct{ name, url string }{
		{"quiot-tcp", "mqtt://" + s.TCPAddr()},
		{"quiot-ws", "ws://" + s.WSAddr() + WSPath},
		{"mosquitto-tcp", "mqtt://" + mosqTCP},
		{"mosquitto-ws", "ws://" + mosqWS}, // mosquitto serves any path
	} {
		b.Run("fanout100/"+u.name, func(b *testing.B) {
			m := run(b, []string{fmt.Sprint("BENCH_MSGS=", b.N)}, "fanout", u.url, "5", "100")
			b.ReportMetric(m["deliveriesPerSec"], "deliveries/s")
		})
		b.Run("latency/"+u.name, func(b *testing.B) {
			m := run(b, nil, "latency", u.url, "5", fmt.Sprint(b.N))
			b.ReportMetric(m["p50ms"], "p50-ms")
			b.ReportMetric(m["p99ms"], "p99-ms")
			b.ReportMetric(m["maxms"], "max-ms")
		})
	}
}
