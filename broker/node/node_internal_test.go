package node

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/quiot/quiot/broker/auth"
	"github.com/quiot/quiot/internal/testutil"
)

// TestACLReloadOnSIGHUP: SIGHUP (Config.Reload) reloads the ACL file; a broken file keeps
// the old rules; a credential's expiry refreshes the rules by itself.
func TestACLReloadOnSIGHUP(t *testing.T) {
	p := filepath.Join(t.TempDir(), "acl.toml")
	write := func(s string) {
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("[[user]]\nname = \"a\"\npublish = [\"x\"]\n")
	log, logs := testLogger()
	a, err := auth.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	n := &Node{c: Config{Auth: a}, log: log}
	hup := make(chan os.Signal)
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		n.reloader(context.Background(), hup, done)
	}()
	t.Cleanup(func() { close(done); <-stopped })
	_, changed := a.Watch()
	write("[[user]]\nname = \"a\"\npublish = [\"y\"]\n")
	hup <- syscall.SIGHUP
	<-changed
	if !a.Allow("a", auth.Publish, "y") || a.Allow("a", auth.Publish, "x") {
		t.Fatal("rules not reloaded")
	}
	write("[[user]\n")
	hup <- syscall.SIGHUP
	hup <- syscall.SIGHUP // the reloader took the first one once this one is received
	if !a.Allow("a", auth.Publish, "y") || !strings.Contains(logs.String(), "ACL reload failed") {
		t.Fatalf("a broken file must keep the rules and be logged:\n%s", logs.String())
	}
	// A token that expires in a second: the reloader refreshes the rules
	// at its expiry without a signal.
	expiry := time.Now().Add(time.Second).Truncate(time.Second).Add(time.Second)
	_, tok := auth.NewToken("a", expiry, "")
	write("[[user]]\nname = \"a\"\npublish = [\"y\"]\n" + tok.TOML())
	_, changed = a.Watch()
	hup <- syscall.SIGHUP
	<-changed
	// The reloader may still be reading the file for the second signal
	// above (it loads the new file then): a change before the expiry is
	// that reload; the refresh is the first change at or after it.
	for {
		gen, changed := a.Watch()
		select {
		case <-changed:
		case <-time.After(30 * time.Second):
			t.Fatal("no refresh within 30 s of the token's expiry")
		}
		if time.Now().Before(expiry) {
			continue
		}
		if a.StillValid("a", gen) {
			t.Error("connections that may have used the expired token kept")
		}
		return
	}
}

// TestMetricsListenWarning is issue 27 finding 10 (a): a metrics endpoint
// beyond loopback warns at start, as plain MQTT/TCP does.
func TestMetricsListenWarning(t *testing.T) {
	for _, tc := range []struct {
		addr string
		warn bool
	}{
		{"127.0.0.1:9464", false},
		{"localhost:9464", false},
		{"[::1]:9464", false},
		{":9464", true},
		{"0.0.0.0:9464", true},
		{"192.0.2.10:9464", true},
		{"[::]:9464", true},
	} {
		log, logs := testLogger()
		warnMetricsListen(log, tc.addr)
		if got := strings.Contains(logs.String(), "level=WARN") && strings.Contains(logs.String(), "metrics endpoint listens on a non-loopback address"); got != tc.warn {
			t.Errorf("--metrics-listen %s: warned %v, want %v (log %q)", tc.addr, got, tc.warn, logs.String())
		}
	}
}

// testLogger logs to a buffer.
func testLogger() (*slog.Logger, *testutil.SyncBuffer) {
	b := &testutil.SyncBuffer{}
	return slog.New(slog.NewTextHandler(b, nil)), b
}
