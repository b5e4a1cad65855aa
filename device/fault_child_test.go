package main

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The fault tests of issue 11 run real quiot processes (`quiot broker`,
// `quiot pub`) so that they can kill them with SIGKILL: the test binary
// re-executes itself as quiot (TestFaultChild) instead of building one.

// faultChildEnv carries the arguments of a `quiot` run by the test binary
// itself, separated by U+001F.
const faultChildEnv = "QUIOT_FAULT_CHILD_ARGS"

// TestFaultChild is not a test: run with faultChildEnv set, it is the
// quiot command.
func TestFaultChild(t *testing.T) {
	args := os.Getenv(faultChildEnv)
	if args == "" {
		t.Skip("helper process for the fault tests (runs only when re-executed by one)")
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

// childProc is a running quiot child process.
type childProc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser // nil: empty input
	stdout *procLines
	stderr *procLines
	done   chan struct{}
	err    error // the exit status, once done
}

// startChild runs `quiot args...` (args[0] is the subcommand), with a pipe
// to its stdin when withInput. At the end of the test it is killed, and its
// stderr logged if the test failed.
func startChild(t *testing.T, withInput bool, args ...string) *childProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestFaultChild$")
	cmd.Env = append(os.Environ(), faultChildEnv+"="+strings.Join(args, "\x1f"))
	p := &childProc{cmd: cmd, stdout: newProcLines(), stderr: newProcLines(), done: make(chan struct{})}
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
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("quiot %s (pid %d) stderr:\n%s", args[0], cmd.Process.Pid, p.stderr)
		}
	})
	t.Cleanup(p.kill) // runs first
	return p
}

// kill sends SIGKILL and waits until the process is gone.
func (p *childProc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}
