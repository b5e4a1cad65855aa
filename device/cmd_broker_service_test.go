package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// lockedBuffer is a goroutine-safe buffer.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestBrokerServiceNotifyAndMetrics runs `quiot broker` as systemd would
// (NOTIFY_SOCKET, WATCHDOG_USEC), waits for READY=1, scrapes the metrics
// listener, then stops it and expects STOPPING=1.
func TestBrokerServiceNotifyAndMetrics(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "notify.sock")
	nc, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	t.Setenv("NOTIFY_SOCKET", sock)
	t.Setenv("WATCHDOG_USEC", "2000000")
	t.Setenv("WATCHDOG_PID", "")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout lockedBuffer
	done := make(chan error, 1)
	go func() {
		done <- runBroker(ctx, []string{"--config", "", "--dev", "--dev-cert-out=", "--listen", "127.0.0.1:0", "--mqtt-quic", "",
			"--mqtt-tcp", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--log-level", "error"}, &stdout, io.Discard)
	}()
	notes := make(chan string, 16)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := nc.Read(buf)
			if err != nil {
				close(notes)
				return
			}
			notes <- string(buf[:n])
		}
	}()
	// recv returns the next notification; while running, a broker that
	// ended first fails the test with its error (it used to show only as a
	// missing READY=1).
	running := done
	recv := func() string {
		t.Helper()
		select {
		case got, ok := <-notes:
			if !ok {
				t.Fatal("notify socket closed")
			}
			return got
		case err := <-running:
			t.Fatalf("broker ended before notifying: %v (stdout %q)", err, stdout.String())
		case <-time.After(60 * time.Second): // a bound that only catches a hang
			t.Fatalf("no notification within 60 s (stdout %q)", stdout.String())
		}
		return ""
	}
	if got := recv(); !strings.HasPrefix(got, "READY=1\nSTATUS=serving https://127.0.0.1:") {
		t.Fatalf("first notification %q", got)
	}
	if got := recv(); got != "WATCHDOG=1" {
		t.Fatalf("second notification %q", got)
	}
	m := regexp.MustCompile(`metrics: (http://\S+/metrics)`).FindStringSubmatch(stdout.String())
	if m == nil {
		t.Fatalf("no metrics address in %q", stdout.String())
	}
	resp, err := http.Get(m[1])
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{"quiot_broker_subscriptions 0", "quiot_broker_dropped_messages_total 0",
		`quiot_quic_udp_datagrams_total{direction="received"}`, "quiot_quic_pto_total",
		"process_resident_memory_bytes", "process_cpu_seconds_total",
		"quiot_mqtt_clients 0", "quiot_mqtt_refused_preconnect_total 0", "quiot_mqtt_refused_wills_total 0"} {
		if !bytes.Contains(body, []byte(want)) {
			t.Errorf("scrape lacks %q", want)
		}
	}
	cancel()
	running = nil // it ends now; STOPPING=1 may come after that
	for {
		got := recv()
		if got == "WATCHDOG=1" {
			continue
		}
		if got != "STOPPING=1" {
			t.Errorf("on shutdown: %q", got)
		}
		break
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestBrokerCheckConfig(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.toml", "[broker]\ndev = true\nlisten = \"127.0.0.1:0\"\nmetrics-listen = \"127.0.0.1:0\"\n\n[pub]\ntopic = \"x\"\n")
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"good", []string{"--config", good}, ""},
		{"unknown key", []string{"--config", write("k.toml", "[broker]\ndev = true\n\nlisen = \":1\"\n")}, `k.toml:4: [broker] key "lisen": unknown key`},
		{"bad value", []string{"--config", write("v.toml", "[broker]\ndev = true\nhistory = \"lots\"\n")}, `v.toml:3: [broker] key "history": invalid value`},
		{"bad address", []string{"--config", good, "--metrics-listen", "nohost:port:x"}, "--metrics-listen"},
		{"missing file", []string{"--config", filepath.Join(dir, "nope.toml")}, "does not exist"},
		{"missing cert", []string{"--config", good, "--dev=false", "--cert", filepath.Join(dir, "no.crt"), "--key", filepath.Join(dir, "no.key")}, "no.crt"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			err := runBroker(context.Background(), append(tc.args, "--check-config", "--log-level", "error"), &out, io.Discard)
			if tc.wantErr == "" {
				if err != nil || !strings.Contains(out.String(), "configuration OK") {
					t.Fatalf("err %v, out %q", err, out.String())
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err %v, want %q", err, tc.wantErr)
			}
		})
	}
}

// flagNames lists a command's flags from its -h output.
func flagNames(t *testing.T, cmd string) []string {
	t.Helper()
	c, ok := app.Lookup(cmd)
	if !ok {
		t.Fatalf("no command %s", cmd)
	}
	var stderr bytes.Buffer
	_ = c.Run(context.Background(), []string{"-h"}, io.Discard, &stderr)
	var names []string
	for _, m := range regexp.MustCompile(`(?m)^  --?([A-Za-z0-9][A-Za-z0-9-]*)`).FindAllStringSubmatch(stderr.String(), -1) {
		if m[1] != "config" && m[1] != "check-config" {
			names = append(names, m[1])
		}
	}
	if len(names) == 0 {
		t.Fatalf("no flags parsed from quiot %s -h:\n%s", cmd, stderr.String())
	}
	sort.Strings(names)
	return names
}

// TestConfigExampleDocumentsEveryFlag: build/config/quiot.toml, the
// documented /etc/quiot/quiot.toml, names every flag of every role.
func TestConfigExampleDocumentsEveryFlag(t *testing.T) {
	data, err := os.ReadFile("../build/config/quiot.toml")
	if err != nil {
		t.Fatal(err)
	}
	tables := map[string]map[string]bool{}
	sec := ""
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "#"))
		if m := regexp.MustCompile(`^\[(\w+)\]$`).FindStringSubmatch(line); m != nil {
			sec = m[1]
			tables[sec] = map[string]bool{}
			continue
		}
		if m := regexp.MustCompile(`^([A-Za-z0-9-]+) = `).FindStringSubmatch(line); m != nil && sec != "" {
			tables[sec][m[1]] = true
		}
	}
	for _, role := range []string{"broker", "pub", "sub"} {
		for _, f := range flagNames(t, role) {
			if !tables[role][f] {
				t.Errorf("build/config/quiot.toml [%s] does not document --%s: add a comment and a line \"# %s = DEFAULT\" there", role, f, f)
			}
		}
		for k := range tables[role] {
			found := false
			for _, f := range flagNames(t, role) {
				found = found || f == k
			}
			if !found {
				t.Errorf("build/config/quiot.toml [%s] documents %q, which is not a flag of quiot %s", role, k, role)
			}
		}
	}
}

// TestBrokerGivesBackStartPages: once the broker serves, it gives back the
// binary's pages that start-up touched (internal/startpages; its own tests
// check that pages go and when a collection is followed by a give-back).
func TestBrokerGivesBackStartPages(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errOut := newSyncBuffer(`msg="binary pages released" after=start-up`)
	done := make(chan error, 1)
	go func() {
		done <- runBroker(ctx, []string{"--config", "", "--dev", "--dev-cert-out=", "--listen", "127.0.0.1:0", "--mqtt-quic", "",
			"--metrics-listen", "", "--log-level", "debug"}, io.Discard, errOut)
	}()
	select {
	case <-errOut.seen:
	case err := <-done:
		t.Fatalf("broker ended: %v; %s", err, errOut)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
