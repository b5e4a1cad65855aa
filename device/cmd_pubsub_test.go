package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quiot/quiot/broker/brokertest"

	"github.com/quiot/quiot/device/client"
	"github.com/quiot/quiot/internal/qmetrics"
	"github.com/quiot/quiot/internal/quictune"
	"github.com/quiot/quiot/internal/testutil"
)

// syncBuffer is a goroutine-safe bytes.Buffer that signals when a line
// containing want appears.
type syncBuffer struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	want string
	seen chan struct{}
	once sync.Once
}

func newSyncBuffer(want string) *syncBuffer {
	return &syncBuffer{want: want, seen: make(chan struct{})}
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n, err := b.buf.Write(p)
	if b.want != "" && strings.Contains(b.buf.String(), b.want) {
		b.once.Do(func() { close(b.seen) })
	}
	return n, err
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestPubSubCommands(t *testing.T) {
	for _, mode := range []string{"request", "stream"} {
		t.Run(mode, func(t *testing.T) {
			b := brokertest.Start(t, nil, nil)
			ca := b.PKI.CAFile(t)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()

			dir := t.TempDir()
			subMetrics, pubMetrics := filepath.Join(dir, "sub.json"), filepath.Join(dir, "pub.json")
			subOut := newSyncBuffer("")
			subErr := newSyncBuffer("msg=subscribed")
			subDone := make(chan error, 1)
			go func() {
				subDone <- runSub(ctx, []string{"--config", "", "--broker", b.URL, "--ca", ca, "--topic", "cli/#", "--count", "5", "--format", "json", "--metrics-out", subMetrics}, subOut, subErr)
			}()
			select {
			case <-subErr.seen:
			case err := <-subDone:
				t.Fatalf("sub ended early: %v; stderr: %s", err, subErr)
			case <-ctx.Done():
				t.Fatalf("sub did not subscribe; stderr: %s", subErr)
			}
			var pubOut, pubErr bytes.Buffer
			err := runPub(ctx, []string{"--config", "", "--broker", b.URL, "--ca", ca, "--topic", "cli/x", "--payload", "hello", "--count", "5", "--rate", "200", "--mode", mode, "--metrics-out", pubMetrics}, &pubOut, &pubErr)
			if err != nil {
				t.Fatalf("pub: %v; stderr: %s", err, pubErr.String())
			}
			if !strings.Contains(pubOut.String(), "published 5 message(s) to cli/x") || !strings.Contains(pubOut.String(), "time to first data") {
				t.Fatalf("pub summary: %q", pubOut.String())
			}
			select {
			case err := <-subDone:
				if err != nil {
					t.Fatalf("sub: %v", err)
				}
			case <-ctx.Done():
				t.Fatalf("sub did not exit after --count; out: %s", subOut)
			}
			sc := bufio.NewScanner(strings.NewReader(subOut.String()))
			n := 0
			var last uint64
			for sc.Scan() {
				var j subJSON
				if err := json.Unmarshal(sc.Bytes(), &j); err != nil {
					t.Fatalf("line %q: %v", sc.Text(), err)
				}
				if j.Topic != "cli/x" || j.Payload == nil || *j.Payload != "hello" || j.Seq <= last || j.LatencyMS == nil || *j.LatencyMS <= 0 {
					t.Fatalf("line %q: want topic cli/x, payload hello, rising seq, latency_ms", sc.Text())
				}
				last = j.Seq
				n++
			}
			if n != 5 {
				t.Fatalf("sub printed %d lines, want 5:\n%s", n, subOut)
			}
			if !strings.Contains(subErr.String(), "received 5 message(s)") {
				t.Fatalf("sub summary missing: %s", subErr)
			}
			checkRoleMetrics(t, pubMetrics, subMetrics)
		})
	}
}

func TestPubStopsOnSignal(t *testing.T) {
	b := brokertest.Start(t, nil, nil)
	ca := b.PKI.CAFile(t)
	ctx, cancel := context.WithCancel(context.Background())
	out := newSyncBuffer("")
	// A long run gives back its start-up pages after the first publish
	// (internal/startpages; its own test checks that pages go).
	errOut := newSyncBuffer("msg=\"start-up pages released\"")
	done := make(chan error, 1)
	go func() {
		done <- runPub(ctx, []string{"--config", "", "--broker", b.URL, "--ca", ca, "--topic", "sig/x", "--payload-size", "32", "--count", "0", "--rate", "50", "--log-level", "debug"}, out, errOut)
	}()
	select {
	case <-errOut.seen: // published, pages released
	case err := <-done:
		t.Fatalf("pub ended early: %v; %s", err, errOut)
	}
	cancel() // what SIGINT/SIGTERM do through main's context
	if err := <-done; err != nil {
		t.Fatalf("pub after cancel = %v, want a clean exit", err)
	}
	if !strings.Contains(out.String(), "interrupted") {
		t.Fatalf("summary %q does not say interrupted", out)
	}
}

func TestPubSubUsageErrors(t *testing.T) {
	tests := []struct {
		name string
		run  func(context.Context, []string, io.Writer, io.Writer) error
		args []string
		want string
	}{
		{"pub no topic", runPub, []string{"--payload", "x"}, "--topic is required"},
		{"pub no payload", runPub, []string{"--topic", "a"}, "--payload"},
		{"pub both payloads", runPub, []string{"--topic", "a", "--payload", "x", "--payload-size", "3"}, "exclude"},
		{"pub bad qos", runPub, []string{"--topic", "a", "--payload", "x", "--qos", "2"}, "--qos 2"},
		{"pub bad mode", runPub, []string{"--topic", "a", "--payload", "x", "--mode", "burst"}, "--mode"},
		{"pub cert without key", runPub, []string{"--topic", "a", "--payload", "x", "--cert", "c.pem"}, "--cert and --key"},
		{"pub insecure and ca", runPub, []string{"--topic", "a", "--payload", "x", "--insecure", "--ca", "x.pem"}, "exclude"},
		{"pub bad scheme", runPub, []string{"--topic", "a", "--payload", "x", "--broker", "ftp://h"}, "unsupported broker URL scheme"},
		{"pub bad tuning", runPub, []string{"--topic", "a", "--payload", "x", "--tuning", "/nonexistent.toml"}, "tuning"},
		{"pub stdin and payload", runPub, []string{"--topic", "a", "--payload", "x", "--stdin"}, "--stdin replaces"},
		{"pub stdin and sensor", runPub, []string{"--topic", "a", "--stdin", "--sensor", "thermal"}, "--stdin replaces"},
		{"pub spool flag without spool", runPub, []string{"--topic", "a", "--payload", "x", "--spool-fsync", "always"}, "needs --spool"},
		{"pub bad spool fsync", runPub, []string{"--topic", "a", "--payload", "x", "--spool", "d", "--spool-fsync", "sometimes"}, "--spool-fsync"},
		{"pub bad spool size", runPub, []string{"--topic", "a", "--payload", "x", "--spool", "d", "--spool-max-bytes", "0"}, "--spool-max-bytes"},
		{"sub no topic", runSub, nil, "--topic is required"},
		{"sub bad format", runSub, []string{"--topic", "a", "--format", "xml"}, "--format"},
		{"sub negative count", runSub, []string{"--topic", "a", "--count", "-1"}, "--count"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			err := tt.run(context.Background(), append([]string{"--config", ""}, tt.args...), &out, &errOut)
			if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want a usage error containing %q", err, tt.want)
			}
		})
	}
}

func TestSubFormats(t *testing.T) {
	sent := time.Unix(1700000000, 0)
	msgs := []client.Message{
		{Topic: "a/b", Seq: 7, Sent: sent, Received: sent.Add(1500 * time.Microsecond), Payload: []byte("hi")},
		{Topic: "a/c", Seq: 8, Payload: []byte{0xff, 0x00}, Retained: true},
		{Topic: "a/b", Seq: 12, Gap: true},
		{Topic: "a b", Seq: 9, Payload: []byte("x\ty"), Replayed: true},
		{Topic: "m/q", Sent: sent, Received: sent.Add(2 * time.Millisecond), Payload: []byte("1\n2")}, // MQTT: no seq
		{Gap: true},
		{Topic: "-"},
	}
	tests := []struct {
		format string
		want   string
	}{
		{"text", "a/b 7 1.500ms live hi\na/c 8 - retained <2 bytes>\na/b - - gap messages lost before #12\n" +
			"\"a b\" 9 - replayed x\ty\nm/q - 2.000ms live <3 bytes>\n- - - gap messages lost\n\"-\" - - live \n"},
		{"json", `{"topic":"a/b","seq":7,"payload":"hi","time":1700000000000000000,"latency_ms":1.5}` + "\n" +
			`{"topic":"a/c","seq":8,"payload_base64":"/wA=","retained":true}` + "\n" +
			`{"topic":"a/b","seq":12,"gap":true}` + "\n" +
			`{"topic":"a b","seq":9,"payload":"x\ty","replayed":true}` + "\n" +
			`{"topic":"m/q","seq":0,"payload":"1\n2","time":1700000000000000000,"latency_ms":2}` + "\n" +
			`{"topic":"","seq":0,"gap":true}` + "\n" +
			`{"topic":"-","seq":0,"payload":""}` + "\n"},
		{"raw", "hi\n\xff\x00\nx\ty\n1\n2\n\n"},
		{"raw -N", "hi\xff\x00x\ty1\n2"},
		{"-v", "a/b hi\na/c \xff\x00\na b x\ty\nm/q 1\n2\n- \n"},
		{"none", ""},
	}
	for _, tt := range tests {
		t.Run(tt.format, func(t *testing.T) {
			var buf bytes.Buffer
			p := &subPrinter{w: bufio.NewWriter(&buf), format: tt.format, sep: "\n"}
			switch tt.format {
			case "raw -N":
				p.format, p.sep = "raw", ""
			case "-v":
				p.format, p.verbose = "text", true
			}
			for i := range msgs {
				if err := p.print(&msgs[i]); err != nil {
					t.Fatal(err)
				}
			}
			if buf.String() != tt.want {
				t.Fatalf("output\n%q\nwant\n%q", buf.String(), tt.want)
			}
		})
	}
}

func TestMakePayload(t *testing.T) {
	tests := []struct {
		text    string
		textSet bool
		size    int
		want    string
		wantErr bool
	}{
		{"hello", true, -1, "hello", false},
		{"", true, -1, "", false},
		{"", false, 5, "quiot", false},
		{"", false, 0, "", false},
		{"", false, 16, "quiot-payload-qu", false},
		{"x", true, 3, "", true},
		{"", false, -1, "", true},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%q/%v/%d", tt.text, tt.textSet, tt.size), func(t *testing.T) {
			got, err := makePayload(tt.text, tt.textSet, tt.size)
			if (err != nil) != tt.wantErr || (err == nil && string(got) != tt.want) {
				t.Fatalf("makePayload = %q, %v; want %q (error %v)", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestDemo(t *testing.T) {
	var out bytes.Buffer
	err := demo(context.Background(), demoPlan{count: 5, rate: 200, mode: "stream", tuning: quictune.Lean(), timeout: 20 * time.Second}, &out, testutil.DiscardLogger())
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	s := out.String()
	if n := strings.Count(s, "sub      demo/sensor-1/temperature"); n != 5 {
		t.Fatalf("demo printed %d deliveries, want 5:\n%s", n, s)
	}
	if !strings.Contains(s, "summary  5/5 delivered in order") {
		t.Fatalf("demo summary missing:\n%s", s)
	}
}

// checkRoleMetrics checks the --metrics-out files of a 5-message run.
func checkRoleMetrics(t *testing.T, pubFile, subFile string) {
	t.Helper()
	pm, err := qmetrics.ReadFile(pubFile)
	if err != nil {
		t.Fatal(err)
	}
	sm, err := qmetrics.ReadFile(subFile)
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		name string
		ok   bool
	}{
		{"pub role/proto", pm.Role == "pub" && pm.Proto == "h3"},
		{"pub messages_sent", pm.MessagesSent == 5},
		{"pub handshake_ms", pm.HandshakeMs > 0},
		{"pub ttfd_ms >= handshake_ms", pm.TTFDMs >= pm.HandshakeMs},
		{"pub wire", pm.WireBytes > 0 && pm.WireDatagrams > 0 && pm.Diag.Wire.BytesSent > 0},
		{"pub frames", pm.Diag.FramesSent["STREAM"] > 0 || len(pm.Diag.FramesSent) > 0},
		{"pub memory", pm.PeakRSSKiB > 0},
		{"sub role", sm.Role == "sub"},
		{"sub messages_received", sm.MessagesReceived == 5},
		{"sub latency", sm.LatencyMs.P50 > 0 && sm.LatencyMs.Max >= sm.LatencyMs.P99 && len(sm.LatenciesMs) == 5},
		{"sub delivery", sm.DeliveryRatio == 1 && sm.CompletionS > 0 && sm.ThroughputMsgsS > 0},
		{"sub wire", sm.WireBytes > 0 && sm.WireDatagrams > 0},
		{"sub handshake_ms", sm.HandshakeMs > 0},
	}
	for _, c := range checks {
		if !c.ok {
			t.Errorf("metrics: %s wrong\npub: %+v\nsub: %+v", c.name, pm, sm)
		}
	}
}

func TestSubStopsOnSignal(t *testing.T) {
	b := brokertest.Start(t, nil, nil)
	ca := b.PKI.CAFile(t)
	ctx, cancel := context.WithCancel(context.Background())
	metrics := filepath.Join(t.TempDir(), "sub.json")
	errOut := newSyncBuffer("msg=subscribed")
	done := make(chan error, 1)
	go func() {
		done <- runSub(ctx, []string{"--config", "", "--broker", b.URL, "--ca", ca, "--topic", "#", "--metrics-out", metrics}, io.Discard, errOut)
	}()
	select {
	case <-errOut.seen:
	case err := <-done:
		t.Fatalf("sub ended early: %v; %s", err, errOut)
	}
	cancel() // what SIGINT/SIGTERM do through main's context
	if err := <-done; err != nil {
		t.Fatalf("sub after cancel = %v, want a clean exit", err)
	}
	if !strings.Contains(errOut.String(), "received 0 message(s) on #") {
		t.Fatalf("summary missing: %s", errOut)
	}
	if _, err := qmetrics.ReadFile(metrics); err != nil {
		t.Fatalf("metrics not written on a signal: %v", err)
	}
}

// TestPubStdinSpool: `pub --stdin --spool` publishes one message a line
// (blank lines skipped) in order and ends once the spool has drained; a
// second run on the same spool with empty input has nothing left to do.
func TestPubStdinSpool(t *testing.T) {
	b := brokertest.Start(t, nil, nil)
	ca := b.PKI.CAFile(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sub, err := client.New(client.Options{Broker: b.URL, RootCAs: b.PKI.Pool(), Logger: testutil.DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	got := make(chan string, 10)
	ready := make(chan struct{})
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	go sub.Subscribe(client.WithSubscribed(sctx, func() { close(ready) }), "lines/x", 0, func(m client.Message) { got <- string(m.Payload) })
	<-ready
	dir := filepath.Join(t.TempDir(), "spool")
	args := []string{"--config", "", "--broker", b.URL, "--ca", ca, "--topic", "lines/x", "--stdin", "--spool", dir, "--spool-fsync", "always"}
	defer func(r io.Reader) { stdinReader = r }(stdinReader)
	stdinReader = strings.NewReader("one\n\ntwo\r\nthree")
	var out, errOut bytes.Buffer
	if err := runPub(ctx, args, &out, &errOut); err != nil {
		t.Fatalf("pub: %v\n%s", err, errOut.String())
	}
	if want := "spooled 3 message(s) to lines/x (qos 1); spool " + dir + ": delivered 3; 0 pending"; strings.TrimSpace(out.String()) != want {
		t.Fatalf("summary %q, want %q", out.String(), want)
	}
	for _, w := range []string{"one", "two", "three"} {
		select {
		case m := <-got:
			if m != w {
				t.Fatalf("got %q, want %q", m, w)
			}
		case <-ctx.Done():
			t.Fatalf("%q not delivered", w)
		}
	}
	stdinReader = strings.NewReader("")
	out.Reset()
	if err := runPub(ctx, args, &out, &errOut); err != nil {
		t.Fatalf("second pub: %v\n%s", err, errOut.String())
	}
	if !strings.Contains(out.String(), "spooled 0 message(s)") || !strings.Contains(out.String(), "delivered 0; 0 pending") {
		t.Fatalf("second run summary %q", out.String())
	}
}

func TestLineSource(t *testing.T) {
	tests := []struct {
		in   string
		want []string
		err  string
	}{
		{"a\nb\n", []string{"a", "b"}, ""},
		{"a\r\n\n\nb", []string{"a", "b"}, ""},
		{"", nil, ""},
		{strings.Repeat("x", maxLineBytes+1), nil, "longer than"},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%.10q", tt.in), func(t *testing.T) {
			next := lineSource(context.Background(), strings.NewReader(tt.in))
			var got []string
			for {
				b, err := next(context.Background())
				if errors.Is(err, errEndOfInput) {
					break
				}
				if err != nil {
					if tt.err == "" || !strings.Contains(err.Error(), tt.err) {
						t.Fatalf("error %v, want %q", err, tt.err)
					}
					return
				}
				got = append(got, string(b))
			}
			if tt.err != "" || fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Fatalf("got %q, want %q (error %q)", got, tt.want, tt.err)
			}
		})
	}
}

// TestPubSpoolFullDropsOldest: with the broker unreachable and a small
// --spool-max-bytes, the oldest messages go, counted in the summary and
// logged; a later run delivers exactly the newest ones, in order.
func TestPubSpoolFullDropsOldest(t *testing.T) {
	const n = 400
	b := brokertest.Start(t, nil, nil)
	ca := b.PKI.CAFile(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dead, err := net.ListenPacket("udp", "127.0.0.1:0") // a port where no broker answers
	if err != nil {
		t.Fatal(err)
	}
	defer dead.Close()
	dir := filepath.Join(t.TempDir(), "spool")
	args := func(broker string) []string {
		return []string{"--config", "", "--broker", broker, "--ca", ca, "--topic", "full/x", "--stdin", "--spool", dir, "--spool-max-bytes", "16384", "--log-level", "debug"}
	}
	defer func(r io.Reader) { stdinReader = r }(stdinReader)
	var in strings.Builder
	for i := range n {
		fmt.Fprintf(&in, "%03d-%s\n", i, strings.Repeat("x", 96))
	}
	stdinReader = strings.NewReader(in.String())
	// Run 1: everything goes to the spool, which overflows; the run waits
	// for the spool to drain and is stopped.
	rctx, stop := context.WithCancel(ctx)
	errOut := newSyncBuffer(fmt.Sprintf("id=%d", n))
	var out bytes.Buffer
	done := make(chan error, 1)
	go func() { done <- runPub(rctx, args("https://"+dead.LocalAddr().String()), &out, errOut) }()
	select {
	case <-errOut.seen:
	case err := <-done:
		t.Fatalf("pub ended early: %v\n%s", err, errOut)
	case <-ctx.Done():
		t.Fatalf("not all spooled:\n%s", errOut)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("pub: %v", err)
	}
	m := regexp.MustCompile(`; (\d+) pending; (\d+) dropped \(spool full\)`).FindStringSubmatch(out.String())
	if m == nil || !strings.Contains(errOut.String(), "spool full: dropped the oldest undelivered messages") {
		t.Fatalf("summary %q does not count drops, or the log does not say so:\n%s", out.String(), errOut)
	}
	pending, _ := strconv.Atoi(m[1])
	dropped, _ := strconv.Atoi(m[2])
	if pending+dropped != n || dropped == 0 {
		t.Fatalf("pending %d + dropped %d != %d", pending, dropped, n)
	}
	// Run 2, with the broker: the newest `pending` messages, in order.
	sub, err := client.New(client.Options{Broker: b.URL, RootCAs: b.PKI.Pool(), Logger: testutil.DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	got := make(chan string, n)
	ready := make(chan struct{})
	sctx, sstop := context.WithCancel(ctx)
	defer sstop()
	go sub.Subscribe(client.WithSubscribed(sctx, func() { close(ready) }), "full/x", 0, func(m client.Message) { got <- string(m.Payload[:3]) })
	<-ready
	stdinReader = strings.NewReader("")
	out.Reset()
	if err := runPub(ctx, args(b.URL), &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("delivered %d (%d left by an earlier run); 0 pending", pending, pending); !strings.Contains(out.String(), want) {
		t.Fatalf("summary %q, want %q", out.String(), want)
	}
	for i := dropped; i < n; i++ {
		select {
		case p := <-got:
			if p != fmt.Sprintf("%03d", i) {
				t.Fatalf("got message %s, want %03d", p, i)
			}
		case <-ctx.Done():
			t.Fatalf("message %03d not delivered", i)
		}
	}
	t.Logf("%d dropped (oldest), %d delivered", dropped, pending)
}
