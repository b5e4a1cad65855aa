package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quiot/quiot/device/client"
	"github.com/quiot/quiot/device/client/inorder"
	"github.com/quiot/quiot/internal/certs"
	"github.com/quiot/quiot/internal/quictune"
	"github.com/quiot/quiot/internal/spool"
)

// freePort returns a port free on 127.0.0.1 for both UDP and TCP now.
func freePort(t *testing.T) int {
	t.Helper()
	for range 20 {
		u, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		p := u.LocalAddr().(*net.UDPAddr).Port
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		_ = u.Close()
		if err == nil {
			_ = l.Close()
			return p
		}
	}
	t.Fatal("no free port")
	return 0
}

// startBrokerProc runs `quiot broker args...` and waits until it listens.
func startBrokerProc(t *testing.T, args ...string) *childProc {
	t.Helper()
	p := startChild(t, false, append([]string{"broker"}, args...)...)
	p.stdout.wait(t, regexp.MustCompile(`^mqtt listening: `), 30*time.Second)
	return p
}

func logLevel() string {
	if os.Getenv("QUIOT_FAULT_DEBUG") != "" {
		return "debug"
	}
	return "warn"
}

// TestBrokerKill9 kills a real `quiot broker` process with SIGKILL while
// three publishers (HTTP/3 and MQTT over QUIC, QoS 1, retrying until
// acknowledged; and HTTP/3 through the on-disk spool) stream to it, and
// starts it again on the same data directory and ports. Every message
// acknowledged to a publisher reaches both subscribers (HTTP/3 with
// resume, MQTT with a persistent session), in order per topic, with no
// gap; duplicates appear only as QoS 1 allows (a publisher's retry of a
// message whose acknowledgement the kill cut off, or an MQTT redelivery).
func TestBrokerKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the broker kill -9 fault test runs two broker processes")
	}
	dir := t.TempDir()
	ca, err := certs.NewCA("fault test CA", nil)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := ca.Issue("localhost", nil)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := filepath.Join(dir, "broker.crt"), filepath.Join(dir, "broker.key")
	if err := certs.WriteFiles(certFile, srv.CertPEM, keyFile, srv.KeyPEM); err != nil {
		t.Fatal(err)
	}
	h3Port, mqPort := freePort(t), freePort(t)
	args := []string{"--config", "", "--cert", certFile, "--key", keyFile,
		"--listen", fmt.Sprintf("127.0.0.1:%d", h3Port), "--mqtt-quic", fmt.Sprintf("127.0.0.1:%d", mqPort),
		"--mqtt-tcp", "", "--metrics-listen", "", "--data-dir", filepath.Join(dir, "state"), "--log-level", logLevel()}
	p := startBrokerProc(t, args...)

	h3URL := fmt.Sprintf("https://127.0.0.1:%d", h3Port)
	mqURL := fmt.Sprintf("mqtt-quic://127.0.0.1:%d", mqPort)
	newClient := func(url, id string) client.Client {
		// A client that sends a request after the kill gets a stateless
		// reset from the restarted broker (the data directory keeps the
		// key) and reconnects at once. An idle subscriber sends nothing
		// but keep-alive PINGs, too small for a stateless reset: a short
		// idle timeout ends its dead connection (30 s by default).
		prof := &quictune.Profile{Name: "fault", MaxIdleTimeout: quictune.Duration(4 * time.Second), KeepAlivePeriod: quictune.Duration(2 * time.Second)}
		c, err := client.New(client.Options{Broker: url, RootCAs: ca.Pool(), ClientID: id, Reconnect: true, MaxBackoff: 250 * time.Millisecond, Tuning: prof, Logger: clientLog(t, id)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()

	// Each subscriber checks its messages arrive in order per topic, with no
	// gap, and takes a repeated counter for a duplicate: a publisher below
	// publishes a message again, with a new send time, when the kill cut off
	// its acknowledgement.
	subs := map[string]*inorder.Counter{"h3": inorder.New(inorder.Options{RepeatsByValue: true}), "mqtt": inorder.New(inorder.Options{RepeatsByValue: true})}
	var probed sync.Map // subscriber name -> true once a probe reached it
	for name, url := range map[string]string{"h3": h3URL, "mqtt": mqURL} {
		c := newClient(url, "fault-sub-"+name)
		r := subs[name]
		go func() {
			_ = c.Subscribe(ctx, "fault/#", 0, func(m client.Message) {
				if m.Topic == "fault/probe" && !m.Gap {
					probed.Store(name, true)
					return
				}
				r.Handle(m)
			})
		}()
	}
	// Both subscriptions are live once a probe reaches them.
	probe := newClient(h3URL, "")
	for live := false; !live; {
		if _, err := probe.Publish(ctx, "fault/probe", []byte("-1"), client.PublishOptions{QoS: 1}); err != nil {
			t.Fatal(err)
		}
		_, h3Live := probed.Load("h3")
		_, mqLive := probed.Load("mqtt")
		live = h3Live && mqLive
		if ctx.Err() != nil {
			t.Fatal("subscriptions not live")
		}
		time.Sleep(20 * time.Millisecond) // probe interval while the subscriptions start
	}

	start := time.Now()
	const total, killAt = 300, 100
	var acked sync.Map // topic -> []int acknowledged counters (in order)
	var wg sync.WaitGroup
	var killOnce sync.Once
	killed := make(chan struct{})
	ackCount := make(chan struct{}, 2*total)
	for _, pub := range []struct{ name, url string }{{"h3", h3URL}, {"mqtt", mqURL}} {
		c := newClient(pub.url, "fault-pub-"+pub.name)
		topic := "fault/" + pub.name
		wg.Go(func() {
			var mine []int
			defer func() { acked.Store(topic, mine) }()
			for i := range total {
				for {
					actx, acancel := context.WithTimeout(ctx, 10*time.Second)
					_, err := c.Publish(actx, topic, []byte(strconv.Itoa(i)), client.PublishOptions{QoS: 1})
					acancel()
					if err == nil {
						break
					}
					if ctx.Err() != nil {
						t.Errorf("%s publisher: message %d never acknowledged: %v", pub.name, i, err)
						return
					}
					// Not acknowledged (the broker was killed): publish it again.
				}
				mine = append(mine, i)
				ackCount <- struct{}{}
			}
		})
	}
	// A third publisher goes through the on-disk spool (internal/spool):
	// Publish returns once a message is spooled; the spool delivers in
	// order and retries across the kill.
	sp, err := client.NewSpooled(client.Options{Broker: h3URL, RootCAs: ca.Pool(), MaxBackoff: 250 * time.Millisecond, Logger: clientLog(t, "fault-pub-spool")},
		spool.Options{Dir: filepath.Join(dir, "spool"), Logger: clientLog(t, "spool")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sp.Close() })
	wg.Go(func() {
		var mine []int
		defer func() { acked.Store("fault/spool", mine) }()
		for i := range total {
			if _, err := sp.Publish(ctx, "fault/spool", []byte(strconv.Itoa(i)), client.PublishOptions{QoS: 1}); err != nil {
				t.Errorf("spooled publisher: message %d not spooled: %v", i, err)
				return
			}
			mine = append(mine, i)
			time.Sleep(time.Millisecond) // a steady stream across the kill, not a burst before it
		}
		if err := sp.Drain(ctx); err != nil {
			t.Errorf("spool not drained: %v", err)
		}
	})
	// Kill mid-stream, once killAt messages are acknowledged in all.
	go func() {
		for range killAt {
			select {
			case <-ackCount:
			case <-ctx.Done():
				return
			}
		}
		killOnce.Do(func() {
			p.kill()
			close(killed)
		})
	}()
	select {
	case <-killed:
	case <-ctx.Done():
		t.Fatal("the publishers did not reach the kill point")
	}
	t.Logf("killed after %v", time.Since(start))
	startBrokerProc(t, args...)
	t.Logf("restarted after %v", time.Since(start))
	wg.Wait()
	t.Logf("all acknowledged after %v", time.Since(start))
	if t.Failed() {
		return
	}

	// Every acknowledged message reaches both subscribers.
	for _, topic := range []string{"fault/h3", "fault/mqtt", "fault/spool"} {
		v, _ := acked.Load(topic)
		if want := v.([]int); len(want) != total {
			t.Fatalf("%s: %d acknowledged, want %d", topic, len(want), total)
		}
		for name, r := range subs {
			r.WaitTopic(t, topic, total, 60*time.Second)
			t.Logf("%s subscriber, %s: all delivered after %v", name, topic, time.Since(start))
		}
	}
	t.Logf("all delivered after %v", time.Since(start))
	for name, r := range subs {
		r.Check(t, map[string]int{"fault/h3": total, "fault/mqtt": total, "fault/spool": total})
		t.Logf("%s subscriber: %d duplicates", name, r.Dups())
	}
}

// clientLog logs a client's warnings and errors through t (QUIOT_FAULT_DEBUG=1: everything).
func clientLog(t *testing.T, id string) *slog.Logger {
	lvl := slog.LevelWarn
	if os.Getenv("QUIOT_FAULT_DEBUG") != "" {
		lvl = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: lvl})).With("client", id)
}

// tWriter writes to t.Log.
type tWriter struct{ t *testing.T }

func (w tWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(b), "\n"))
	return len(b), nil
}
