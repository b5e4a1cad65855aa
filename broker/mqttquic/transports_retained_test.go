package mqttquic

import (
	"fmt"
	"strings"
	"testing"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/auth"
	"github.com/quiot/quiot/broker/brokertest"
)

// TestRetainedAndDollarEveryTransport: over MQTT over QUIC, TCP, TLS and
// WebSocket, a PUBLISH to a `$` topic is refused and not retained, by an
// identity the ACL allows `$SYS/#`, `$x/#` and `#`, and
// retained PUBLISHes stop at the retained-bytes bound (PUBACK Quota
// exceeded), the MQTT side retaining no more than the broker
// (docs/security.md, the rule × path table).
func TestRetainedAndDollarEveryTransport(t *testing.T) {
	const bound = 8 << 10
	payload := strings.Repeat("r", 1000)
	for _, tr := range []string{"quic", "tcp", "tls", "ws"} {
		t.Run(tr, func(t *testing.T) {
			a, err := auth.Parse([]byte(aclFile + "\n[[user]]\nname = \"sys\"\ntoken = \"tok-sys\"\npublish = [\"$SYS/#\", \"$x/#\", \"#\"]\nsubscribe = [\"#\"]\n"))
			if err != nil {
				t.Fatal(err)
			}
			p := newPKI(t)
			h3 := brokertest.Start(t, p, &broker.Options{Auth: a, ClientCAs: p.Pool(), Limits: broker.Limits{RetainedBytes: bound}})
			s := startServer(t, p, func(o *Options) {
				o.Broker = h3.Broker
				o.TCPAddr = "127.0.0.1:0"
				o.TLSAddr = "127.0.0.1:0"
				o.WSAddr = "127.0.0.1:0"
			})
			var c *rawClient
			o := connectOpts{id: "pub-" + tr, pass: "tok-sys", clean: true} // an identity allowed $SYS/#, $x/# and #
			if tr == "ws" {
				var code byte
				if c, code = connectWS(t, s, o); code != 0 {
					t.Fatalf("CONNACK 0x%02x", code)
				}
			} else {
				c = mustConnect(t, s, p, tr, o)
			}
			for _, topic := range []string{"$SYS/broker/uptime", "$x/y"} { // mochi refuses $SYS too; $x only quiot
				if code, err := c.publish(topic, "spoof", 1, true); err == nil && code < 0x80 {
					t.Errorf("publish to %s: PUBACK 0x%02x, want a refusal", topic, code)
				}
			}
			refused := false
			for i := range 20 {
				code, err := c.publish(fmt.Sprintf("public/r/%d", i), payload, 1, true)
				if err != nil {
					t.Fatal(err)
				}
				if code == packets.ErrQuotaExceeded.Code {
					refused = true
					break
				}
				if code != 0 {
					t.Fatalf("retained publish %d: PUBACK 0x%02x", i, code)
				}
			}
			if !refused {
				t.Errorf("20 retained KB accepted against a %d-byte bound", bound)
			}
			held := 0
			for _, m := range s.MQTT().Topics.Messages("#") {
				if strings.HasPrefix(m.TopicName, "$") && string(m.Payload) == "spoof" {
					t.Errorf("retained spoof %s", m.TopicName)
				}
				if strings.HasPrefix(m.TopicName, "public/") {
					held += len(m.TopicName) + len(m.Payload)
				}
			}
			if held > bound {
				t.Errorf("the MQTT side retains %d bytes, beyond the bound %d", held, bound)
			}
		})
	}
}
