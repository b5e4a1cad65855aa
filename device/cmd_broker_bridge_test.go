package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/quiot/quiot/internal/testutil"
)

// TestBrokerBridgeConfig: a [[bridge]] table with an error stops `quiot
// broker` before it starts, with an error naming the file, the bridge and
// the key; good tables pass --check-config.
func TestBrokerBridgeConfig(t *testing.T) {
	dir := t.TempDir()
	const head = "[broker]\ndev = true\nlisten = \"127.0.0.1:0\"\nmetrics-listen = \"127.0.0.1:0\"\n\n"
	for _, tc := range []struct {
		name, bridges, wantErr string
		check                  bool
	}{
		{"good", "[[bridge]]\nname = \"cloud\"\nurl = \"mqtt://127.0.0.1:1\"\nout = [\"sensors/#\"]\nin = [\"cmd/#\"]\n", "", true},
		{"bad qos", "[[bridge]]\nname = \"cloud\"\nurl = \"mqtt://h\"\nout = [\"a/#\"]\nqos = 3\n", `[[bridge]] "cloud": key "qos": qos 3: want 0 or 1`, false},
		{"no url", "[[bridge]]\nname = \"cloud\"\nout = [\"a/#\"]\n", `[[bridge]] "cloud": key "url": required`, true},
		{"unnamed", "[[bridge]]\nurl = \"mqtt://h\"\nout = [\"a/#\"]\n", `[[bridge]] #1: key "name": required`, false},
		{"typo", "[[bridge]]\nname = \"up\"\nurl = \"mqtt://h\"\nout = [\"a/#\"]\nclean_sart = true\n", `[[bridge]] "up": key "clean_sart": unknown key (did you mean clean_start?)`, false},
		{"inbound without ACL", "[[bridge]]\nname = \"cloud\"\nurl = \"mqtt://h\"\nin = [\"cmd/#\"]\n", `[[bridge]] "cloud": key "in": the broker has no ACL`, false},
		{"plain table", "[bridge]\nname = \"cloud\"\n", "write [[bridge]]", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := head + tc.bridges
			if tc.name == "inbound without ACL" { // no --dev (it opens the broker): a certificate and no ACL
				pki := testutil.NewPKI(t)
				crt, key := filepath.Join(dir, "srv.pem"), filepath.Join(dir, "srv.key")
				if err := os.WriteFile(crt, pki.Server.CertPEM, 0o600); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(key, pki.Server.KeyPEM, 0o600); err != nil {
					t.Fatal(err)
				}
				cfg = strings.Replace(cfg, "dev = true\n", "cert = \""+crt+"\"\nkey = \""+key+"\"\n", 1)
			}
			path := filepath.Join(dir, tc.name+".toml")
			if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
				t.Fatal(err)
			}
			args := []string{"--config", path, "--log-level", "error"}
			if tc.check {
				args = append(args, "--check-config")
			}
			var out bytes.Buffer
			ctx, cancel := context.WithCancel(context.Background())
			cancel() // a broker that starts stops at once
			err := runBroker(ctx, args, &out, io.Discard)
			if tc.wantErr == "" {
				if err != nil || !strings.Contains(out.String(), "configuration OK") {
					t.Fatalf("err %v, out %q", err, out.String())
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err %v, want %q", err, tc.wantErr)
			}
			if strings.Contains(out.String(), "broker listening") {
				t.Fatalf("the broker started: %q", out.String())
			}
		})
	}
}
