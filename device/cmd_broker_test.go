package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/quic-go/http3"

	"github.com/quiot/quiot/internal/certs"
	"github.com/quiot/quiot/internal/wire"
)

func TestCertsCommands(t *testing.T) {
	dir := t.TempDir()
	var out, errb bytes.Buffer
	if code := run([]string{"certs", "ca", "--out", dir}, &out, &errb); code != 0 {
		t.Fatalf("certs ca: exit %d: %s", code, errb.String())
	}
	if code := run([]string{"certs", "device", "sensor-1", "--ca-dir", dir}, &out, &errb); code != 0 {
		t.Fatalf("certs device: exit %d: %s", code, errb.String())
	}
	ca, err := certs.LoadCA(filepath.Join(dir, "ca.pem"), filepath.Join(dir, "ca-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, "sensor-1.pem"), filepath.Join(dir, "sensor-1-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	if pair.Leaf.Subject.CommonName != "sensor-1" || pair.Leaf.CheckSignatureFrom(ca.Cert) != nil {
		t.Fatalf("device certificate %v not issued by the CA", pair.Leaf.Subject)
	}
	if st, err := os.Stat(filepath.Join(dir, "sensor-1-key.pem")); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode: %v %v", st.Mode(), err)
	}
	for _, tc := range []struct {
		name string
		args []string
		code int
	}{
		{"overwrite refused", []string{"certs", "ca", "--out", dir}, 1},
		{"no subcommand", []string{"certs"}, 2},
		{"unknown subcommand", []string{"certs", "nope"}, 2},
		{"device without name", []string{"certs", "device", "--ca-dir", dir}, 2},
		{"device without CA", []string{"certs", "device", "x", "--ca-dir", t.TempDir()}, 1},
		{"bad device name", []string{"certs", "device", "a/b", "--ca-dir", dir}, 2},
		// Issue 9 finding 4: names that become wildcards in %u patterns.
		{"wildcard # name", []string{"certs", "device", "#", "--ca-dir", dir}, 2},
		{"wildcard + name", []string{"certs", "device", "a+", "--ca-dir", dir}, 2},
		{"NUL name", []string{"certs", "device", "a\x00", "--ca-dir", dir}, 2},
		{"empty name", []string{"certs", "device", "", "--ca-dir", dir}, 2},
		{"$ name", []string{"certs", "device", "$SYS", "--ca-dir", dir}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if code := run(tc.args, io.Discard, io.Discard); code != tc.code {
				t.Fatalf("exit %d, want %d", code, tc.code)
			}
		})
	}
}

func TestBrokerUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"broker", "--listen", "127.0.0.1:0"}, // no certificate
		{"broker", "--dev", "--cert", "c.pem", "--key", "k.pem"},
		{"broker", "--dev", "--queue-policy", "sometimes"},
		{"broker", "--dev", "--tuning", "/nonexistent.toml"},
		{"broker", "--dev", "--queue", "0"},
	} {
		if code := run(args, io.Discard, io.Discard); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
}

// loopbackBrokerArgs adds, for the listener flags of `quiot broker`,
// values that keep a test on loopback ports it owns: extra listeners on
// port 0 or disabled.
func loopbackBrokerArgs(args ...string) []string {
	fs := flag.NewFlagSet("probe", flag.ContinueOnError)
	var c brokerCmd
	c.register(fs)
	for name, value := range map[string]string{
		"mqtt-quic":      "127.0.0.1:0",
		"mqtt-tcp":       "",
		"metrics-listen": "",
		"dev-cert-out":   "", // no file in the user's cache directory
	} {
		given := false
		for _, a := range args {
			given = given || a == "--"+name || strings.HasPrefix(a, "--"+name+"=")
		}
		if fs.Lookup(name) != nil && !given {
			args = append(args, "--"+name+"="+value)
		}
	}
	return args
}

// TestBrokerCommandDrainsOnSignal runs `quiot broker --dev` in-process, as
// main does (the context is the SIGTERM/SIGINT one), subscribes, publishes,
// then cancels the context: the subscriber gets every message and a clean
// end, and the command returns without error.
func TestBrokerCommandDrainsOnSignal(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- runBroker(ctx, loopbackBrokerArgs("--dev", "--listen", "127.0.0.1:0", "--log-level", "error", "--shutdown-grace", "5s"), pw, io.Discard)
		pw.Close()
	}()
	var fingerprint, addr string
	sc := bufio.NewScanner(pr)
	for addr == "" && sc.Scan() {
		line := sc.Text()
		if _, fp, ok := strings.Cut(line, "fingerprint: "); ok {
			fingerprint = fp
		}
		if _, a, ok := strings.Cut(line, "broker listening: https://"); ok {
			addr, _, _ = strings.Cut(a, " ")
		}
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	if addr == "" || fingerprint == "" {
		t.Fatalf("no address/fingerprint printed (fingerprint %q addr %q): %v", fingerprint, addr, <-done)
	}
	tc := &tls.Config{
		InsecureSkipVerify: true, // pinned by the printed fingerprint instead
		VerifyConnection: func(cs tls.ConnectionState) error {
			if got := certs.Fingerprint(cs.PeerCertificates[0].Raw); got != fingerprint {
				return fmt.Errorf("fingerprint %s, printed %s", got, fingerprint)
			}
			return nil
		},
	}
	tr := &http3.Transport{TLSClientConfig: tc}
	defer tr.Close()
	hc := &http.Client{Transport: tr}
	base := "https://" + addr
	resp, err := hc.Get(base + "/v1/topics/drain")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("subscribe: %v %v", resp, err)
	}
	defer resp.Body.Close()
	for i := range 10 {
		r, err := hc.Post(base+"/v1/topics/drain", "text/plain", strings.NewReader(fmt.Sprint(i)))
		if err != nil || r.StatusCode != http.StatusNoContent {
			t.Fatalf("publish: %v %v", r, err)
		}
		r.Body.Close()
	}
	cancel() // what SIGTERM does via signal.NotifyContext in main
	dec := wire.NewDecoder(resp.Body, 0)
	for i := range 10 {
		f, err := dec.Frame()
		if err != nil || string(f.Payload) != fmt.Sprint(i) {
			t.Fatalf("message %d: %+v %v", i, f, err)
		}
	}
	if _, err := dec.Frame(); err == nil {
		t.Fatal("subscription not ended by shutdown")
	}
	select {
	case err := <-done:
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Fatalf("broker command: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("broker command did not return")
	}
}
