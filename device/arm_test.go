package main

import (
	"bufio"
	"bytes"
	"context"
	"debug/elf"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/quiot/quiot/internal/testenv"
)

// maxPiBinary is the size budget of the Raspberry Pi Zero binary (14 MB).
const maxPiBinary = 14_000_000

// armCPU is the Pi Zero / Pi 1 CPU that qemu emulates.
const armCPU = "arm1176"

// buildPiBinary builds the quiot binary as `make pi` does (GOOS=linux
// GOARCH=arm GOARM=6 CGO_ENABLED=0, -trimpath, -s -w) into dir.
func buildPiBinary(t *testing.T, dir string) string {
	t.Helper()
	goBin := testenv.RequireTool(t, "go")
	bin := filepath.Join(dir, "quiot-linux-armv6")
	cmd := exec.Command(goBin, "build", "-trimpath", "-tags", "netgo,osusergo", "-ldflags", "-s -w", "-o", bin, ".")
	cmd.Env = append(os.Environ(), "GOOS=linux", "GOARCH=arm", "GOARM=6", "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the ARMv6 binary: %v\n%s", err, out)
	}
	return bin
}

// lineWaiter collects a process's output and reports the first line
// matching a pattern.
type lineWaiter struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	re    *regexp.Regexp
	match chan string
	once  sync.Once
}

func newLineWaiter(pattern string) *lineWaiter {
	return &lineWaiter{re: regexp.MustCompile(pattern), match: make(chan string, 1)}
}

// consume reads r line by line until EOF.
func (w *lineWaiter) consume(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		w.mu.Lock()
		w.buf.WriteString(line + "\n")
		w.mu.Unlock()
		if m := w.re.FindStringSubmatch(line); m != nil {
			w.once.Do(func() { w.match <- m[len(m)-1] })
		}
	}
}

func (w *lineWaiter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// armProc is a quiot role running under qemu.
type armProc struct {
	cmd            *exec.Cmd
	stdout, stderr *lineWaiter
	done           chan error
}

func startARM(t *testing.T, ctx context.Context, qemu, bin string, outPattern, errPattern string, args ...string) *armProc {
	t.Helper()
	cmd := exec.CommandContext(ctx, qemu, append([]string{"-cpu", armCPU, bin}, args...)...)
	cmd.WaitDelay = 5 * time.Second
	p := &armProc{cmd: cmd, stdout: newLineWaiter(outPattern), stderr: newLineWaiter(errPattern), done: make(chan error, 1)}
	so, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	se, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s under qemu: %v", args[0], err)
	}
	var wg sync.WaitGroup
	wg.Go(func() { p.stdout.consume(so) })
	wg.Go(func() { p.stderr.consume(se) })
	go func() {
		wg.Wait()
		p.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// wait returns the first matching line of w, failing the test if the
// process ends or ctx is done first.
func (p *armProc) wait(t *testing.T, ctx context.Context, w *lineWaiter, what string) string {
	t.Helper()
	select {
	case s := <-w.match:
		return s
	case err := <-p.done:
		p.done <- err
		t.Fatalf("%s: process ended (%v) before %s\nstdout:\n%s\nstderr:\n%s", p.cmd.Args[3], err, what, p.stdout, p.stderr)
	case <-ctx.Done():
		t.Fatalf("%s: %v waiting for %s\nstdout:\n%s\nstderr:\n%s", p.cmd.Args[3], ctx.Err(), what, p.stdout, p.stderr)
	}
	return ""
}

// exit waits for the process to end and fails the test on a non-zero exit.
func (p *armProc) exit(t *testing.T, ctx context.Context) {
	t.Helper()
	select {
	case err := <-p.done:
		p.done <- err
		if err != nil {
			t.Fatalf("%s exited with %v\nstdout:\n%s\nstderr:\n%s", p.cmd.Args[3], err, p.stdout, p.stderr)
		}
	case <-ctx.Done():
		t.Fatalf("%s did not exit: %v\nstdout:\n%s\nstderr:\n%s", p.cmd.Args[3], ctx.Err(), p.stdout, p.stderr)
	}
}

// disableOptionalListeners returns flags that turn off broker listeners on
// fixed ports (MQTT, metrics) when this build of the broker has them, so the
// test binds nothing but 127.0.0.1:0.
func disableOptionalListeners(t *testing.T, qemu, bin string) []string {
	t.Helper()
	out, _ := exec.Command(qemu, "-cpu", armCPU, bin, "broker", "-h").CombinedOutput()
	var flags []string
	for _, f := range []string{"mqtt-quic", "mqtt-tcp", "metrics-listen"} {
		if bytes.Contains(out, []byte("-"+f+" ")) {
			flags = append(flags, "--"+f+"=")
		}
	}
	return flags
}

// TestARMv6RoundTrip builds the Pi Zero binary, checks its size and
// architecture, and runs it under qemu-arm-static with the Pi Zero's CPU as
// broker, subscriber and publisher on loopback.
func TestARMv6RoundTrip(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped with -short: builds an ARM binary and emulates it (about half a minute)")
	}
	qemu := testenv.RequireTool(t, "qemu-arm-static") // Debian package qemu-user-static
	bin := buildPiBinary(t, t.TempDir())
	fi, err := os.Stat(bin)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("quiot-linux-armv6 (GOARM=6, -trimpath -s -w): %d bytes (%.2f MB, budget %.0f MB)", fi.Size(), float64(fi.Size())/1e6, float64(maxPiBinary)/1e6)
	if fi.Size() > maxPiBinary {
		t.Errorf("ARMv6 binary is %d bytes, over the %d-byte budget; modules linked in:\n%s", fi.Size(), maxPiBinary, linkedModules(bin))
	}
	ef, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	if ef.Class != elf.ELFCLASS32 || ef.Machine != elf.EM_ARM {
		t.Fatalf("binary is %v %v, want a 32-bit ARM ELF", ef.Class, ef.Machine)
	}
	if ef.Section(".interp") != nil {
		t.Error("binary has an ELF interpreter: not statically linked")
	}
	_ = ef.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	brokerArgs := append([]string{"broker", "--config=", "--dev", "--dev-cert-out=", "--listen", "127.0.0.1:0", "--log-level", "warn"}, disableOptionalListeners(t, qemu, bin)...)
	broker := startARM(t, ctx, qemu, bin, `broker listening: (https://[0-9.:]+)`, `^$`, brokerArgs...)
	url := broker.wait(t, ctx, broker.stdout, "the broker to listen")
	t.Logf("broker under qemu (-cpu %s) listening at %s", armCPU, url)

	// One subscriber; two publishers in turn: one request per message with
	// the default profile, then a streamed publish with the lean profile.
	const n = 10
	sub := startARM(t, ctx, qemu, bin, `^$`, `msg=subscribed`,
		"sub", "--config=", "--broker", url, "--insecure", "--topic", "arm/#", "--count", fmt.Sprint(2*n), "--format", "json")
	sub.wait(t, ctx, sub.stderr, "the subscription")

	runs := []struct{ mode, tuning string }{{"request", "default"}, {"stream", "lean"}}
	for _, r := range runs {
		start := time.Now()
		pub := startARM(t, ctx, qemu, bin, `^(published .*)$`, `^$`,
			"pub", "--config=", "--broker", url, "--insecure", "--topic", "arm/"+r.mode, "--payload", "hello from an ARM1176",
			"--count", fmt.Sprint(n), "--rate", "20", "--mode", r.mode, "--tuning", r.tuning)
		summary := pub.wait(t, ctx, pub.stdout, "the publisher's summary")
		pub.exit(t, ctx)
		t.Logf("publisher under qemu (%s mode, %s tuning): %s (process wall time incl. emulator start %s)", r.mode, r.tuning, summary, time.Since(start).Round(time.Millisecond))
	}
	sub.exit(t, ctx)

	lat := map[string][]float64{}
	count := 0
	for _, line := range strings.Split(strings.TrimSpace(sub.stdout.String()), "\n") {
		var j subJSON
		if err := json.Unmarshal([]byte(line), &j); err != nil {
			t.Fatalf("subscriber line %q: %v", line, err)
		}
		if !strings.HasPrefix(j.Topic, "arm/") || j.Payload == nil || *j.Payload != "hello from an ARM1176" || j.LatencyMS == nil {
			t.Fatalf("subscriber line %q: want a published message with latency_ms", line)
		}
		lat[j.Topic] = append(lat[j.Topic], *j.LatencyMS)
		count++
	}
	if count != 2*n || len(lat["arm/request"]) != n || len(lat["arm/stream"]) != n {
		t.Fatalf("subscriber printed %d messages, want %d of each mode:\n%s", count, n, sub.stdout)
	}
	for _, r := range runs {
		t.Logf("publish -> deliver latency under qemu, %s mode, ms: %s", r.mode, fmtMS(lat["arm/"+r.mode]))
	}

	// SIGTERM: the broker drains and exits cleanly.
	if err := broker.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	broker.exit(t, ctx)
}

// linkedModules lists the modules built into bin (go version -m), to show
// what made it grow.
func linkedModules(bin string) string {
	out, err := exec.Command("go", "version", "-m", bin).Output()
	if err != nil {
		return err.Error()
	}
	var mods []string
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) >= 3 && f[0] == "dep" {
			mods = append(mods, f[1])
		}
	}
	return strings.Join(mods, " ")
}

func fmtMS(v []float64) string {
	parts := make([]string, len(v))
	for i, x := range v {
		parts[i] = fmt.Sprintf("%.2f", x)
	}
	return strings.Join(parts, " ")
}
