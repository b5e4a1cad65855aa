package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/quiot/quiot/broker"
	"github.com/quiot/quiot/broker/brokertest"
	"github.com/quiot/quiot/broker/mqttquic"
	"github.com/quiot/quiot/broker/mqttquic/mqtttest"
	"github.com/quiot/quiot/device/client"
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

// TestBrokerBridgeRuns: `quiot broker --config` with a [[bridge]] table
// forwards an HTTP/3 publish to its upstream (another quiot, over
// MQTT/TCP) under the prefix, and brings a retained message of the
// upstream down.
func TestBrokerBridgeRuns(t *testing.T) {
	pki := testutil.NewPKI(t)
	upstream := brokertest.Start(t, pki, nil)
	ms := mqtttest.Start(t, pki, mqttquic.Options{QUICAddr: "off", TCPAddr: "127.0.0.1:0", Broker: upstream.Broker})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := upstream.Publish(ctx, broker.Message{Topic: "site-1/cmd/valve", Payload: []byte("open"), QoS: 1, Retain: true}); err != nil {
		t.Fatal(err)
	}
	upc, err := client.New(client.Options{Broker: upstream.URL, RootCAs: pki.Pool(), Logger: testutil.DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer upc.Close()
	got := make(chan client.Message, 16)
	subscribed := make(chan struct{})
	sctx, stopSub := context.WithCancel(client.WithSubscribed(ctx, func() { close(subscribed) }))
	defer stopSub()
	go func() { _ = upc.Subscribe(sctx, "site-1/sensors/#", 0, func(m client.Message) { got <- m }) }()
	select {
	case <-subscribed:
	case <-ctx.Done():
		t.Fatal("upstream subscription never started")
	}

	path := filepath.Join(t.TempDir(), "quiot.toml")
	cfg := fmt.Sprintf(`[broker]
dev = true
dev-cert-out = ""
listen = "127.0.0.1:0"
mqtt-quic = ""
metrics-listen = "127.0.0.1:0"

[[bridge]]
name          = "cloud"
url           = "mqtt://%s"
out           = ["sensors/#"]
in            = ["cmd/#"]
remote_prefix = "site-1/"
reconnect_min = "50ms"
`, ms.TCPAddr())
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	pr, pw := io.Pipe()
	bctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	var stderr testutil.SyncBuffer
	go func() {
		done <- runBroker(bctx, []string{"--config", path, "--log-level", "info"}, pw, &stderr)
		_ = pw.Close()
	}()
	sc := bufio.NewScanner(pr)
	var edgeURL, metricsURL string
	sawBridge := false
	for (edgeURL == "" || !sawBridge || metricsURL == "") && sc.Scan() {
		l := sc.Text()
		if m := regexp.MustCompile(`metrics: (http://\S+/metrics)`).FindStringSubmatch(l); m != nil {
			metricsURL = m[1]
		}
		if m := regexp.MustCompile(`broker listening: (https://\S+) `).FindStringSubmatch(l); m != nil {
			edgeURL = m[1]
		}
		sawBridge = sawBridge || strings.HasPrefix(l, "bridge cloud: mqtt://")
	}
	if edgeURL == "" || !sawBridge || metricsURL == "" {
		t.Fatalf("broker did not start with its bridge: %v %s", <-done, stderr.String())
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()

	edge, err := client.New(client.Options{Broker: edgeURL, Insecure: true, Logger: testutil.DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer edge.Close()
	if _, err := edge.Publish(ctx, "sensors/kitchen", []byte("21.5"), client.PublishOptions{QoS: 1}); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-got:
		if m.Topic != "site-1/sensors/kitchen" || string(m.Payload) != "21.5" {
			t.Fatalf("upstream got %s %q", m.Topic, m.Payload)
		}
	case <-ctx.Done():
		t.Fatalf("upstream never got the edge's message: %s", stderr.String())
	}
	down := make(chan client.Message, 4)
	go func() { _ = edge.Subscribe(ctx, "cmd/#", 0, func(m client.Message) { down <- m }) }()
	select {
	case m := <-down:
		if m.Topic != "cmd/valve" || string(m.Payload) != "open" {
			t.Fatalf("edge got %s %q", m.Topic, m.Payload)
		}
	case <-ctx.Done():
		t.Fatalf("the upstream's retained message never came down: %s", stderr.String())
	}
	resp, err := http.Get(metricsURL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	// The counters move once the PUBACK is in and once Publish returned,
	// maybe after the subscribers got the messages: 0 or 1.
	for _, want := range []string{`quiot_bridge_up\{bridge="cloud"\} 1`, `quiot_bridge_sent_total\{bridge="cloud"\} [01]`, `quiot_bridge_received_total\{bridge="cloud"\} [01]`} {
		if !regexp.MustCompile(`(?m)^` + want + `$`).Match(body) {
			t.Errorf("metrics lack %s:\n%s", want, body)
		}
	}

	// SIGHUP with a second table added: it starts, cloud keeps running.
	got2 := make(chan client.Message, 4)
	subscribed2 := make(chan struct{})
	go func() {
		_ = upc.Subscribe(client.WithSubscribed(sctx, func() { close(subscribed2) }), "site-2/#", 0, func(m client.Message) { got2 <- m })
	}()
	select {
	case <-subscribed2:
	case <-ctx.Done():
		t.Fatal("second upstream subscription never started")
	}
	cfg += fmt.Sprintf("\n[[bridge]]\nname = \"second\"\nurl = \"mqtt://%s\"\nout = [\"other/#\"]\nremote_prefix = \"site-2/\"\n", ms.TCPAddr())
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	for !strings.Contains(stderr.String(), "SIGHUP: bridges reloaded") {
		select {
		case <-ctx.Done():
			t.Fatalf("no reload line in the log:\n%s", stderr.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	if _, err := edge.Publish(ctx, "other/x", []byte("via-second"), client.PublishOptions{QoS: 1}); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-got2:
		if m.Topic != "site-2/other/x" || string(m.Payload) != "via-second" {
			t.Fatalf("upstream got %s %q", m.Topic, m.Payload)
		}
	case <-ctx.Done():
		t.Fatalf("the bridge added by SIGHUP never forwarded: %s", stderr.String())
	}

	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	log := stderr.String()
	if !strings.Contains(log, `msg="bridge connected" bridge=cloud`) {
		t.Fatalf("no connect line in the log:\n%s", log)
	}
	if n := strings.Count(log, "bridge=cloud"); strings.Count(log, `msg="bridge starting" bridge=cloud`) != 1 || strings.Contains(log, "reconnected: resuming\" bridge=cloud") {
		t.Fatalf("cloud was restarted or reconnected by the reload (%d lines):\n%s", n, log)
	}
}
