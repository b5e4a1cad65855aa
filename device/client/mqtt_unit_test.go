package client

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/quiot/quiot/internal/quictune"
)

func TestMQTTKeepAlive(t *testing.T) {
	d := func(x time.Duration) quictune.Duration { return quictune.Duration(x) }
	lab := quictune.Lean()
	lab.KeepAlivePeriod = d(time.Second)
	tests := []struct {
		name string
		quic bool
		p    *quictune.Profile
		want uint16
	}{
		{"default: 2/3 of quic-go's 30 s idle timeout", true, quictune.Default(), 20},
		{"lean over QUIC: its idle timeout, not its QUIC keep-alive", true, quictune.Lean(), 90},
		{"1 s QUIC keep-alive: the idle timeout", true, lab, 90},
		{"QUIC keep-alive, short idle timeout: at least 60 s", true, &quictune.Profile{MaxIdleTimeout: d(10 * time.Second), KeepAlivePeriod: d(2 * time.Second)}, 60},
		{"lean over TCP: its keep-alive period", false, quictune.Lean(), 25},
		{"keep-alive at the idle timeout is lowered", true, &quictune.Profile{MaxIdleTimeout: d(9 * time.Second), KeepAlivePeriod: d(9 * time.Second)}, 6},
		{"short idle timeout", true, &quictune.Profile{MaxIdleTimeout: d(time.Second)}, 1},
		{"long idle timeout", true, &quictune.Profile{MaxIdleTimeout: d(300 * time.Hour)}, 65535},
		{"long idle timeout with QUIC keep-alive", true, &quictune.Profile{MaxIdleTimeout: d(300 * time.Hour), KeepAlivePeriod: d(time.Minute)}, 65535},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &mqttClient{opts: &Options{Tuning: tt.p}, quic: tt.quic}
			if got := c.keepAlive(); got != tt.want {
				t.Fatalf("keepAlive() = %d, want %d", got, tt.want)
			}
			idle := time.Duration(tt.p.MaxIdleTimeout)
			if idle == 0 {
				idle = 30 * time.Second
			}
			if tt.quic && tt.p.KeepAlivePeriod > 0 && time.Duration(tt.p.KeepAlivePeriod) < idle {
				return // QUIC's PINGs keep the connection open
			}
			if time.Duration(c.keepAlive())*time.Second >= idle && idle > time.Second {
				t.Fatalf("keep-alive %d s not below the idle timeout %v", c.keepAlive(), idle)
			}
		})
	}
}

func TestMQTTShareStrip(t *testing.T) {
	for in, want := range map[string]string{
		"a/b":               "a/b",
		"$share/g/a/#":      "a/#",
		"$share/g":          "$share/g",
		"$SYS/broker/load":  "$SYS/broker/load",
		"$share/grp/+/temp": "+/temp",
	} {
		if got := mqttShareStrip(in); got != want {
			t.Errorf("mqttShareStrip(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestMQTTNewDefaults(t *testing.T) {
	tests := []struct{ url, addr string }{
		{"mqtt-quic://example.org", "example.org:14567"},
		{"mqtt://example.org", "example.org:1883"},
		{"MQTT-QUIC://10.0.0.1:9999", "10.0.0.1:9999"},
		{"mqtt://[::1]", "[::1]:1883"},
	}
	for _, tt := range tests {
		t.Run(tt.url, func(t *testing.T) {
			c, err := New(Options{Broker: tt.url})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			mc := c.(*mqttClient)
			if mc.addr != tt.addr {
				t.Fatalf("addr %q, want %q", mc.addr, tt.addr)
			}
			if !strings.HasPrefix(mc.id, "quiot-") || len(mc.id) > 23 {
				t.Fatalf("generated client id %q", mc.id)
			}
		})
	}
}

func TestMQTTBadArguments(t *testing.T) {
	u, _ := url.Parse("mqtt-quic://127.0.0.1:1")
	c, err := newMQTT(u, &Options{Tuning: quictune.Default()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	if _, err := c.Publish(ctx, "a", nil, PublishOptions{QoS: 2}); err == nil || !strings.Contains(err.Error(), "qos 2") {
		t.Errorf("publish qos 2: %v", err)
	}
	if err := c.Subscribe(ctx, "a", 5, func(Message) {}); err == nil || !strings.Contains(err.Error(), "HTTP/3 only") {
		t.Errorf("subscribe since: %v", err)
	}
	if err := c.Subscribe(ctx, "", 0, func(Message) {}); err == nil {
		t.Error("empty filter accepted")
	}
}
