package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/quiot/quiot/broker/mqttquic"
	"github.com/quiot/quiot/device/client"
	"github.com/quiot/quiot/internal/netimpair"
	"github.com/quiot/quiot/internal/testutil"
)

// Issue 11's publisher kill -9 fault test: a real `quiot pub --stdin
// --spool` process (this test binary re-executed, see TestPubFaultChild)
// fills its spool while the link is down and is killed with SIGKILL, then
// killed again in the middle of delivering, then started a third time with
// empty input; every line it accepted reaches the subscriber, in order,
// with duplicates only around the kills (recognised by client.Deduper).

// pubFaultEnv carries the arguments of the re-executed quiot (separated by
// U+001F).
const pubFaultEnv = "QUIOT_PUB_FAULT_ARGS"

// TestPubFaultChild is not a test: with pubFaultEnv set it is quiot.
func TestPubFaultChild(t *testing.T) {
	args := os.Getenv(pubFaultEnv)
	if args == "" {
		t.Skip("helper process for TestFaultPubKill9 (runs only when re-executed by it)")
	}
	os.Exit(run(strings.Split(args, "\x1f"), os.Stdout, os.Stderr))
}

// procLines collects a child's output lines and signals each new one.
type procLines struct {
	mu      sync.Mutex
	lines   []string
	changed chan struct{}
	eof     bool
}

func newProcLines() *procLines { return &procLines{changed: make(chan struct{})} }

func (p *procLines) consume(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		p.mu.Lock()
		p.lines = append(p.lines, sc.Text())
		close(p.changed)
		p.changed = make(chan struct{})
		p.mu.Unlock()
	}
	p.mu.Lock()
	p.eof = true
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
}

func (p *procLines) String() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.lines, "\n")
}

// wait blocks until a line matches re (returning it) or the output ends
// or timeout passes.
func (p *procLines) wait(t *testing.T, re *regexp.Regexp, timeout time.Duration) string {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	seen := 0
	for {
		p.mu.Lock()
		lines, ch, eof := p.lines[seen:], p.changed, p.eof
		seen = len(p.lines)
		p.mu.Unlock()
		for _, l := range lines {
			if re.MatchString(l) {
				return l
			}
		}
		if eof {
			t.Fatalf("output ended without a line matching %q:\n%s", re, p)
		}
		select {
		case <-ch:
		case <-deadline.C:
			t.Fatalf("no line matching %q within %v:\n%s", re, timeout, p)
		}
	}
}

// pubProc is a running `quiot pub`.
type pubProc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser // nil: empty input
	stdout *procLines
	stderr *procLines
	done   chan struct{}
	err    error // the exit status, once done
}

func startPubProc(t *testing.T, withInput bool, args ...string) *pubProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestPubFaultChild$")
	cmd.Env = append(os.Environ(), pubFaultEnv+"="+strings.Join(append([]string{"pub"}, args...), "\x1f"))
	p := &pubProc{cmd: cmd, stdout: newProcLines(), stderr: newProcLines(), done: make(chan struct{})}
	if withInput {
		w, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		p.stdin = w
	}
	so, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	se, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() { p.stdout.consume(so) })
	wg.Go(func() { p.stderr.consume(se) })
	go func() { wg.Wait(); p.err = cmd.Wait(); close(p.done) }()
	t.Cleanup(p.kill)
	return p
}

// kill sends SIGKILL and waits until the process is gone.
func (p *pubProc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// pubFaultSub counts a subscriber's messages on one topic: payloads 0, 1,
// 2, ... in order, duplicates removed by client.Deduper.
type pubFaultSub struct {
	mu      sync.Mutex
	dedup   client.Deduper
	next    int
	dups    int
	errs    []string
	changed chan struct{}
}

func (s *pubFaultSub) handle(m client.Message) {
	s.mu.Lock()
	defer func() {
		close(s.changed)
		s.changed = make(chan struct{})
		s.mu.Unlock()
	}()
	switch {
	case m.Gap:
		s.errs = append(s.errs, fmt.Sprintf("gap announced before seq %d", m.Seq))
	case s.dedup.Duplicate(&m):
		s.dups++
	default:
		i, err := strconv.Atoi(string(m.Payload))
		if err != nil || i != s.next {
			s.errs = append(s.errs, fmt.Sprintf("got %q, want #%d (a gap, reordering or unrecognisable duplicate)", m.Payload, s.next))
			return
		}
		s.next++
	}
}

// wait blocks until n distinct messages arrived in order.
func (s *pubFaultSub) wait(t *testing.T, n int, timeout time.Duration) {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		s.mu.Lock()
		got, ch, errs := s.next, s.changed, s.errs
		s.mu.Unlock()
		if len(errs) > 0 {
			t.Fatalf("subscriber: %s", strings.Join(errs, "; "))
		}
		if got >= n {
			return
		}
		select {
		case <-ch:
		case <-deadline.C:
			t.Fatalf("subscriber got %d of %d messages within %v", got, n, timeout)
		}
	}
}

// pubFaultBroker starts a broker of proto on loopback and a subscriber
// straight on it; it returns the broker's UDP address and URL scheme.
func pubFaultBroker(t *testing.T, proto string, pki *testutil.PKI, topic string, h func(client.Message)) (net.Addr, string) {
	t.Helper()
	var (
		addr   net.Addr
		scheme string
		subURL string
	)
	switch proto {
	case "h3":
		b := testutil.StartBroker(t, pki, nil)
		addr, scheme, subURL = b.Addr(), "https", b.URL
	default:
		s, err := mqttquic.New(mqttquic.Options{
			QUICAddr: "127.0.0.1:0",
			TLS:      &tls.Config{Certificates: []tls.Certificate{pki.Server.TLS}},
			Logger:   testutil.DiscardLogger(),
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		addr, scheme = s.QUICAddr(), "mqtt-quic"
		subURL = fmt.Sprintf("mqtt-quic://localhost:%d", s.QUICAddr().(*net.UDPAddr).Port)
	}
	sub, err := client.New(client.Options{Broker: subURL, RootCAs: pki.Pool(), Reconnect: true, MaxBackoff: time.Second, Logger: testutil.DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	t.Cleanup(func() { cancel(); <-done; sub.Close() })
	ready := make(chan struct{})
	var once sync.Once
	go func() {
		done <- sub.Subscribe(client.WithSubscribed(ctx, func() { once.Do(func() { close(ready) }) }), topic, 0, h)
	}()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("subscribe: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("subscription not live within 30 s")
	}
	return addr, scheme
}

func TestFaultPubKill9(t *testing.T) {
	for _, proto := range []string{"h3", "mqtt-quic"} {
		t.Run(proto, func(t *testing.T) {
			t.Parallel()
			const n = 150
			pki := testutil.NewPKI(t)
			ca := filepath.Join(t.TempDir(), "ca.pem")
			if err := os.WriteFile(ca, pki.CA.CertPEM(), 0o644); err != nil {
				t.Fatal(err)
			}
			sub := &pubFaultSub{changed: make(chan struct{})}
			upstream, scheme := pubFaultBroker(t, proto, pki, "fault/k", sub.handle)
			// 10 ms each way: delivery (one message per round trip) takes
			// long enough to be cut by a kill.
			relay, err := netimpair.New(netimpair.Options{Upstream: upstream.String(), Up: netimpair.Direction{Delay: 10 * time.Millisecond}, Down: netimpair.Direction{Delay: 10 * time.Millisecond}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { relay.Close() })
			relay.SetBlackout(true)
			spoolDir := filepath.Join(t.TempDir(), "spool")
			args := []string{"--config", "", "--broker", fmt.Sprintf("%s://localhost:%d", scheme, relay.Addr().Port), "--ca", ca,
				"--topic", "fault/k", "--stdin", "--spool", spoolDir, "--max-backoff", "1s", "--log-level", "debug"}

			// 1. The broker is unreachable: every line goes to the spool;
			// then SIGKILL with a full spool and nothing delivered.
			p := startPubProc(t, true, args...)
			var in strings.Builder
			for i := range n {
				fmt.Fprintf(&in, "%d\n", i)
			}
			if _, err := io.WriteString(p.stdin, in.String()); err != nil {
				t.Fatal(err)
			}
			p.stdin.Close()
			p.stderr.wait(t, regexp.MustCompile(fmt.Sprintf(`msg=spooled .*id=%d\b`, n)), 30*time.Second)
			p.kill()
			// As a power cut in the middle of a write would leave it: the
			// start of one more record at the end of the log.
			tearSpool(t, spoolDir)

			// 2. Restarted with empty input, still cut off: it finds the
			// spool and waits; then the link comes back and it is killed
			// again in the middle of delivering.
			p = startPubProc(t, false, args...)
			p.stderr.wait(t, regexp.MustCompile(`cutting off a torn record`), 30*time.Second)
			p.stderr.wait(t, regexp.MustCompile(fmt.Sprintf(`spool has undelivered messages" .*messages=%d\b`, n)), 30*time.Second)
			relay.SetBlackout(false)
			sub.wait(t, n/3, 30*time.Second)
			p.kill()
			select {
			case <-p.done:
			default:
				t.Fatal("not dead")
			}

			// 3. Started once more with empty input: it delivers the rest and
			// ends by itself once the spool has drained.
			p = startPubProc(t, false, args...)
			select {
			case <-p.done:
			case <-time.After(60 * time.Second):
				t.Fatalf("third publisher did not end within 60 s\n%s", p.stderr)
			}
			if p.err != nil {
				t.Fatalf("third publisher: %v\n%s", p.err, p.stderr)
			}
			summary := p.stdout.wait(t, regexp.MustCompile(`^spooled 0 message\(s\)`), time.Second)
			sub.wait(t, n, 30*time.Second)
			sub.mu.Lock()
			defer sub.mu.Unlock()
			if len(sub.errs) > 0 || sub.next != n {
				t.Fatalf("subscriber: %d of %d; %v", sub.next, n, sub.errs)
			}
			t.Logf("%d messages delivered in order, %d duplicates removed; last run: %s", n, sub.dups, summary)
		})
	}
}

// tearSpool appends a partial record (a length, a checksum and a few body
// bytes of a record of 64) to the newest segment file in dir.
func tearSpool(t *testing.T, dir string) {
	t.Helper()
	segs, err := filepath.Glob(filepath.Join(dir, "seg-*.log"))
	if err != nil || len(segs) == 0 {
		t.Fatalf("no spool segments in %s: %v", dir, err)
	}
	f, err := os.OpenFile(segs[len(segs)-1], os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write([]byte{64, 0, 0, 0, 0xde, 0xad, 0xbe, 0xef, 1, 151, 0, 0}); err != nil {
		t.Fatal(err)
	}
}
