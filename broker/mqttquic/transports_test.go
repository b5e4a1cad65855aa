package mqttquic

import (
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/auth"
	"github.com/quiot/quiot/broker/brokertest"
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

// TestThrottleEveryTransport: wrong CONNECT passwords are throttled over
// MQTT over QUIC and TLS as over TCP (TestWrongPasswordsThrottled): after
// 2 wrong ones the right one is refused with Connection rate exceeded.
func TestThrottleEveryTransport(t *testing.T) {
	for _, tr := range []string{"quic", "tls"} {
		t.Run(tr, func(t *testing.T) {
			acl, err := auth.Parse([]byte("[[user]]\nname = \"bob\"\npassword = \"pw-bob\"\npublish = [\"b/#\"]\n"))
			if err != nil {
				t.Fatal(err)
			}
			acl.SetThrottle(auth.Throttle{Failures: 2, Window: time.Hour, Backoff: time.Hour})
			p := newPKI(t)
			h3 := brokertest.Start(t, p, &broker.Options{Auth: acl, ClientCAs: p.Pool()})
			s := startServer(t, p, func(o *Options) {
				o.Broker = h3.Broker
				o.TLSAddr = "127.0.0.1:0"
			})
			for i := range 2 {
				if _, code := connectRaw(t, s, p, tr, connectOpts{id: "g", user: "bob", pass: "guess", clean: true}); code != badCredentials(5) {
					t.Fatalf("wrong password %d: CONNACK 0x%02x", i, code)
				}
			}
			if _, code := connectRaw(t, s, p, tr, connectOpts{id: "g", user: "bob", pass: "pw-bob", clean: true}); code != packets.ErrConnectionRateExceeded.Code {
				t.Errorf("right password after 2 wrong ones: CONNACK 0x%02x, want 0x9f", code)
			}
		})
	}
}
