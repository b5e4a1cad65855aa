package mqttquic

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/quiot/quiot/broker/brokertest"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/internal/testenv"
)

// syncBuffer is a bytes.Buffer safe for concurrent log writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// records returns the JSON log records written so far.
func (s *syncBuffer) records(t *testing.T) []map[string]any {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(s.b.String()), "\n") {
		if line == "" {
			continue
		}
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		out = append(out, r)
	}
	return out
}

// TestClientMistakesAreNotWarnings: what clients (raw ones and
// mosquitto_pub) do (leave without
// DISCONNECT, close before CONNECT, publish to a bad topic, send a packet
// MQTT forbids, choose a short keep-alive) is logged at Debug or Info with a message, never as a
// warning or an error, and no record carries a whole packet with its
// payload (issue 10 finding 7: every MQTT/TCP disconnect logged
// `level=WARN msg="" error=EOF`, a bad topic was an ERROR).
func TestClientMistakesAreNotWarnings(t *testing.T) {
	var logs syncBuffer
	p := newPKI(t)
	h3 := brokertest.Start(t, p, &broker.Options{ClientCAs: p.Pool()})
	s := startServer(t, p, func(o *Options) {
		o.Broker = h3.Broker
		o.TCPAddr = "127.0.0.1:0"
		o.Logger = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	b := &bridged{pki: p, h3: h3, mqtt: s}
	secret := strings.Repeat("S", 300000) // a refused payload that must not reach the log

	// Closed before CONNECT.
	c := dialTransport(t, b, "tcp", 5)
	_ = c.c.Close()
	for _, tr := range transports {
		// A session that ends without DISCONNECT, after refused publishes
		// (bad topic, payload too large) at MQTT 5; its keep-alive is one
		// mochi finds short.
		r := dialTransport(t, b, tr, 5)
		r.keepalive = 2
		r.connect("log-v5-"+tr, true, nil)
		r.publish(1, 1, deepTopic, []byte("x"), nil)
		r.read() // the refusal (its codes are TestPublishAcksMQTT5's business)
		r.publish(2, 2, "log/big", []byte(secret), nil)
		r.read()
		_ = r.c.Close()
		// MQTT 3.1.1: a refused publish closes the connection; PINGREQ
		// shows when the server has dealt with it either way. The
		// PINGREQ may cross the close (over QUIC its write then fails
		// with the stream canceled): the read below sees the close.
		r = dialTransport(t, b, tr, 4)
		r.connect("log-v311-"+tr, true, nil)
		r.publish(1, 1, deepTopic, []byte("x"), nil)
		_ = r.sendErr(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pingreq}}, (*packets.Packet).PingreqEncode)
		for {
			if pk, err := r.readErr(); err != nil || pk.FixedHeader.Type == packets.Pingresp {
				break
			}
		}
		_ = r.c.Close()
		// A packet MQTT forbids: a wildcard in a topic name.
		r = dialTransport(t, b, tr, 5)
		r.connect("log-proto-"+tr, true, nil)
		r.publish(1, 1, "log/+", []byte("x"), nil)
		r.closed()
	}

	// And a real client: mosquitto_pub, refused at both versions.
	pubTool := testenv.RequireTool(t, "mosquitto_pub")
	for _, v := range []string{"mqttv5", "mqttv311"} {
		// (Whether it hangs is TestMosquittoPubConformance's business.)
		_, _, _ = runTool(t, pubTool, "-h", "127.0.0.1", "-p", portOf(s.TCPAddr()), "-V", v, "-q", "1", "-t", deepTopic, "-m", "x")
	}

	// Every session's end is logged ("client disconnected"), and so is
	// the connection closed before CONNECT (by mochi's TCP listener, as
	// "mqtt connection ended" once rewritten).
	count := func(msg string) int {
		n := 0
		for _, r := range logs.records(t) {
			if r["msg"] == msg {
				n++
			}
		}
		return n
	}
	preConnect := func() bool { // whatever its level and message
		for _, r := range logs.records(t) {
			if e, _ := r["error"].(string); strings.Contains(e, "read connection") {
				return true
			}
		}
		return false
	}
	waitUntil(t, func() bool { return count("client disconnected") >= 8 && preConnect() }, "log records of the 9 connections' ends")

	var refused, protocol bool
	for _, r := range logs.records(t) {
		level, msg := r["level"].(string), r["msg"].(string)
		line, _ := json.Marshal(r)
		if level != "DEBUG" && level != "INFO" {
			t.Errorf("a client's doing logged at %s: %s", level, line)
		}
		if msg == "" {
			t.Errorf("record without a message: %s", line)
		}
		if strings.Contains(string(line), "SSSSSSSS") {
			t.Errorf("record carries the payload: %.300s", line)
		}
		refused = refused || msg == "broker refused mqtt publish"
		protocol = protocol || strings.Contains(msg, "breaks the protocol")
	}
	if !refused || !protocol || count("mqtt connection ended") == 0 {
		t.Errorf("missing records: refused publish %v, protocol error %v, connection ended %v", refused, protocol, count("mqtt connection ended") > 0)
	}
}

// TestConnEndLevel: how the end of a connection is logged.
func TestConnEndLevel(t *testing.T) {
	for _, c := range []struct {
		err  error
		want slog.Level
	}{
		{nil, slog.LevelDebug},
		{net.ErrClosed, slog.LevelDebug},
		{packets.ErrProtocolViolationRequireFirstConnect, slog.LevelInfo},
		{packets.ErrPacketTooLarge, slog.LevelInfo},
	} {
		if got := connEndLevel(c.err); got != c.want {
			t.Errorf("connEndLevel(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
