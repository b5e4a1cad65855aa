package mqttquic

import (
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/quiot/quiot/broker/auth"
)

// TestWrongPasswordsThrottled is the MQTT side of issue 27 finding 10
// (b): after 3 wrong CONNECT passwords from one address, the next CONNECT
// with a password, the right one included, is refused with Connection
// rate exceeded (MQTT 5 0x9F, 3.1.1 return code 3 Server unavailable)
// before the password is checked, and counted as
// quiot_broker_refused_total{proto="mqtt",reason="throttled"}. Another
// address and a token from the same address are served.
func TestWrongPasswordsThrottled(t *testing.T) {
	acl, err := auth.Parse([]byte("[[user]]\nname = \"bob\"\npassword = \"pw-bob\"\ntoken = \"tok-bob\"\npublish = [\"b/#\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	acl.SetThrottle(auth.Throttle{Failures: 3, Window: time.Hour, Backoff: time.Hour})
	b := startBridged(t, acl)
	const guesser = "127.0.0.2"
	mustConnect(t, b.mqtt, b.pki, "tcp", connectOpts{id: "c0", user: "bob", pass: "pw-bob", clean: true, local: guesser}).disconnect()
	for i, v := range []byte{5, 4, 5} {
		if _, code := connectRaw(t, b.mqtt, b.pki, "tcp", connectOpts{version: v, id: "c1", user: "bob", pass: "guess", clean: true, local: guesser}); code != badCredentials(v) {
			t.Fatalf("wrong password %d: CONNACK 0x%02x, want 0x%02x", i, code, badCredentials(v))
		}
	}
	for _, c := range []struct {
		v    byte
		want packets.Code
	}{{5, packets.ErrConnectionRateExceeded}, {4, packets.Err3ServerUnavailable}} {
		if _, code := connectRaw(t, b.mqtt, b.pki, "tcp", connectOpts{version: c.v, id: "c2", user: "bob", pass: "pw-bob", clean: true, local: guesser}); code != c.want.Code {
			t.Errorf("v%d: right password after 3 wrong ones: CONNACK 0x%02x, want 0x%02x", c.v, code, c.want.Code)
		}
	}
	mustConnect(t, b.mqtt, b.pki, "tcp", connectOpts{id: "c3", pass: "tok-bob", clean: true, local: guesser}).disconnect()
	mustConnect(t, b.mqtt, b.pki, "tcp", connectOpts{id: "c4", user: "bob", pass: "pw-bob", clean: true, local: "127.0.0.3"}).disconnect()
	if n := b.h3.Broker.Stats().Protocols["mqtt"].Refused["throttled"]; n != 2 {
		t.Errorf("refused throttled = %d, want 2", n)
	}
}
