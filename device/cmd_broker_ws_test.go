package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// TestBrokerWebSocketFlags: `quiot broker --mqtt-ws --mqtt-wss` serves MQTT
// over WebSocket at the printed addresses, and by default on the --listen
// port too; the WebSocket listeners take --cors-origins from the browser
// part's flag: a listed origin is served, another refused with 403 before
// the upgrade.
func TestBrokerWebSocketFlags(t *testing.T) {
	const listed = "https://app.example:8443"
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	out := newLineWaiter(`^mqtt listening: (wss://\S+/mqtt) \(MQTT over secure WebSocket on the broker's port\)`)
	go out.consume(pr)
	done := make(chan error, 1)
	go func() {
		done <- runBroker(ctx, []string{"--config", "", "--dev", "--listen", "127.0.0.1:0", "--mqtt-quic", "",
			"--mqtt-ws", "127.0.0.1:0", "--mqtt-wss", "127.0.0.1:0", "--cors-origins", listed,
			"--metrics-listen", "", "--log-level", "error"}, pw, io.Discard)
		pw.Close()
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("broker: %v", err)
		}
	})
	var onListen string
	select {
	case onListen = <-out.match:
	case err := <-done:
		done <- err
		t.Fatalf("broker ended: %v\n%s", err, out)
	case <-time.After(60 * time.Second): // a bound that only catches a hang
		t.Fatalf("no MQTT over WebSocket on the broker's port after 60 s:\n%s", out)
	}
	m := regexp.MustCompile(`(?m)^mqtt listening: (ws://\S+/mqtt) .*\n^mqtt listening: (wss://\S+/mqtt) `).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("no ws:// and wss:// listeners printed:\n%s", out)
	}
	d := websocket.Dialer{Subprotocols: []string{"mqtt"}, HandshakeTimeout: 30 * time.Second,
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}} // --dev: a throwaway certificate
	for _, u := range []struct{ name, url string }{{"ws", m[1]}, {"wss", m[2]}, {"listen", onListen}} {
		url := u.url
		for _, tt := range []struct {
			origin string
			code   int
		}{{listed, http.StatusSwitchingProtocols}, {"", http.StatusSwitchingProtocols}, {"https://evil.example", http.StatusForbidden}} {
			t.Run(u.name+"/"+tt.origin, func(t *testing.T) {
				h := http.Header{}
				if tt.origin != "" {
					h.Set("Origin", tt.origin)
				}
				c, resp, err := d.Dial(url, h)
				if resp == nil {
					t.Fatalf("dial %s: %v", url, err)
				}
				if resp.StatusCode != tt.code {
					t.Fatalf("origin %q: status %d (%v), want %d", tt.origin, resp.StatusCode, err, tt.code)
				}
				if c == nil {
					return
				}
				defer c.Close()
				// MQTT 3.1.1 CONNECT, clean session, empty client id.
				if err := c.WriteMessage(websocket.BinaryMessage, []byte{0x10, 12, 0, 4, 'M', 'Q', 'T', 'T', 4, 2, 0, 30, 0, 0}); err != nil {
					t.Fatal(err)
				}
				_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
				if _, msg, err := c.ReadMessage(); err != nil || !bytes.Equal(msg, []byte{0x20, 2, 0, 0}) {
					t.Fatalf("CONNACK: %x %v", msg, err)
				}
			})
		}
	}
}
