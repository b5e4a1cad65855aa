package mqttquic

import (
	"testing"

	"github.com/mochi-mqtt/server/v2/packets"
)

// TestRulesEveryTransport: the topic limits (SUBSCRIBE filter, will topic)
// and client-id ownership hold over MQTT over QUIC, TCP and TLS alike
// (docs/security.md, the rule × path table).
func TestRulesEveryTransport(t *testing.T) {
	b, _ := startSecure(t, aclFile, nil)
	for _, tr := range []string{"quic", "tcp", "tls"} {
		t.Run(tr, func(t *testing.T) {
			c := mustConnect(t, b.mqtt, b.pki, tr, connectOpts{id: "rules-" + tr, clean: true})
			if got := c.subscribe(levels(17)); len(got) != 1 || got[0] != packets.ErrTopicFilterInvalid.Code {
				t.Errorf("subscribe 17 levels: %x, want 0x8f", got)
			}
			c.disconnect()
			if _, code := connectRaw(t, b.mqtt, b.pki, tr, connectOpts{id: "will-" + tr, clean: true, willTopic: levels(17), willPayload: "x", willRetain: true}); code != packets.ErrTopicNameInvalid.Code {
				t.Errorf("will on 17 levels: CONNACK 0x%02x, want 0x90", code)
			}
			if _, code := connectRaw(t, b.mqtt, b.pki, tr, connectOpts{id: "alice", clean: true}); code != packets.ErrClientIdentifierNotValid.Code {
				t.Errorf("anonymous CONNECT as client id alice: CONNACK 0x%02x, want 0x85", code)
			}
		})
	}
}
