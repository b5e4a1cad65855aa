package main

import (
	"bytes"
	"context"
	"crypto/x509"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quiot/quiot/device/client"
	"github.com/quiot/quiot/internal/testenv"
	"github.com/quiot/quiot/probe/netns"
)

// TestBrokerWithoutACLRefusesOtherNamespaces is the end-to-end regression
// test of issue 9 finding 5: `quiot broker` with no configuration (no
// --auth, no --dev) serves loopback clients only. The broker runs in one
// network namespace, a client in another, joined by a bridge, as on a real
// network: HTTP/3, the TCP fallback, MQTT over QUIC and MQTT/TCP each
// refuse the remote client with a one-line reason (HTTP 403; MQTT CONNACK
// not authorized), while a loopback client in the broker's own namespace
// is served.
func TestBrokerWithoutACLRefusesOtherNamespaces(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireTool(t, "ip")
	curl := testenv.RequireTool(t, "curl")
	mpub := testenv.RequireTool(t, "mosquitto_pub")
	p, err := netns.NewPath(netns.PathOptions{Bridge: true, Subnet: netip.MustParsePrefix("10.201.79.0/24")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	dst := p.Dst.String()

	dir := t.TempDir()
	var errb bytes.Buffer
	if code := run([]string{"certs", "ca", "--out", dir}, io.Discard, &errb); code != 0 {
		t.Fatalf("certs ca: %s", errb.String())
	}
	if code := run([]string{"certs", "device", "broker", "--ca-dir", dir, "--hosts", dst + ",127.0.0.1"}, io.Discard, &errb); code != 0 {
		t.Fatalf("certs device: %s", errb.String())
	}
	caPEM, err := os.ReadFile(filepath.Join(dir, "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)

	// The broker: defaults everywhere (listen :4433, MQTT over QUIC
	// :14567), plus MQTT/TCP; no --auth.
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	out := newLineWaiter(`^mqtt listening: mqtt://`)
	go out.consume(pr)
	logs := newSyncBuffer("")
	errc := make(chan error, 1)
	go func() {
		errc <- netns.Do(p.SinkNS, func() error {
			return runBroker(ctx, []string{"--config", "", "--cert", filepath.Join(dir, "broker.pem"), "--key", filepath.Join(dir, "broker-key.pem"),
				"--mqtt-tcp", ":1883", "--metrics-listen", ""}, pw, logs)
		})
		pw.Close()
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("broker: %v", err)
		}
	})
	select {
	case <-out.match:
	case err := <-errc:
		errc <- err
		t.Fatalf("broker ended: %v\n%s\n%s", err, out, logs.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("broker not listening after 30 s:\n%s", out)
	}

	inNS := func(ns string, name string, args ...string) (string, error) {
		cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer ccancel()
		b, err := exec.CommandContext(cctx, "ip", append([]string{"netns", "exec", ns, name}, args...)...).CombinedOutput()
		return string(b), err
	}
	post := func(ns, host string) (string, error) {
		return inNS(ns, curl, "-sS", "--max-time", "20", "--cacert", filepath.Join(dir, "ca.pem"), "-o", "-", "-w", "\nstatus=%{http_code}",
			"-X", "POST", "--data", "x", "https://"+net.JoinHostPort(host, "4433")+"/v1/topics/t")
	}
	mqttPub := func(ns, host string) (string, error) {
		return inNS(ns, mpub, "-h", host, "-p", "1883", "-t", "t", "-m", "x", "-q", "1", "-V", "mqttv5")
	}

	t.Run("loopback client served", func(t *testing.T) {
		if o, err := post(p.SinkNS, "127.0.0.1"); err != nil || !strings.Contains(o, "status=204") {
			t.Errorf("HTTP over TCP from loopback: %v\n%s", err, o)
		}
		if o, err := mqttPub(p.SinkNS, "127.0.0.1"); err != nil {
			t.Errorf("MQTT/TCP from loopback: %v\n%s", err, o)
		}
	})
	t.Run("TCP fallback refuses remote", func(t *testing.T) {
		o, err := post(p.GenNS, dst)
		if err != nil || !strings.Contains(o, "status=403") || !strings.Contains(o, "loopback clients only") {
			t.Errorf("want 403 with the reason: %v\n%s", err, o)
		}
	})
	t.Run("MQTT/TCP refuses remote", func(t *testing.T) {
		o, err := mqttPub(p.GenNS, dst)
		if err == nil || !strings.Contains(strings.ToLower(o), "not authori") {
			t.Errorf("want CONNACK not authorized: %v\n%s", err, o)
		}
	})
	// The QUIC clients get their UDP socket in the client namespace.
	quicClient := func(t *testing.T, url string) error {
		var pc net.PacketConn
		if err := netns.Do(p.GenNS, func() (err error) {
			pc, err = net.ListenUDP("udp4", nil)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		defer pc.Close()
		c, err := client.New(client.Options{Broker: url, RootCAs: pool, PacketConn: pc, ClientID: "remote-1"})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer ccancel()
		_, err = c.Publish(cctx, "t", []byte("x"), client.PublishOptions{QoS: 1})
		return err
	}
	t.Run("HTTP/3 refuses remote", func(t *testing.T) {
		err := quicClient(t, "https://"+net.JoinHostPort(dst, "4433"))
		if err == nil || !strings.Contains(err.Error(), "403") || !strings.Contains(err.Error(), "loopback clients only") {
			t.Errorf("want 403 with the reason, got %v", err)
		}
	})
	t.Run("MQTT over QUIC refuses remote", func(t *testing.T) {
		err := quicClient(t, "mqtt-quic://"+net.JoinHostPort(dst, "14567"))
		if err == nil || !strings.Contains(strings.ToLower(err.Error()), "not authori") {
			t.Errorf("want CONNACK not authorized, got %v", err)
		}
	})
	if !strings.Contains(logs.String(), "loopback clients only") {
		t.Errorf("start-up log does not say the broker serves loopback clients only:\n%s", logs.String())
	}
}

// TestBrokerAuthModes checks the start-up choice: --dev and
// --allow-anonymous open the broker and say so loudly; --allow-anonymous
// with --auth is a usage error.
func TestBrokerAuthModes(t *testing.T) {
	for _, tc := range []struct {
		name     string
		f        brokerFlags
		loopback bool
		open     bool
		logged   string
	}{
		{"none", brokerFlags{}, true, true, "loopback clients only"},
		{"dev", brokerFlags{dev: true}, false, true, "OPEN BROKER (--dev)"},
		{"allow-anonymous", brokerFlags{allowAnon: true}, false, true, "OPEN BROKER (--allow-anonymous)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log, logs := testLogger()
			a, err := tc.f.authenticator(log)
			if err != nil {
				t.Fatal(err)
			}
			if a.LoopbackOnlyMode() != tc.loopback || a.IsOpen() != tc.open {
				t.Errorf("loopback-only %v open %v", a.LoopbackOnlyMode(), a.IsOpen())
			}
			if !strings.Contains(logs.String(), tc.logged) {
				t.Errorf("log %q lacks %q", logs.String(), tc.logged)
			}
		})
	}
	f := brokerFlags{allowAnon: true, authFile: "acl.toml"}
	if _, err := f.authenticator(slog.New(slog.DiscardHandler)); err == nil {
		t.Error("--allow-anonymous with --auth accepted")
	}
}

// testLogger logs to a buffer (syncBuffer of cmd_pubsub_test.go).
func testLogger() (*slog.Logger, *syncBuffer) {
	b := newSyncBuffer("")
	return slog.New(slog.NewTextHandler(b, nil)), b
}
