package mqttquic

import (
	"bufio"
	"bytes"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/auth"
	"github.com/quiot/quiot/broker/brokertest"
)

// FuzzWillAndFilter sends, over the real MQTT/TCP listener of a broker with
// an ACL, a CONNECT whose will topic, payload, retain flag and protocol
// version are the fuzzer's, then a SUBSCRIBE with the fuzzer's filter, and
// closes the connection without DISCONNECT (the will is sent). It checks
// the topic limits (docs/security.md, Bounds): an accepted will topic and a
// granted filter (without its $share/group/ prefix) are within 256 bytes
// and 16 levels, nothing beyond them is retained, the retained wills stay
// within the retained-bytes bound, and the broker still accepts a CONNECT
// afterwards. `make fuzz` runs it; testdata/fuzz/ holds
// the seeds.
func FuzzWillAndFilter(f *testing.F) {
	for _, s := range []struct {
		will, filter string
		v5           bool
	}{
		{"public/w", "public/#", true},
		{levels(16), levels(16), true},
		{levels(17), levels(17), false},
		{"public/" + strings.Repeat("x", 300), "$share/g/" + levels(16), true},
		{levels(200), levels(15) + "/#", true},
		{"$SYS/x", "public/+/+/#", false},
	} {
		f.Add(s.will, []byte("gone"), true, s.filter, s.v5)
	}
	// Retained bytes are bounded low: a filter like # replays every
	// retained will to its subscriber, and a run leaves thousands.
	a, err := auth.Parse([]byte(aclFile))
	if err != nil {
		f.Fatal(err)
	}
	p := newPKI(f)
	h3 := brokertest.Start(f, p, &broker.Options{Auth: a, ClientCAs: p.Pool(), Limits: broker.Limits{RetainedBytes: 64 << 10}})
	core := &swapCore{Broker: h3.Broker}
	core.a.Store(a)
	s := startServer(f, p, func(o *Options) {
		o.Broker = core
		o.TCPAddr = "127.0.0.1:0"
		o.Limits.MaxPreConnectPerAddr = 1 << 20
	})
	addr := s.TCPAddr()
	f.Fuzz(func(t *testing.T, will string, payload []byte, retain bool, filter string, v5 bool) {
		v := byte(4)
		if v5 {
			v = 5
		}
		code, subCodes, ok := fuzzExchange(t, addr, v, will, payload, retain, filter)
		if ok && code == 0 && will != "" && !withinLimits(will) {
			t.Errorf("will topic of %d bytes, %d levels accepted", len(will), levelCount(will))
		}
		if len(subCodes) == 1 && subCodes[0] < 0x80 && !withinLimits(mqttShareStrip(filter)) {
			t.Errorf("filter of %d bytes, %d levels granted (0x%02x)", len(filter), levelCount(filter), subCodes[0])
		}
		// The will fires on the connection's goroutine after it closed:
		// wait until mochi is done with every connection before reading its
		// topic index (mochi's retained scan reads the index unlocked).
		waitFor(t, func() bool { return s.compat.handling() == 0 }, "mochi done with the fuzzed connections")
		held := 0
		for _, m := range s.MQTT().Topics.Messages("#") {
			if !withinLimits(m.TopicName) {
				t.Errorf("retained topic of %d bytes, %d levels", len(m.TopicName), levelCount(m.TopicName))
			}
			held += len(m.TopicName) + len(m.Payload)
		}
		if held > 64<<10 {
			t.Errorf("the MQTT side retains %d bytes, beyond the bound of 64 KiB", held)
		}
		if code, _, ok := fuzzExchange(t, addr, 5, "", nil, false, ""); !ok || code != 0 {
			t.Fatalf("broker no longer accepts a CONNECT: 0x%02x %v", code, ok)
		}
	})
}

func levelCount(s string) int { return strings.Count(s, "/") + 1 }

func withinLimits(s string) bool { return len(s) <= 256 && levelCount(s) <= 16 }

// fuzzExchange connects to addr with a will (none when will is ""),
// subscribes to filter when it is not "" and the CONNECT is accepted, and
// closes the connection. ok is false when no CONNACK came (the broker
// closed a malformed CONNECT); subCodes is nil when no SUBACK came.
func fuzzExchange(t *testing.T, addr string, v byte, will string, payload []byte, retain bool, filter string) (code byte, subCodes []byte, ok bool) {
	nc, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	c := &rawClient{t: t, nc: nc, r: bufio.NewReader(nc), v: v}
	pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connect}, ProtocolVersion: v,
		Connect: packets.ConnectParams{ProtocolName: []byte("MQTT"), Clean: true, Keepalive: 60}}
	if will != "" {
		pk.Connect.WillFlag, pk.Connect.WillTopic, pk.Connect.WillPayload, pk.Connect.WillRetain = true, will, payload, retain
	}
	if !send(nc, pk, (*packets.Packet).ConnectEncode) {
		return 0, nil, false
	}
	ack, err := c.read(10 * time.Second)
	if err != nil || ack.FixedHeader.Type != packets.Connack {
		return 0, nil, false
	}
	if ack.ReasonCode != 0 || filter == "" {
		return ack.ReasonCode, nil, true
	}
	sub := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Subscribe, Qos: 1}, PacketID: 1, ProtocolVersion: v,
		Filters: packets.Subscriptions{{Filter: filter, Qos: 1}}}
	if !send(nc, sub, (*packets.Packet).SubscribeEncode) {
		return 0, nil, true
	}
	for {
		p, err := c.read(10 * time.Second)
		if err != nil {
			return 0, nil, true // closed: a malformed filter
		}
		if p.FixedHeader.Type == packets.Suback {
			return 0, p.ReasonCodes, true
		}
	}
}

// send encodes pk and writes it; false when it cannot be encoded or sent.
func send(nc net.Conn, pk packets.Packet, enc func(*packets.Packet, *bytes.Buffer) error) bool {
	var buf bytes.Buffer
	if enc(&pk, &buf) != nil {
		return false
	}
	_ = nc.SetWriteDeadline(time.Now().Add(10 * time.Second))
	_, err := nc.Write(buf.Bytes())
	return err == nil
}
