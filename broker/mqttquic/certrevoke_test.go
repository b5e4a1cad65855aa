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

// TestCertificateRevokedByRemovingUser is the MQTT side of issue 27
// finding 7: removing a certificate's [[user]] entry revokes it even when
// [anonymous] exists. Before the reload the certificate connects as its
// CN over every transport that carries a certificate (QUIC, TLS, secure
// WebSocket on its own listener and on the broker's port); the reload
// closes those connections, and a new CONNECT with the certificate is
// refused (MQTT 5 0x86 Bad user name or password, 3.1.1 return code 5),
// not accepted with the CN as identity, the anonymous rules (%u included)
// and the CN's client ids. A certificate whose CN was never added is
// refused alike.
func TestCertificateRevokedByRemovingUser(t *testing.T) {
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
		o.TLSAddr = "127.0.0.1:0"
		o.WSSAddr = "127.0.0.1:0"
		o.WSOnBroker = true
	})
	cert := pki.Client(t, "dev-1")
	never := pki.Client(t, "dev-2")
	type conn struct {
		transport string
		version   byte
	}
	var conns []conn
	for _, tr := range []string{"quic", "tls", "wss", "broker"} {
		conns = append(conns, conn{tr, 5}, conn{tr, 4})
	}
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
	for _, tr := range []string{"quic", "wss"} {
		rc := mustPathConnect(t, s, h3.Broker, pki, tr, pathOpts{}, connectOpts{id: "anon-" + tr, clean: true})
		if code, err := rc.publish("public/x", "anon", 1, false); err != nil || code != 0 {
			t.Errorf("%s: anonymous publish public/x: 0x%02x %v", tr, code, err)
		}
	}
}

// badCredentials is the CONNACK code of refused credentials: MQTT 5 0x86
// Bad user name or password, 3.1.1 return code 5 (mochi's mapping).
func badCredentials(version byte) byte {
	if version == 5 {
		return 0x86
	}
	return 5
}
