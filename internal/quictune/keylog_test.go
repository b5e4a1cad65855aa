package quictune

import (
	"bytes"
	"context"
	"crypto/tls"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quiot/quiot/internal/certs"
)

// resetKeyLog gives the test a fresh key log state and captures the warning.
func resetKeyLog(t *testing.T) *bytes.Buffer {
	t.Helper()
	old, oldWarn := keyLogState, keyLogWarnTo
	var warn bytes.Buffer
	keyLogState, keyLogWarnTo = &keyLog{}, &warn
	t.Cleanup(func() {
		if f, ok := keyLogState.w.(*os.File); ok {
			_ = f.Close()
		}
		keyLogState, keyLogWarnTo = old, oldWarn
	})
	return &warn
}

// TestKeyLogHandshake: with SSLKEYLOGFILE set, a TLS 1.3 handshake between
// configs made by ApplyServerTLS and ApplyClientTLS writes the NSS key log
// lines Wireshark needs, and the process warns loudly once.
func TestKeyLogHandshake(t *testing.T) {
	warn := resetKeyLog(t)
	path := filepath.Join(t.TempDir(), "keys.log")
	t.Setenv(KeyLogEnv, path)

	c, err := certs.SelfSigned(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	p := Default()
	srv := &tls.Config{Certificates: []tls.Certificate{c.TLS}}
	p.ApplyServerTLS(srv)
	cli := &tls.Config{InsecureSkipVerify: true, ServerName: "localhost"}
	p.ApplyClientTLS(cli)
	if srv.KeyLogWriter == nil || cli.KeyLogWriter == nil {
		t.Fatal("KeyLogWriter not set on the configs")
	}

	a, b := net.Pipe()
	t.Cleanup(func() { a.Close(); b.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- tls.Server(a, srv).HandshakeContext(ctx) }()
	if err := tls.Client(b, cli).HandshakeContext(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	log, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, label := range []string{"CLIENT_HANDSHAKE_TRAFFIC_SECRET", "SERVER_HANDSHAKE_TRAFFIC_SECRET", "CLIENT_TRAFFIC_SECRET_0", "SERVER_TRAFFIC_SECRET_0"} {
		// Both ends log each secret: two lines per label.
		if n := strings.Count(string(log), label+" "); n != 2 {
			t.Errorf("%s: %d lines, want 2 (one per end)\n%s", label, n, log)
		}
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("key log mode: %v %v, want 0600", st.Mode().Perm(), err)
	}
	if n := strings.Count(warn.String(), "WARNING: SSLKEYLOGFILE="); n != 1 {
		t.Errorf("warning printed %d times, want once:\n%s", n, warn)
	}
	if !strings.Contains(warn.String(), path) {
		t.Errorf("warning does not name the file:\n%s", warn)
	}
}

func TestKeyLogUnsetOrUnwritable(t *testing.T) {
	tests := []struct {
		name     string
		env      string
		wantWarn string
	}{
		{name: "unset", env: "", wantWarn: ""},
		{name: "unwritable", env: filepath.Join(t.TempDir(), "no", "such", "dir", "keys.log"), wantWarn: "cannot be opened"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			warn := resetKeyLog(t)
			t.Setenv(KeyLogEnv, tc.env)
			c := &tls.Config{}
			Default().ApplyClientTLS(c)
			if c.KeyLogWriter != nil {
				t.Fatal("KeyLogWriter set without a usable SSLKEYLOGFILE")
			}
			if tc.wantWarn == "" && warn.Len() != 0 || !strings.Contains(warn.String(), tc.wantWarn) {
				t.Fatalf("warning %q, want %q", warn, tc.wantWarn)
			}
		})
	}
}
