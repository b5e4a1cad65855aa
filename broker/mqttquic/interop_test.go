package mqttquic

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quiot/quiot/device/client"
)

// Interop with MQTT software not written here: Debian's mosquitto-clients
// against the MQTT/TCP listener, crossing to and from HTTP/3.

func lookTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Skipf("%s not found (Debian package mosquitto-clients; scripts/deps.sh installs it as root)", name)
	}
	return p
}

func TestMosquittoSubFromHTTP3(t *testing.T) {
	sub := lookTool(t, "mosquitto_sub")
	b := startBridged(t, nil)
	port := portOf(b.mqtt.TCPAddr())
	for _, v := range []string{"mqttv311", "mqttv5"} {
		t.Run(v, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			var out, errb bytes.Buffer
			cmd := exec.CommandContext(ctx, sub, "-h", "127.0.0.1", "-p", port, "-V", v, "-i", "mosq-"+v,
				"-t", "interop/"+v+"/#", "-q", "1", "-C", "3", "-v")
			cmd.Stdout, cmd.Stderr = &out, &errb
			before := atomic.LoadInt64(&b.mqtt.MQTT().Info.Subscriptions)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
			waitFor(t, func() bool { return atomic.LoadInt64(&b.mqtt.MQTT().Info.Subscriptions) > before }, "mosquitto_sub subscribed")
			pub := newClient(t, b.pki, b.h3URL(), nil)
			for i := 0; i < 3; i++ {
				if _, err := pub.Publish(ctx, fmt.Sprintf("interop/%s/%d", v, i), []byte(fmt.Sprint("from-h3-", i)), client.PublishOptions{QoS: 1}); err != nil {
					t.Fatal(err)
				}
			}
			if err := cmd.Wait(); err != nil {
				t.Fatalf("mosquitto_sub: %v: %s", err, errb.String())
			}
			want := fmt.Sprintf("interop/%s/0 from-h3-0\ninterop/%s/1 from-h3-1\ninterop/%s/2 from-h3-2\n", v, v, v)
			if out.String() != want {
				t.Fatalf("mosquitto_sub printed %q, want %q", out.String(), want)
			}
		})
	}
}

func TestMosquittoPubToHTTP3(t *testing.T) {
	pubTool := lookTool(t, "mosquitto_pub")
	b := startBridged(t, nil)
	port := portOf(b.mqtt.TCPAddr())
	h3Sub := newClient(t, b.pki, b.h3URL(), nil)
	ch := subscribe(t, h3Sub, "mosq/#")
	mqPub := newClient(t, b.pki, tcpURL(b.mqtt), nil)
	waitSubscribed(t, mqPub, ch, "mosq/probe")

	run := func(args ...string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, pubTool, append([]string{"-h", "127.0.0.1", "-p", port}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("mosquitto_pub %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	run("-V", "mqttv311", "-t", "mosq/a", "-m", "hello-311", "-q", "1")
	if m := recv(t, ch, "mqtt 3.1.1 message"); m.Topic != "mosq/a" || string(m.Payload) != "hello-311" {
		t.Fatalf("got %q on %q", m.Payload, m.Topic)
	}
	// MQTT 5 with the send-time user property: the HTTP/3 side sees it.
	run("-V", "mqttv5", "-t", "mosq/b", "-m", "hello-5", "-q", "1", "-D", "publish", "user-property", "quiot-time", "1700000000123456789")
	m := recv(t, ch, "mqtt 5 message")
	if m.Topic != "mosq/b" || string(m.Payload) != "hello-5" {
		t.Fatalf("got %q on %q", m.Payload, m.Topic)
	}
	if m.Sent.UnixNano() != 1700000000123456789 {
		t.Fatalf("send time %v, want the user property's", m.Sent)
	}
	// Retained over MQTT reaches a later HTTP/3 subscriber.
	run("-t", "mosq/retained", "-m", "kept", "-q", "1", "-r")
	late := newClient(t, b.pki, b.h3URL(), nil)
	lch := subscribe(t, late, "mosq/retained")
	if m := recv(t, lch, "retained"); !m.Retained || string(m.Payload) != "kept" {
		t.Fatalf("got %+v", m)
	}
}
