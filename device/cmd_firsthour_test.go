package main

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quiot/quiot/device/client"
)

// A new user's first hour (issue 26): what pub and sub say when the broker
// is not there or not trusted, and what broker --dev gives clients.

// devBroker is a `quiot broker --dev` run in-process.
type devBroker struct {
	fingerprint string // as printed
	certFile    string // --dev-cert-out
	https       string // https://ADDR
	mqttQUIC    string // mqtt-quic://ADDR
	mqtts       string // mqtts://ADDR
	stdout      string // the lines read until ready
}

// startDevBroker runs `quiot broker --dev` on loopback ports with an MQTT
// over QUIC and an MQTT over TLS listener, plus args, and waits until it
// printed all its addresses. The broker stops at the end of the test.
func startDevBroker(t *testing.T, args ...string) *devBroker {
	t.Helper()
	d := &devBroker{certFile: filepath.Join(t.TempDir(), "dev-cert.pem")}
	all := append([]string{"--config", "", "--dev", "--listen", "127.0.0.1:0", "--log-level", "error"}, args...)
	all = loopbackBrokerArgs(append(all, "--dev-cert-out", d.certFile, "--mqtt-tls", "127.0.0.1:0")...)
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- runBroker(ctx, all, pw, io.Discard)
		pw.Close()
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Error("broker did not stop")
		}
	})
	sc := bufio.NewScanner(pr)
	var lines []string
	for (d.https == "" || d.mqttQUIC == "" || d.mqtts == "") && sc.Scan() {
		line := sc.Text()
		lines = append(lines, line)
		if _, fp, ok := strings.Cut(line, "fingerprint: "); ok {
			d.fingerprint = fp
		}
		for prefix, dst := range map[string]*string{"https://": &d.https, "mqtt-quic://": &d.mqttQUIC, "mqtts://": &d.mqtts} {
			if _, a, ok := strings.Cut(line, "listening: "+prefix); ok {
				a, _, _ = strings.Cut(a, " ")
				*dst = prefix + a
			}
		}
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	d.stdout = strings.Join(lines, "\n")
	if d.https == "" || d.mqttQUIC == "" || d.mqtts == "" || d.fingerprint == "" {
		cancel()
		t.Fatalf("broker not ready: %v; stdout:\n%s", <-done, d.stdout)
	}
	return d
}

// urls are the TLS broker URLs of d by scheme.
func (d *devBroker) urls() map[string]string {
	return map[string]string{"https": d.https, "mqtt-quic": d.mqttQUIC, "mqtts": d.mqtts}
}

// pubOnce runs `quiot pub` once (bounded by a generous test context) and
// returns its stderr and error.
func pubOnce(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	errOut := newSyncBuffer("")
	all := []string{"--config", "", "--topic", "firsthour/t", "--quiet"}
	if !strings.Contains(strings.Join(args, " "), "--payload-size") {
		all = append(all, "--payload", "hi")
	}
	all = append(all, args...)
	err := runPub(ctx, all, io.Discard, errOut)
	if ctx.Err() != nil {
		t.Fatalf("pub %v did not return by itself; stderr:\n%s", args, errOut)
	}
	return errOut.String(), err
}

// closedPort returns a loopback address on which nothing listens (for
// network "tcp" or "udp").
func closedPort(t *testing.T, network string) string {
	t.Helper()
	var addr string
	if network == "udp" {
		c, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr = c.LocalAddr().String()
		c.Close()
	} else {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr = l.Addr().String()
		l.Close()
	}
	return addr
}

// TestPubNoBrokerGivesUp: a one-shot pub at an address where no broker
// runs prints one warning with what to check, and gives up after
// --connect-timeout with an error (exit status 1), on every protocol. The
// old code printed nothing over MQTT and retried for ever.
func TestPubNoBrokerGivesUp(t *testing.T) {
	for _, tc := range []struct{ scheme, network string }{
		{"https", "udp"}, {"mqtt-quic", "udp"}, {"mqtt", "tcp"}, {"mqtts", "tcp"},
	} {
		t.Run(tc.scheme, func(t *testing.T) {
			url := tc.scheme + "://" + closedPort(t, tc.network)
			stderr, err := pubOnce(t, "--broker", url, "--insecure", "--connect-timeout", "1s")
			if err == nil || errors.Is(err, errUsage) || !errors.Is(err, client.ErrUnreachable) {
				t.Fatalf("pub: error %v, want one wrapping ErrUnreachable; stderr:\n%s", err, stderr)
			}
			if !strings.Contains(err.Error(), "is a broker running there?") {
				t.Errorf("error does not say what to check: %v", err)
			}
			if n := strings.Count(stderr, "level=WARN"); n != 1 {
				t.Errorf("%d warnings, want 1:\n%s", n, stderr)
			}
			if !strings.Contains(stderr, "couldn't connect to the broker") || !strings.Contains(stderr, "mqtt-quic://") {
				t.Errorf("warning does not say what failed and what to check:\n%s", stderr)
			}
		})
	}
}

// TestLongRunningNoBrokerWarnsOnce: a subscriber, and a pub without a
// bound (--count 0), keep retrying a broker that is not there and say so
// once: later attempts are debug lines.
func TestLongRunningNoBrokerWarnsOnce(t *testing.T) {
	for _, tc := range []struct {
		name    string
		run     func(context.Context, []string, io.Writer, io.Writer) error
		scheme  string
		network string
		args    []string
	}{
		{"sub mqtt", runSub, "mqtt", "tcp", []string{"--topic", "x/#"}},
		{"pub count 0 mqtt", runPub, "mqtt", "tcp", []string{"--topic", "x/y", "--payload", "hi", "--count", "0"}},
		// A QUIC attempt ends at the handshake idle timeout (seconds):
		// one retry after the warning is enough.
		{"pub count 0 https", runPub, "https", "udp", []string{"--topic", "x/y", "--payload", "hi", "--count", "0", "--insecure"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			errOut := newSyncBuffer("")
			done := make(chan error, 1)
			url := tc.scheme + "://" + closedPort(t, tc.network)
			args := append([]string{"--config", "", "--broker", url, "--log-level", "debug", "--max-backoff", "50ms", "--quiet"}, tc.args...)
			go func() { done <- tc.run(ctx, args, io.Discard, errOut) }()
			retries := 3
			if tc.network == "udp" {
				retries = 1
			}
			for strings.Count(errOut.String(), "still no connection to the broker") < retries {
				select {
				case err := <-done:
					t.Fatalf("ended: %v; stderr:\n%s", err, errOut)
				case <-ctx.Done():
					t.Fatalf("no repeated attempts logged; stderr:\n%s", errOut)
				case <-time.After(20 * time.Millisecond): // poll the log
				}
			}
			cancel()
			if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
				t.Logf("ended with %v", err)
			}
			s := errOut.String()
			if n := strings.Count(s, "level=WARN"); n != 1 || !strings.Contains(s, "retrying with backoff until it answers") {
				t.Fatalf("%d warnings, want 1 saying it keeps retrying:\n%s", n, s)
			}
		})
	}
}

// TestBrokerURLWithoutScheme: --broker localhost:4433 is a usage error
// that lists the schemes, not url's "first path segment" error.
func TestBrokerURLWithoutScheme(t *testing.T) {
	for _, b := range []string{"localhost:4433", "127.0.0.1:4433", "[::1]:1883"} {
		t.Run(b, func(t *testing.T) {
			_, err := pubOnce(t, "--broker", b)
			if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), "no scheme") {
				t.Fatalf("error %v, want a usage error saying there is no scheme", err)
			}
			for _, s := range []string{"https://", "mqtt-quic://", "mqtt://", "mqtts://"} {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error does not list %s: %v", s, err)
				}
			}
		})
	}
}

// TestDevBrokerTrust: against a --dev broker, a client without --ca fails
// at once naming the remedies; the certificate file the broker wrote works
// with --ca, and the printed fingerprint with --pin (with or without
// colons); a wrong pin is refused. On every TLS protocol.
func TestDevBrokerTrust(t *testing.T) {
	d := startDevBroker(t)
	if !strings.Contains(d.stdout, "dev certificate written to "+d.certFile) {
		t.Fatalf("certificate path not printed:\n%s", d.stdout)
	}
	if b, err := os.ReadFile(d.certFile); err != nil || !strings.HasPrefix(string(b), "-----BEGIN CERTIFICATE-----") || strings.Contains(string(b), "PRIVATE KEY") {
		t.Fatalf("certificate file: %v\n%s", err, b)
	}
	wrong := strings.Repeat("AB", 32)
	for scheme, url := range d.urls() {
		t.Run(scheme, func(t *testing.T) {
			t.Run("untrusted", func(t *testing.T) {
				stderr, err := pubOnce(t, "--broker", url)
				if err == nil || !strings.Contains(err.Error(), "--ca FILE") || !strings.Contains(err.Error(), "--pin") || !strings.Contains(err.Error(), "--insecure") {
					t.Fatalf("error %v does not name the remedies; stderr:\n%s", err, stderr)
				}
			})
			t.Run("ca file", func(t *testing.T) {
				if stderr, err := pubOnce(t, "--broker", url, "--ca", d.certFile); err != nil {
					t.Fatalf("pub --ca: %v; stderr:\n%s", err, stderr)
				}
			})
			t.Run("pin", func(t *testing.T) {
				for _, pin := range []string{d.fingerprint, strings.ToLower(strings.ReplaceAll(d.fingerprint, ":", ""))} {
					if stderr, err := pubOnce(t, "--broker", url, "--pin", pin); err != nil {
						t.Fatalf("pub --pin %s: %v; stderr:\n%s", pin, err, stderr)
					}
				}
			})
			t.Run("wrong pin", func(t *testing.T) {
				stderr, err := pubOnce(t, "--broker", url, "--pin", wrong)
				if !errors.Is(err, client.ErrPinMismatch) {
					t.Fatalf("pub with a wrong pin: %v, want ErrPinMismatch; stderr:\n%s", err, stderr)
				}
			})
		})
	}
}

// TestStreamPublishTooLargeEnds: a streamed publish over the broker's
// limit ends at once with the broker's reason (413 is final), naming the
// payload limit; the old code retried for ever, logging "qos 0" and the
// frame limit.
func TestStreamPublishTooLargeEnds(t *testing.T) {
	d := startDevBroker(t, "--max-payload", "1000")
	for _, qos := range []string{"0", "1"} {
		t.Run("qos"+qos, func(t *testing.T) {
			stderr, err := pubOnce(t, "--broker", d.https, "--ca", d.certFile, "--mode", "stream", "--qos", qos, "--payload-size", "5000", "--count", "3")
			if qos == "0" {
				// QoS 0 awaits no answer; the refusal may come after the run.
				if err != nil && !strings.Contains(err.Error(), "413") {
					t.Fatalf("pub: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), "413") || !strings.Contains(err.Error(), "limit of 1000 bytes") {
				t.Fatalf("pub: error %v, want 413 with the payload limit; stderr:\n%s", err, stderr)
			}
			if strings.Contains(stderr, "qos 0") {
				t.Errorf("a QoS 1 refusal logged as qos 0:\n%s", stderr)
			}
		})
	}
}

// TestStreamPublishForbiddenEnds: a streamed publish the ACL refuses (403
// is final) ends at once with the broker's reason instead of retrying.
func TestStreamPublishForbiddenEnds(t *testing.T) {
	acl := filepath.Join(t.TempDir(), "acl.toml")
	if err := os.WriteFile(acl, []byte("[anonymous]\npublish = [\"allowed/#\"]\nsubscribe = [\"#\"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDevBroker(t, "--auth", acl)
	stderr, err := pubOnce(t, "--broker", d.https, "--ca", d.certFile, "--mode", "stream", "--qos", "1", "--count", "3")
	if err == nil || !strings.Contains(err.Error(), "403") {
		t.Fatalf("pub: error %v, want 403; stderr:\n%s", err, stderr)
	}
	if strings.Contains(stderr, "retrying") {
		t.Errorf("a final refusal was retried:\n%s", stderr)
	}
}

// TestDevBrokerLoopback: --dev without --listen serves loopback only (as
// mosquitto 2 does with nothing configured), HTTP/3 and MQTT over QUIC.
func TestDevBrokerLoopback(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	args := loopbackBrokerArgs("--config", "", "--dev", "--log-level", "error")
	// loopbackBrokerArgs moved --mqtt-quic to port 0; --dev alone is the point.
	for i, a := range args {
		if strings.HasPrefix(a, "--mqtt-quic=") {
			args = append(args[:i], args[i+1:]...)
			break
		}
	}
	go func() {
		done <- runBroker(ctx, args, pw, io.Discard)
		pw.Close()
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	var h3, mq string
	sc := bufio.NewScanner(pr)
	for (h3 == "" || mq == "") && sc.Scan() {
		if _, a, ok := strings.Cut(sc.Text(), "listening: https://"); ok {
			h3, _, _ = strings.Cut(a, " ")
		}
		if _, a, ok := strings.Cut(sc.Text(), "listening: mqtt-quic://"); ok {
			mq, _, _ = strings.Cut(a, " ")
		}
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	if h3 == "" || mq == "" {
		cancel()
		err := <-done
		if err != nil && strings.Contains(err.Error(), "address already in use") {
			t.Skipf("the default ports are taken on this host (another broker runs): %v", err)
		}
		t.Fatalf("broker did not start: %v", err)
	}
	if h3 != "127.0.0.1:4433" || mq != "127.0.0.1:14567" {
		t.Fatalf("--dev listens on %s and %s, want 127.0.0.1:4433 and 127.0.0.1:14567", h3, mq)
	}
}

// TestDevBrokerKeepsDataDir: an explicit --data-dir wins over --dev's
// memory-only default: the broker keeps its state there.
func TestDevBrokerKeepsDataDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	startDevBroker(t, "--data-dir", dir)
	if _, err := os.Stat(filepath.Join(dir, "broker.db")); err != nil {
		t.Fatalf("--data-dir not used with --dev: %v", err)
	}
}
