package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/quiot/quiot/broker/brokertest"
	"github.com/quiot/quiot/broker/mqttquic"
	"github.com/quiot/quiot/broker/mqttquic/mqtttest"
	"github.com/quiot/quiot/device/client"
	"github.com/quiot/quiot/internal/qmetrics"
	"github.com/quiot/quiot/internal/testutil"
)

// subProc is a `quiot sub` running in this process.
type subProc struct {
	out, errOut *syncBuffer
	done        chan error
}

// startSubCmd runs `quiot sub args...` and waits until it has subscribed.
func startSubCmd(t *testing.T, ctx context.Context, args ...string) *subProc {
	t.Helper()
	return startSubCmdOut(t, ctx, "", args...)
}

// startSubCmdOut is startSubCmd whose p.out.seen is closed once the sub
// has printed outWant.
func startSubCmdOut(t *testing.T, ctx context.Context, outWant string, args ...string) *subProc {
	t.Helper()
	p := &subProc{out: newSyncBuffer(outWant), errOut: newSyncBuffer("msg=subscribed"), done: make(chan error, 1)}
	go func() { p.done <- runSub(ctx, append([]string{"--config", ""}, args...), p.out, p.errOut) }()
	select {
	case <-p.errOut.seen:
	case err := <-p.done:
		t.Fatalf("sub ended before subscribing: %v\n%s", err, p.errOut)
	case <-ctx.Done():
		t.Fatalf("sub not subscribed in time:\n%s", p.errOut)
	}
	return p
}

// wait waits for the sub to end by itself (--count).
func (p *subProc) wait(t *testing.T, ctx context.Context) {
	t.Helper()
	select {
	case err := <-p.done:
		if err != nil {
			t.Fatalf("sub: %v\n%s", err, p.errOut)
		}
	case <-ctx.Done():
		t.Fatalf("sub did not end after --count; printed %q\n%s", p.out, p.errOut)
	}
}

// subBroker is a broker of one protocol for `quiot sub` tests, with a
// publisher connected to it.
type subBroker struct {
	url, ca string
	pub     client.Client
}

func startSubBroker(t *testing.T, proto string) *subBroker {
	t.Helper()
	pki := testutil.NewPKI(t)
	var url string
	if proto == "h3" {
		url = brokertest.Start(t, pki, nil).URL
	} else {
		url = mqtttest.QUICURL(mqtttest.Start(t, pki, mqttquic.Options{}))
	}
	pub, err := client.New(client.Options{Broker: url, RootCAs: pki.Pool(), Logger: testutil.DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pub.Close() })
	ca := pki.CAFile(t)
	return &subBroker{url: url, ca: ca, pub: pub}
}

func (b *subBroker) publish(t *testing.T, ctx context.Context, topic, payload string, retain bool) {
	t.Helper()
	if _, err := b.pub.Publish(ctx, topic, []byte(payload), client.PublishOptions{QoS: 1, Retain: retain}); err != nil {
		t.Fatalf("publish %s: %v", topic, err)
	}
}

// TestSubOutput: what `quiot sub` prints through a real broker, HTTP/3 and
// MQTT over QUIC alike: text lines of the same five columns on both
// (topic seq latency kind payload; no seq on MQTT), -v lines "topic
// payload" as mosquitto_sub -v, raw payloads each followed by a newline,
// by --separator, or by nothing with -N. Each run gets a retained message
// first, then a live one; the summary and --metrics-out keep the retained
// one out of the latency.
func TestSubOutput(t *testing.T) {
	tests := []struct {
		name  string
		flags []string
		want  string // regexp of the whole output (SEQ: the protocol's sequence column)
	}{
		// SEQ: a number on HTTP/3, "-" on MQTT (no sequence numbers).
		{"text", nil, `^out/r SEQ \d+\.\d{3}ms retained 21\.5\nout/l SEQ \d+\.\d{3}ms live hot stuff\n$`},
		{"-v", []string{"-v"}, `^out/r 21\.5\nout/l hot stuff\n$`},
		{"raw", []string{"--format", "raw"}, `^21\.5\nhot stuff\n$`},
		{"raw separator", []string{"--format", "raw", "--separator", `\x00`}, `^21\.5\x00hot stuff\x00$`},
		{"raw -N", []string{"--format", "raw", "-N"}, `^21\.5hot stuff$`},
		{"-v -N", []string{"-v", "-N"}, `^out/r 21\.5out/l hot stuff$`},
	}
	for _, proto := range []string{"h3", "mqtt-quic"} {
		t.Run(proto, func(t *testing.T) {
			b := startSubBroker(t, proto)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			b.publish(t, ctx, "out/r", "21.5", true)
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					metrics := filepath.Join(t.TempDir(), "sub.json")
					args := append([]string{"--broker", b.url, "--ca", b.ca, "--topic", "out/#", "--count", "2", "--metrics-out", metrics}, tt.flags...)
					p := startSubCmdOut(t, ctx, "21.5", args...)
					// The retained message first: over MQTT the broker sends
					// it after the SUBACK, and a live message published
					// meanwhile may come before it.
					select {
					case <-p.out.seen:
					case <-ctx.Done():
						t.Fatalf("no retained message printed; printed %q\n%s", p.out, p.errOut)
					}
					b.publish(t, ctx, "out/l", "hot stuff", false)
					p.wait(t, ctx)
					seq := map[string]string{"h3": `\d+`, "mqtt-quic": `-`}[proto]
					want := strings.ReplaceAll(tt.want, "SEQ", seq)
					if !regexp.MustCompile(want).MatchString(p.out.String()) {
						t.Fatalf("output %q, want %s", p.out, want)
					}
					if want := "received 2 message(s) on out/#"; !strings.Contains(p.errOut.String(), want) {
						t.Fatalf("summary: want %q in\n%s", want, p.errOut)
					}
					if want := "; 1 live, 0 replayed, 1 retained; latency p50"; !strings.Contains(p.errOut.String(), want) {
						t.Fatalf("summary: want %q in\n%s", want, p.errOut)
					}
					m, err := qmetrics.ReadFile(metrics)
					if err != nil {
						t.Fatal(err)
					}
					if m.MessagesReceived != 2 || m.Diag.LatencyCount != 1 || len(m.LatenciesMs) != 1 || m.Diag.Retained != 1 || m.Diag.Replayed != 0 {
						t.Fatalf("metrics: received %d, latency count %d (%d samples), retained %d, replayed %d; want 2, 1 (1), 1, 0",
							m.MessagesReceived, m.Diag.LatencyCount, len(m.LatenciesMs), m.Diag.Retained, m.Diag.Replayed)
					}
				})
			}
		})
	}
}

// TestSubSince: `quiot sub --since 0` replays from the first message the
// broker's history holds, --since N from N+1; replayed messages are marked
// in the output and kept out of the latency summary and --metrics-out,
// which count live messages only. Over MQTT (no history) --since is
// refused.
func TestSubSince(t *testing.T) {
	b := startSubBroker(t, "h3")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i := range 3 {
		b.publish(t, ctx, "hist/x", fmt.Sprint("old", i), false)
	}
	live := 0
	tests := []struct {
		since string
		want  []string // payloads, replayed first
	}{
		{"2", []string{"old2"}},
		{"0", []string{"old0", "old1", "old2", "live0"}}, // live0: the live message of "since 2"
	}
	for _, tt := range tests {
		t.Run("since "+tt.since, func(t *testing.T) {
			metrics := filepath.Join(t.TempDir(), "sub.json")
			n := len(tt.want) + 1
			p := startSubCmd(t, ctx, "--broker", b.url, "--ca", b.ca, "--topic", "hist/#", "--since", tt.since,
				"--count", fmt.Sprint(n), "--format", "json", "--metrics-out", metrics)
			payload := fmt.Sprint("live", live)
			live++
			b.publish(t, ctx, "hist/x", payload, false)
			p.wait(t, ctx)
			var got []string
			for i, line := range strings.Split(strings.TrimSuffix(p.out.String(), "\n"), "\n") {
				var j subJSON
				if err := json.Unmarshal([]byte(line), &j); err != nil || j.Payload == nil {
					t.Fatalf("line %q: %v", line, err)
				}
				if j.Replayed != (i < len(tt.want)) {
					t.Fatalf("line %d %q: replayed %v, want %v", i, line, j.Replayed, i < len(tt.want))
				}
				got = append(got, *j.Payload)
			}
			if want := append(tt.want, payload); strings.Join(got, ",") != strings.Join(want, ",") {
				t.Fatalf("payloads %q, want %q", got, want)
			}
			if want := fmt.Sprintf("received %d message(s) on hist/#", n); !strings.Contains(p.errOut.String(), want) {
				t.Fatalf("summary: want %q in\n%s", want, p.errOut)
			}
			if want := fmt.Sprintf("; 1 live, %d replayed, 0 retained; latency p50", len(tt.want)); !strings.Contains(p.errOut.String(), want) {
				t.Fatalf("summary: want %q in\n%s", want, p.errOut)
			}
			m, err := qmetrics.ReadFile(metrics)
			if err != nil {
				t.Fatal(err)
			}
			if m.MessagesReceived != uint64(n) || m.Diag.LatencyCount != 1 || m.Diag.Replayed != uint64(len(tt.want)) {
				t.Fatalf("metrics: received %d, latency count %d, replayed %d; want %d, 1, %d",
					m.MessagesReceived, m.Diag.LatencyCount, m.Diag.Replayed, n, len(tt.want))
			}
		})
	}
	t.Run("mqtt", func(t *testing.T) {
		mb := startSubBroker(t, "mqtt-quic")
		err := runSub(ctx, []string{"--config", "", "--broker", mb.url, "--ca", mb.ca, "--topic", "hist/#", "--since", "0", "--quiet"}, &syncBuffer{}, &syncBuffer{})
		if err == nil || !strings.Contains(err.Error(), "HTTP/3 only") {
			t.Fatalf("sub --since 0 over MQTT = %v, want an HTTP/3-only error", err)
		}
	})
}

// TestParseSeparator: --separator takes Go escapes; a raw newline (what a
// config file's separator = "\n" arrives as) stands for itself.
func TestParseSeparator(t *testing.T) {
	tests := []struct {
		in, want string
		ok       bool
	}{
		{`\n`, "\n", true},
		{"\n", "\n", true},
		{`\x00`, "\x00", true},
		{`, `, ", ", true},
		{`"`, `"`, true},
		{"", "", true},
		{`\q`, "", false},
	}
	for _, tt := range tests {
		got, err := parseSeparator(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("parseSeparator(%q) = %q, %v; want %q, ok %v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}
