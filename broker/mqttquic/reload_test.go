package mqttquic

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/quiot/quiot/broker/auth"
)

// TestReloadDisconnectsRevokedClients is the MQTT side of issue 9 finding
// 6's reload: after the ACL file is reloaded, the clients of an identity
// whose token was removed are disconnected (MQTT 5: DISCONNECT Not
// authorized; 3.1.1: the connection closes), and the client of an
// identity whose rights stayed keeps publishing and receiving on the same
// connection.
func TestReloadDisconnectsRevokedClients(t *testing.T) {
	keepTok, keep := auth.NewToken("keep", time.Time{}, "")
	goneTok, gone := auth.NewToken("gone", time.Time{}, "")
	users := "[[user]]\nname = \"keep\"\npublish = [\"k/#\"]\nsubscribe = [\"k/#\"]\n" +
		"[[user]]\nname = \"gone\"\npublish = [\"g/#\"]\nsubscribe = [\"g/#\"]\n"
	p := filepath.Join(t.TempDir(), "acl.toml")
	if err := os.WriteFile(p, []byte(users+keep.TOML()+gone.TOML()), 0o600); err != nil {
		t.Fatal(err)
	}
	acl, err := auth.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	b := startBridged(t, acl)
	ck := mustConnect(t, b.mqtt, b.pki, "quic", connectOpts{id: "keep-1", user: "keep", pass: keepTok, clean: true})
	g5 := mustConnect(t, b.mqtt, b.pki, "quic", connectOpts{id: "gone-5", user: "gone", pass: goneTok, clean: true})
	g4 := mustConnect(t, b.mqtt, b.pki, "tcp", connectOpts{version: 4, id: "gone-4", user: "gone", pass: goneTok, clean: true})
	if codes := ck.subscribe("k/#"); len(codes) != 1 || codes[0] > 2 {
		t.Fatalf("keep subscribe: %v", codes)
	}
	if codes := g5.subscribe("g/#"); len(codes) != 1 || codes[0] > 2 {
		t.Fatalf("gone subscribe: %v", codes)
	}

	if err := os.WriteFile(p, []byte(users+keep.TOML()), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := acl.Reload(); err != nil {
		t.Fatal(err)
	}
	// closed waits for the broker to end c's connection; a read that
	// times out means it did not.
	closed := func(c *rawClient, what string) {
		t.Helper()
		for {
			pk, err := c.read(30 * time.Second)
			if errors.Is(err, os.ErrDeadlineExceeded) {
				t.Errorf("%s: still connected 30 s after the reload", what)
				return
			}
			if err != nil {
				return
			}
			if c.v == 5 && (pk.FixedHeader.Type != packets.Disconnect || pk.ReasonCode != packets.ErrNotAuthorized.Code) {
				t.Errorf("%s: got packet type %d reason 0x%02x, want DISCONNECT 0x87", what, pk.FixedHeader.Type, pk.ReasonCode)
			}
		}
	}
	closed(g5, "MQTT 5 client of the revoked token")
	closed(g4, "MQTT 3.1.1 client of the revoked token")
	if code, err := ck.publish("k/1", "after", 1, false); err != nil || code != 0 {
		t.Fatalf("keep publish after the reload: 0x%02x %v", code, err)
	}
	if d := ck.next(); d.TopicName != "k/1" || string(d.Payload) != "after" {
		t.Fatalf("keep got %q %q", d.TopicName, d.Payload)
	}
	if _, code := connectRaw(t, b.mqtt, b.pki, "tcp", connectOpts{id: "gone-new", user: "gone", pass: goneTok, clean: true}); code == 0 {
		t.Error("removed token accepted on a new connection")
	}
}
