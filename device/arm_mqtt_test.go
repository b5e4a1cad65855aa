package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/quiot/quiot/internal/testenv"
)

// TestARMv6RoundTripMQTT runs the Pi Zero binary under qemu-arm-static
// (-cpu arm1176) as broker, subscriber and publisher over MQTT over QUIC,
// and an HTTP/3 subscriber receiving the same messages across protocols. It
// catches unaligned 64-bit atomics in mochi and paho on 32-bit ARM (they
// panic there, not on amd64).
func TestARMv6RoundTripMQTT(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped with -short: builds an ARM binary and emulates it")
	}
	qemu := testenv.RequireTool(t, "qemu-arm-static") // Debian package qemu-user-static
	bin := buildPiBinary(t, t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	args := append([]string{"broker", "--config=", "--dev", "--dev-cert-out=", "--listen", "127.0.0.1:0", "--log-level", "warn"}, disableOptionalListeners(t, qemu, bin)...)
	args = append(args, "--mqtt-quic", "127.0.0.1:0") // after the disabling flags: the last one wins
	broker := startARM(t, ctx, qemu, bin, `listening: (mqtt-quic://[0-9.:]+|https://[0-9.:]+)`, `^$`, args...)
	// Both lines are printed; collect them.
	var h3URL, mqURL string
	deadline := time.After(time.Minute)
	for h3URL == "" || mqURL == "" {
		for _, line := range strings.Split(broker.stdout.String(), "\n") {
			if f := strings.Fields(line); len(f) >= 3 && f[1] == "listening:" {
				switch {
				case strings.HasPrefix(f[2], "https://"):
					h3URL = f[2]
				case strings.HasPrefix(f[2], "mqtt-quic://"):
					mqURL = f[2]
				}
			}
		}
		select {
		case <-deadline:
			t.Fatalf("broker did not print both listeners:\n%s\n%s", broker.stdout, broker.stderr)
		case <-time.After(50 * time.Millisecond): // polling the collected output
		}
	}
	t.Logf("broker under qemu: %s and %s", h3URL, mqURL)

	const n = 5
	mqSub := startARM(t, ctx, qemu, bin, `^$`, `msg=subscribed`,
		"sub", "--config=", "--broker", mqURL, "--insecure", "--topic", "armq/#", "--count", fmt.Sprint(n), "--format", "json")
	mqSub.wait(t, ctx, mqSub.stderr, "the MQTT subscription")
	h3Sub := startARM(t, ctx, qemu, bin, `^$`, `msg=subscribed`,
		"sub", "--config=", "--broker", h3URL, "--insecure", "--topic", "armq/#", "--count", fmt.Sprint(n), "--format", "json")
	h3Sub.wait(t, ctx, h3Sub.stderr, "the HTTP/3 subscription")

	pub := startARM(t, ctx, qemu, bin, `^(published .*)$`, `^$`,
		"pub", "--config=", "--broker", mqURL, "--insecure", "--topic", "armq/pi0", "--qos", "1", "--payload", "mqtt from an ARM1176", "--count", fmt.Sprint(n), "--rate", "20")
	summary := pub.wait(t, ctx, pub.stdout, "the publisher's summary")
	pub.exit(t, ctx)
	mqSub.exit(t, ctx)
	h3Sub.exit(t, ctx)
	t.Logf("MQTT publisher under qemu: %s", summary)
	for _, s := range []struct {
		name string
		p    *armProc
	}{{"mqtt", mqSub}, {"h3", h3Sub}} {
		var lat []float64
		for _, line := range strings.Split(strings.TrimSpace(s.p.stdout.String()), "\n") {
			var j subJSON
			if err := json.Unmarshal([]byte(line), &j); err != nil {
				t.Fatalf("%s subscriber line %q: %v", s.name, line, err)
			}
			if j.Topic != "armq/pi0" || j.Payload == nil || *j.Payload != "mqtt from an ARM1176" || j.LatencyMS == nil {
				t.Fatalf("%s subscriber line %q: want the published message with latency_ms", s.name, line)
			}
			lat = append(lat, *j.LatencyMS)
		}
		if len(lat) != n {
			t.Fatalf("%s subscriber printed %d messages, want %d:\n%s", s.name, len(lat), n, s.p.stdout)
		}
		t.Logf("%s subscriber under qemu, latency ms: %s", s.name, fmtMS(lat))
	}
	if err := broker.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("%v\nbroker stdout:\n%s\nstderr:\n%s", err, broker.stdout, broker.stderr)
	}
	broker.exit(t, ctx)
}
