package main

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestMetricsListenWarningAtStart is issue 27 finding 10 (a): `quiot
// broker --metrics-listen 0.0.0.0:0` logs the warning (beyond loopback, as
// plain MQTT/TCP does) by the time it tells systemd it is ready
// (broker/node's TestMetricsListenWarning has the addresses).
func TestMetricsListenWarningAtStart(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "notify.sock")
	nc, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	t.Setenv("NOTIFY_SOCKET", sock)
	t.Setenv("WATCHDOG_USEC", "")
	t.Setenv("WATCHDOG_PID", "")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr lockedBuffer
	done := make(chan error, 1)
	go func() {
		done <- runBroker(ctx, []string{"--config", "", "--dev", "--dev-cert-out=", "--listen", "127.0.0.1:0", "--mqtt-quic", "",
			"--metrics-listen", "0.0.0.0:0", "--log-level", "warn"}, &stdout, &stderr)
	}()
	ready := make(chan string, 1)
	go func() {
		buf := make([]byte, 4096)
		n, err := nc.Read(buf)
		if err == nil {
			ready <- string(buf[:n])
		}
	}()
	select {
	case got := <-ready:
		if !strings.HasPrefix(got, "READY=1") {
			t.Fatalf("first notification %q", got)
		}
	case err := <-done:
		t.Fatalf("broker ended: %v (stderr %q)", err, stderr.String())
	case <-time.After(60 * time.Second): // only catches a hang
		t.Fatal("broker not ready within 60 s")
	}
	if !strings.Contains(stderr.String(), "metrics endpoint listens on a non-loopback address") {
		t.Errorf("no warning for --metrics-listen 0.0.0.0:0 in %q", stderr.String())
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
