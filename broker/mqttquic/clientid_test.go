package mqttquic

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/quiot/quiot/broker/auth"
	"github.com/quiot/quiot/internal/testenv"
)

// squatACL has two devices and anonymous access: a client id equal to a
// user's name belongs to that user.
const squatACL = `
[anonymous]
publish   = ["public/#"]
subscribe = ["public/#"]

[[user]]
name      = "sensor-1"
token     = "tok-sensor-1"
publish   = ["devices/%u/#", "public/#"]
subscribe = ["devices/%u/#", "public/#"]

[[user]]
name      = "bob"
password  = "pw-bob"
publish   = ["public/#"]
subscribe = ["public/#"]
`

// clientIDNotValid is the CONNACK code of a client id another identity
// owns: MQTT 5 0x85 Client Identifier not valid, 3.1.1 return code 2
// Identifier rejected.
func clientIDNotValid(version byte) byte {
	if version == 4 {
		return packets.Err3ClientIdentifierNotValid.Code
	}
	return packets.ErrClientIdentifierNotValid.Code
}

// TestClientIDSquatting is issue 27 finding 8: a client id equal to the
// name of a [[user]] (what %u takes for it) belongs to that identity.
// Another identity connecting with it, anonymous or bob, with
// mosquitto_sub and with raw clients over TCP and QUIC, 3.1.1 and 5, is
// refused with Client Identifier not valid (0x85 / 2) instead of holding
// the id (and locking the device out for as long as it stays, or for the
// life of an offline session); the device then connects, and its offline
// session and queued message are its own. Client ids that name no user
// stay free for all.
func TestClientIDSquatting(t *testing.T) {
	sub := testenv.RequireTool(t, "mosquitto_sub")
	b, _ := startSecure(t, squatACL, nil)
	host, port, err := net.SplitHostPort(b.mqtt.TCPAddr())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string // in mosquitto_sub's output
	}{
		{"anonymous v5", []string{"-V", "mqttv5"}, "Client Identifier not valid"},
		{"anonymous v3.1.1", []string{"-V", "mqttv311"}, "identifier rejected"},
		{"bob v5, persistent session", []string{"-V", "mqttv5", "-u", "bob", "-P", "pw-bob", "-c", "-x", "600"}, "Client Identifier not valid"},
		{"bob v3.1.1, persistent session", []string{"-V", "mqttv311", "-u", "bob", "-P", "pw-bob", "-c"}, "identifier rejected"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// -W only ends a client the broker wrongly accepted.
			args := append([]string{"-h", host, "-p", port, "-i", "sensor-1", "-t", "public/#", "-W", "10"}, tc.args...)
			out, err, hung := runTool(t, sub, args...)
			if err == nil || hung || !strings.Contains(out, tc.want) {
				t.Errorf("mosquitto_sub %v: err %v, hung %v, output %q; want refused with %q", tc.args, err, hung, out, tc.want)
			}
		})
	}
	for _, tr := range secTransports {
		for _, v := range []byte{4, 5} {
			for _, who := range []connectOpts{{}, {user: "bob", pass: "pw-bob"}} {
				o := who
				o.version, o.id, o.clean = v, "sensor-1", true
				if c, code := connectRaw(t, b.mqtt, b.pki, tr, o); code != clientIDNotValid(v) {
					t.Errorf("%s v%d %q as sensor-1: CONNACK 0x%02x, want 0x%02x", tr, v, o.user, code, clientIDNotValid(v))
					if code == 0 {
						c.disconnect()
					}
				}
			}
		}
	}

	// The device connects with its id, leaves an offline session with a
	// queued message, and nobody else gets it or takes the session over.
	dev := mustConnect(t, b.mqtt, b.pki, "tcp", connectOpts{id: "sensor-1", pass: "tok-sensor-1", expiry: 600})
	dev.subscribe("devices/sensor-1/#")
	dev.disconnect()
	waitForCond(t, func() bool { return sessionOffline(b.mqtt, "sensor-1") }, "sensor-1 offline")
	pub := mustConnect(t, b.mqtt, b.pki, "quic", connectOpts{id: "pub-1", pass: "tok-sensor-1", clean: true})
	if code, err := pub.publish("devices/sensor-1/cmd", "go", 1, false); err != nil || code != 0 {
		t.Fatalf("publish: 0x%02x %v", code, err)
	}
	waitForCond(t, func() bool { return queued(b.mqtt, "sensor-1") == 1 }, "the command queued for sensor-1")
	for _, v := range []byte{4, 5} {
		if c, code := connectRaw(t, b.mqtt, b.pki, "tcp", connectOpts{version: v, id: "sensor-1", expiry: 600}); code != clientIDNotValid(v) {
			t.Errorf("anonymous v%d on the offline session: CONNACK 0x%02x, want 0x%02x", v, code, clientIDNotValid(v))
			if code == 0 {
				c.disconnect()
			}
		}
	}
	dev = mustConnect(t, b.mqtt, b.pki, "tcp", connectOpts{id: "sensor-1", pass: "tok-sensor-1", expiry: 600})
	if pk := dev.next(); pk.TopicName != "devices/sensor-1/cmd" || string(pk.Payload) != "go" {
		t.Fatalf("sensor-1 got %q %q from its session", pk.TopicName, pk.Payload)
	}
	dev.disconnect()
	// A client id that names no user is anyone's.
	mustConnect(t, b.mqtt, b.pki, "tcp", connectOpts{id: "kitchen", clean: true}).disconnect()
	if n := b.mqtt.Security().RefusedClientIDs; n != 14 {
		t.Errorf("RefusedClientIDs = %d, want 14", n)
	}
}

// TestClientIDGivenByReload: a reload that adds a [[user]] named like a
// client id another identity holds hands the id to the new user: the
// live connection with it is disconnected, and the user's CONNECT ends an
// offline session of it (without inheriting its subscriptions) instead of
// being refused.
func TestClientIDGivenByReload(t *testing.T) {
	anon := "[anonymous]\npublish = [\"public/#\"]\nsubscribe = [\"public/#\"]\n"
	p := filepath.Join(t.TempDir(), "acl.toml")
	if err := os.WriteFile(p, []byte(anon), 0o600); err != nil {
		t.Fatal(err)
	}
	acl, err := auth.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	b := startBridged(t, acl)
	offline := mustConnect(t, b.mqtt, b.pki, "tcp", connectOpts{id: "sensor-9", expiry: 600})
	offline.subscribe("public/#")
	offline.disconnect()
	waitForCond(t, func() bool { return sessionOffline(b.mqtt, "sensor-9") }, "sensor-9 offline")
	live := mustConnect(t, b.mqtt, b.pki, "tcp", connectOpts{id: "sensor-8", clean: true})

	users := "[[user]]\nname = \"sensor-9\"\ntoken = \"tok-9\"\nsubscribe = [\"public/#\"]\n" +
		"[[user]]\nname = \"sensor-8\"\ntoken = \"tok-8\"\n"
	if err := os.WriteFile(p, []byte(anon+users), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := acl.Reload(); err != nil {
		t.Fatal(err)
	}
	for {
		_, err := live.read(30 * time.Second)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatal("anonymous sensor-8 still connected 30 s after the reload named the id")
		}
		if err != nil {
			break
		}
	}
	waitForCond(t, func() bool { return sessionOffline(b.mqtt, "sensor-8") }, "anonymous sensor-8 closed by the broker")
	mustConnect(t, b.mqtt, b.pki, "tcp", connectOpts{id: "sensor-8", pass: "tok-8", clean: true}).disconnect()
	mustConnect(t, b.mqtt, b.pki, "quic", connectOpts{id: "sensor-9", pass: "tok-9", expiry: 600})
	cl, ok := b.mqtt.MQTT().Clients.Get("sensor-9")
	if !ok || cl.State.Subscriptions.Len() != 0 {
		t.Errorf("sensor-9 inherited the anonymous session's subscriptions (%v)", ok)
	}
}
