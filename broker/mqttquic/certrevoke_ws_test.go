package mqttquic

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/auth"
	"github.com/quiot/quiot/broker/brokertest"
)

// TestCertificateRevokedOverWebSocket is TestCertificateRevokedByRemovingUser
// over MQTT over secure WebSocket, on its own listener (wss) and on the
// broker's port: removing a certificate's [[user]] entry closes the
// connections it authenticated and refuses its next CONNECT (MQTT 5 0x86,
// 3.1.1 return code 5) even though [anonymous] exists; a certificate
// whose CN was never added is refused alike.
func TestCertificateRevokedOverWebSocket(t *testing.T) {
	anon := "[anonymous]\npublish = [\"public/#\", \"devices/%u/#\"]\nsubscribe = [\"public/#\"]\n"
	user := "[[user]]\nname = \"dev-1\"\npublish = [\"devices/%u/#\"]\nsubscribe = [\"devices/%u/#\"]\n"
	p := filepath.Join(t.TempDir(), "acl.toml")
	if err := os.WriteFile(p, []byte(anon+user), 0o600); err != nil {
		t.Fatal(err)
	}
	acl, err := auth.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	pki := newPKI(t)
	h3 := brokertest.Start(t, pki, &broker.Options{Auth: acl, ClientCAs: pki.Pool()})
	s := startServer(t, pki, func(o *Options) {
		o.Broker = h3.Broker
		o.WSSAddr = "127.0.0.1:0"
		o.WSOnBroker = true
	})
	cert := pki.Client(t, "dev-1")
	never := pki.Client(t, "dev-2")
	type conn struct {
		transport string
		version   byte
	}
	conns := []conn{{"wss", 5}, {"wss", 4}, {"broker", 5}, {"broker", 4}}
	var live []*rawClient
	for _, c := range conns {
		rc := mustPathConnect(t, s, h3.Broker, pki, c.transport, pathOpts{cert: &cert}, connectOpts{version: c.version, id: fmt.Sprintf("dev-1-%s-%d", c.transport, c.version), clean: true})
		if code, err := rc.publish("devices/dev-1/x", "before", 1, false); err != nil || code != 0 {
			t.Fatalf("%s v%d: publish before the reload: 0x%02x %v", c.transport, c.version, code, err)
		}
		live = append(live, rc)
	}
	for _, c := range conns {
		_, code := pathConnect(t, s, h3.Broker, pki, c.transport, pathOpts{cert: &never}, connectOpts{version: c.version, id: "dev-2", clean: true})
		if want := badCredentials(c.version); code != want {
			t.Errorf("%s v%d: CN never added: CONNACK 0x%02x, want 0x%02x", c.transport, c.version, code, want)
		}
	}

	if err := os.WriteFile(p, []byte(anon), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := acl.Reload(); err != nil {
		t.Fatal(err)
	}
	for i, rc := range live {
		for {
			_, err := rc.read(30 * time.Second)
			if errors.Is(err, os.ErrDeadlineExceeded) {
				t.Errorf("%s v%d: connection of the revoked certificate still up 30 s after the reload", conns[i].transport, conns[i].version)
				break
			}
			if err != nil {
				break
			}
		}
	}
	for _, c := range conns {
		for _, id := range []string{"dev-1", "other"} {
			rc, code := pathConnect(t, s, h3.Broker, pki, c.transport, pathOpts{cert: &cert}, connectOpts{version: c.version, id: id, clean: true})
			if want := badCredentials(c.version); code != want {
				t.Errorf("%s v%d: revoked certificate, client id %q: CONNACK 0x%02x, want 0x%02x", c.transport, c.version, id, code, want)
				if code == 0 {
					rc.disconnect()
				}
			}
		}
	}
	// Anonymous clients keep [anonymous]'s rights, without %u.
	rc := mustPathConnect(t, s, h3.Broker, pki, "wss", pathOpts{}, connectOpts{id: "anon-1", clean: true})
	if code, err := rc.publish("public/x", "anon", 1, false); err != nil || code != 0 {
		t.Errorf("anonymous publish public/x: 0x%02x %v", code, err)
	}
}
