package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/quiot/quiot/broker/brokertest"
	"github.com/quiot/quiot/broker/mqttquic"
	"github.com/quiot/quiot/broker/mqttquic/mqtttest"
	"github.com/quiot/quiot/device/client"
	"github.com/quiot/quiot/internal/testutil"
)

// TestBridgeStoreKill9: a `quiot broker` process whose [[bridge]] has a
// store_dir is killed with SIGKILL while its upstream (another quiot,
// MQTT/TCP) is unreachable and the store holds the messages published to
// it; started again on the same store once the upstream is up, it sends
// every one of them, in order, then the new ones.
func TestBridgeStoreKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: runs two broker processes")
	}
	dir := t.TempDir()
	h3Port, metricsPort, upPort := freePort(t), freePort(t), freePort(t)
	cfg := fmt.Sprintf(`[broker]
dev = true
dev-cert-out = ""
listen = "127.0.0.1:%d"
mqtt-quic = ""
metrics-listen = "127.0.0.1:%d"

[[bridge]]
name          = "cloud"
url           = "mqtt://127.0.0.1:%d"
out           = ["sensors/#"]
remote_prefix = "site-1/"
store_dir     = %q
reconnect_min = "50ms"
reconnect_max = "200ms"
`, h3Port, metricsPort, upPort, filepath.Join(dir, "bridge-cloud"))
	path := filepath.Join(dir, "quiot.toml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	start := func() *childProc {
		p := startChild(t, false, "broker", "--config", path, "--log-level", "info")
		p.stdout.wait(t, regexp.MustCompile(`^bridge cloud: `), 30*time.Second)
		return p
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	edgeURL := fmt.Sprintf("https://127.0.0.1:%d", h3Port)
	publish := func(from, to int) {
		c, err := client.New(client.Options{Broker: edgeURL, Insecure: true, Reconnect: true, Logger: testutil.DiscardLogger()})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		for i := from; i < to; i++ {
			if _, err := c.Publish(ctx, "sensors/seq", []byte(strconv.Itoa(i)), client.PublishOptions{QoS: 1}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// stored waits until the bridge's store holds n messages (scraping
	// /metrics: the publisher's acknowledgement does not wait for it).
	stored := func(n int) {
		re := regexp.MustCompile(`(?m)^quiot_bridge_stored_messages\{bridge="cloud"\} (\d+)$`)
		for {
			resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort))
			if err == nil {
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if m := re.FindSubmatch(body); m != nil && string(m[1]) == strconv.Itoa(n) {
					return
				}
			}
			if ctx.Err() != nil {
				t.Fatalf("the store never held %d messages", n)
			}
			time.Sleep(20 * time.Millisecond) // scrape interval: the store's count has no event to wait on from outside
		}
	}

	const n = 100
	p := start()
	publish(0, n)
	stored(n)
	p.kill()

	upstream := brokertest.Start(t, nil, nil)
	mqtttest.Start(t, upstream.PKI, mqttquic.Options{QUICAddr: "off", TCPAddr: fmt.Sprintf("127.0.0.1:%d", upPort), Broker: upstream.Broker})
	sub, err := client.New(client.Options{Broker: upstream.URL, RootCAs: upstream.PKI.Pool(), Logger: testutil.DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	got := make(chan int, 4*n)
	subscribed := make(chan struct{})
	go func() {
		_ = sub.Subscribe(client.WithSubscribed(ctx, func() { close(subscribed) }), "site-1/sensors/#", 0, func(m client.Message) {
			v, _ := strconv.Atoi(string(m.Payload))
			got <- v
		})
	}()
	select {
	case <-subscribed:
	case <-ctx.Done():
		t.Fatal("upstream subscription never started")
	}
	start()
	publish(n, 2*n)
	next, dups := 0, 0
	for next < 2*n {
		select {
		case v := <-got:
			switch {
			case v == next:
				next++
			case v < next:
				dups++
			default:
				t.Fatalf("got %d, want %d: a message lost or out of order", v, next)
			}
		case <-ctx.Done():
			t.Fatalf("upstream got %d of %d messages", next, 2*n)
		}
	}
	if dups > 0 {
		// A message the restarted edge sends again carries the stamp it
		// had (its time in the store), and the quiot upstream publishes a
		// stamp, topic and payload once (docs/mqtt.md, "Send time").
		t.Fatalf("the upstream delivered %d duplicates: it should drop the bridge's resends", dups)
	}
	t.Logf("all %d messages arrived in order across the kill -9, no duplicate", 2*n)
}
