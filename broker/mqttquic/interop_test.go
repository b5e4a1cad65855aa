package mqttquic

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/quiot/quiot/device/client"
	"github.com/quiot/quiot/internal/testenv"
	"github.com/quiot/quiot/internal/wire"
)

// Interop with MQTT software not written here: Debian's mosquitto-clients
// against the MQTT/TCP listener, crossing to and from HTTP/3.

func lookTool(t *testing.T, name string) string {
	t.Helper()
	return testenv.RequireTool(t, name) // Debian package mosquitto-clients (scripts/deps.sh)
}

// TestMosquittoSubFromHTTP3: mosquitto_sub (3.1.1 and 5) receives what
// HTTP/3 publishes. It is subscribed once a probe published over HTTP/3
// reaches it (an event, not a time: under load that took longer than the
// 10 s this test once waited for mochi's subscription count, issue 10
// finding 9).
func TestMosquittoSubFromHTTP3(t *testing.T) {
	sub := lookTool(t, "mosquitto_sub")
	b := startBridged(t, nil)
	port := portOf(b.mqtt.TCPAddr())
	pub := newClient(t, b.pki, b.h3URL(), nil)
	for _, v := range []string{"mqttv311", "mqttv5"} {
		t.Run(v, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			cmd := exec.CommandContext(ctx, sub, "-h", "127.0.0.1", "-p", port, "-V", v, "-i", "mosq-"+v,
				"-t", "interop/"+v+"/#", "-q", "1", "-v")
			var errb bytes.Buffer
			cmd.Stderr = &errb
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			lines := make(chan string, 64)
			go func() {
				sc := bufio.NewScanner(stdout)
				for sc.Scan() {
					lines <- sc.Text()
				}
				close(lines)
			}()
			t.Cleanup(func() { cancel(); _ = cmd.Wait() })
			next := func(what string) string {
				t.Helper()
				select {
				case l, ok := <-lines:
					if !ok {
						t.Fatalf("mosquitto_sub ended while waiting for %s: %s", what, errb.String())
					}
					return l
				case <-time.After(rawTimeout):
					t.Fatalf("no %s from mosquitto_sub within %v: %s", what, rawTimeout, errb.String())
				}
				return ""
			}
			probe := "interop/" + v + "/probe"
			publish := func(topic, payload string) {
				t.Helper()
				if _, err := pub.Publish(context.Background(), topic, []byte(payload), client.PublishOptions{QoS: 1}); err != nil {
					t.Fatal(err)
				}
			}
			// Probes until one arrives (polled every 100 ms; the bound only
			// catches a hang), then the rest of them, which arrive in order.
			for i := 0; ; i++ {
				last := fmt.Sprint("probe-", i)
				publish(probe, last)
				select {
				case l := <-lines:
					for l != probe+" "+last {
						if !strings.HasPrefix(l, probe+" probe-") {
							t.Fatalf("mosquitto_sub printed %q while waiting for probes", l)
						}
						l = next("the last probe")
					}
				case <-time.After(100 * time.Millisecond): // polling, not synchronising on time
					if i < int(rawTimeout/(100*time.Millisecond)) {
						continue
					}
					t.Fatalf("mosquitto_sub never received a probe: %s", errb.String())
				}
				break
			}
			var got []string
			for i := 0; i < 3; i++ {
				publish(fmt.Sprintf("interop/%s/%d", v, i), fmt.Sprint("from-h3-", i))
				got = append(got, next("a message"))
			}
			want := []string{"interop/" + v + "/0 from-h3-0", "interop/" + v + "/1 from-h3-1", "interop/" + v + "/2 from-h3-2"}
			if strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Fatalf("mosquitto_sub printed %q, want %q", got, want)
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
		ctx, cancel := context.WithTimeout(context.Background(), rawTimeout)
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
	// The compact stamp quiot's own clients send (base 36) reads the same.
	run("-V", "mqttv5", "-t", "mosq/c", "-m", "hello-qt", "-q", "1", "-D", "publish", "user-property", wire.MQTTStampProperty, wire.FormatStamp(1700000000123456789))
	if m := recv(t, ch, "mqtt 5 message with the compact stamp"); m.Topic != "mosq/c" || m.Sent.UnixNano() != 1700000000123456789 {
		t.Fatalf("got %q on %q sent %v, want hello-qt on mosq/c with the property's send time", m.Payload, m.Topic, m.Sent)
	}
	// Retained over MQTT reaches a later HTTP/3 subscriber.
	run("-t", "mosq/retained", "-m", "kept", "-q", "1", "-r")
	late := newClient(t, b.pki, b.h3URL(), nil)
	lch := subscribe(t, late, "mosq/retained")
	if m := recv(t, lch, "retained"); !m.Retained || string(m.Payload) != "kept" {
		t.Fatalf("got %+v", m)
	}
}
