package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// proc is one role process: its output goes to a log file and is watched
// for a readiness line.
type proc struct {
	name  string
	cmd   *exec.Cmd
	log   *os.File
	out   *lineWatch
	done  chan struct{}
	err   error     // valid after done
	start time.Time // when it started
	wall  time.Duration
}

// lineWatch is an io.Writer that copies output to a file and closes ready
// once every wanted substring has appeared in it.
type lineWatch struct {
	mu    sync.Mutex
	file  *os.File
	want  []string
	seen  []bool
	ready chan struct{}
	tail  bytes.Buffer // last few KiB, for error messages
	line  bytes.Buffer
}

func newLineWatch(f *os.File, want []string) *lineWatch {
	w := &lineWatch{file: f, want: want, seen: make([]bool, len(want)), ready: make(chan struct{})}
	if len(want) == 0 {
		close(w.ready)
	}
	return w
}

// Write implements io.Writer.
func (w *lineWatch) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.file != nil {
		_, _ = w.file.Write(p)
	}
	w.tail.Write(p)
	if w.tail.Len() > 8<<10 {
		b := w.tail.Bytes()
		rest := append([]byte(nil), b[len(b)-4<<10:]...)
		w.tail.Reset()
		w.tail.Write(rest)
	}
	for _, c := range p {
		if c != '\n' {
			w.line.WriteByte(c)
			continue
		}
		w.check(w.line.String())
		w.line.Reset()
	}
	return len(p), nil
}

func (w *lineWatch) check(line string) {
	if len(w.want) == 0 {
		return
	}
	all := true
	for i, s := range w.want {
		if !w.seen[i] && strings.Contains(line, s) {
			w.seen[i] = true
		}
		all = all && w.seen[i]
	}
	if all {
		select {
		case <-w.ready:
		default:
			close(w.ready)
		}
	}
}

// lastLines returns the last n lines of output.
func (w *lineWatch) lastLines(n int) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	lines := strings.Split(strings.TrimRight(w.tail.String()+w.line.String(), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " / ")
}

// startProc starts bin with args in its own process group; output goes to
// logPath; ready closes when every string of want has been printed.
func startProc(name, bin string, args, env []string, logPath string, want []string) (*proc, error) {
	f, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("couldn't create %s log: %w", name, err)
	}
	fmt.Fprintf(f, "# %s %s\n", bin, strings.Join(args, " "))
	w := newLineWatch(f, want)
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout = w
	cmd.Stderr = w
	cmd.SysProcAttr = sysProcAttr()
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("couldn't start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, log: f, out: w, done: make(chan struct{}), start: time.Now()}
	go func() {
		p.err = cmd.Wait()
		p.wall = time.Since(p.start)
		f.Close()
		close(p.done)
	}()
	return p, nil
}

// errNotReady is returned when a role exits or times out before it is
// ready; errExited (wrapped with it) when it exited.
var (
	errNotReady = errors.New("not ready")
	errExited   = errors.New("exited")
)

// waitReady waits until the process printed its readiness lines.
func (p *proc) waitReady(ctx context.Context, timeout time.Duration) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-p.out.ready:
		return nil
	case <-p.done:
		return fmt.Errorf("%s %w: %w (%v): %s", p.name, errNotReady, errExited, p.err, p.out.lastLines(3))
	case <-t.C:
		return fmt.Errorf("%s %w after %v: %s", p.name, errNotReady, timeout, p.out.lastLines(3))
	case <-ctx.Done():
		return ctx.Err()
	}
}

// wait waits for the process to exit by itself for up to timeout; false
// when it is still running.
func (p *proc) wait(ctx context.Context, timeout time.Duration) bool {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-p.done:
		return true
	case <-t.C:
		return false
	case <-ctx.Done():
		return false
	}
}

// stop asks the process group to end (SIGINT, so a role writes its
// metrics), and kills it after grace. It returns once the process is gone.
func (p *proc) stop(grace time.Duration) {
	select {
	case <-p.done:
		killGroup(p.cmd, true) // leftovers in the group, if any
		return
	default:
	}
	interruptGroup(p.cmd)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		killGroup(p.cmd, false)
		<-p.done
	}
	killGroup(p.cmd, true)
}

// exitErr describes how the process ended, with the last lines of its
// output when it failed.
func (p *proc) exitErr() error {
	if p.err == nil {
		return nil
	}
	return fmt.Errorf("%s: %v: %s", p.name, p.err, p.out.lastLines(3))
}

// usage returns the exited process's CPU time, peak RSS and wall time.
func (p *proc) usage() (cpu time.Duration, maxRSSKiB int64, wall time.Duration, ok bool) {
	select {
	case <-p.done:
	default:
		return 0, 0, 0, false
	}
	cpu, rss, ok := usage(p.cmd.ProcessState)
	return cpu, rss, p.wall, ok
}
