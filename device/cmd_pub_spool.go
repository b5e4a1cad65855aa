package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/quiot/quiot/device/client"
	"github.com/quiot/quiot/internal/spool"
)

// `quiot pub --spool DIR` (store and forward through internal/spool) and
// `quiot pub --stdin` (one message a line, as mosquitto_pub -l).

// stdinReader is what --stdin reads; tests replace it.
var stdinReader io.Reader = os.Stdin

// errEndOfInput ends a publish run whose payload source has run dry.
var errEndOfInput = errors.New("end of input")

// maxLineBytes bounds one --stdin line (one message).
const maxLineBytes = 1 << 20

// spoolFlags are pub's --spool* and --stdin flags.
type spoolFlags struct {
	dir      string
	maxBytes int64
	maxAge   time.Duration
	fsync    string
	stdin    bool

	so spool.Options // from the flags, by check
}

func (f *spoolFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.dir, "spool", "", "on-disk spool directory: each message is written there first and delivered in order once the broker takes it (survives broker outages, restarts, kill -9 and power loss); the run ends when its messages are delivered, and a run delivers what an earlier one left")
	fs.Int64Var(&f.maxBytes, "spool-max-bytes", spool.DefaultMaxBytes, "size bound of the spool in bytes; when full, the oldest undelivered messages go (counted and logged)")
	fs.DurationVar(&f.maxAge, "spool-max-age", spool.DefaultMaxAge, "undelivered messages older than this are dropped (counted and logged) (0 = no age limit)")
	fs.StringVar(&f.fsync, "spool-fsync", "interval", "when the spool forces its writes to disk: always (before a message counts as accepted), interval (every 1s), a period such as 200ms, or never (the kernel's writeback)")
	fs.BoolVar(&f.stdin, "stdin", false, "publish each line of standard input as one message (as mosquitto_pub -l; blank lines are skipped); the run ends when the input ends (with --spool: and the spool has drained)")
}

// check validates the flags against the others and prepares the spool
// options.
func (f *spoolFlags) check(fs *flag.FlagSet, sensor string) error {
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	if f.stdin && (set["payload"] || set["payload-size"] || sensor != "") {
		return fmt.Errorf("%w: --stdin replaces --payload, --payload-size and --sensor", errUsage)
	}
	if f.dir == "" {
		for _, n := range []string{"spool-max-bytes", "spool-max-age", "spool-fsync"} {
			if set[n] {
				return fmt.Errorf("%w: --%s needs --spool DIR", errUsage, n)
			}
		}
		return nil
	}
	if f.maxBytes <= 0 {
		return fmt.Errorf("%w: --spool-max-bytes must be positive", errUsage)
	}
	policy, every, err := spool.ParseFsync(f.fsync)
	if err != nil {
		return fmt.Errorf("%w: --spool-fsync: %v", errUsage, err)
	}
	age := f.maxAge
	if age <= 0 {
		age = -1 // no limit
	}
	f.so = spool.Options{Dir: f.dir, MaxBytes: f.maxBytes, MaxAge: age, Fsync: policy, FsyncInterval: every}
	return nil
}

// newClient returns the publisher's client: spooled with --spool (sc is
// then the same client), plain otherwise.
func (f *spoolFlags) newClient(opts client.Options, log *slog.Logger) (c client.Client, sc *client.Spooled, err error) {
	c, err = client.New(opts)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", errUsage, err)
	}
	if f.dir == "" {
		return c, nil, nil
	}
	_ = c.Close() // not connected yet: New only checked the options
	so := f.so
	so.Logger = log
	sc, err = client.NewSpooled(opts, so)
	if err != nil {
		return nil, nil, err
	}
	return sc, sc, nil
}

// applyStdin makes p take one message per line of r: --count defaults to
// 0 (every line), in order (one at a time).
func (f *spoolFlags) applyStdin(ctx context.Context, fs *flag.FlagSet, r io.Reader, p *pubPlan) {
	countSet := false
	fs.Visit(func(fl *flag.Flag) { countSet = countSet || fl.Name == "count" })
	if !countSet {
		p.count = 0
	}
	p.inflight = 1
	p.source = "stdin"
	p.next = lineSource(ctx, r)
}

// lineSource reads lines of r in a goroutine (a read cannot be
// interrupted) and hands them out one per call; blank lines are skipped,
// a trailing CR is dropped. After the last line it returns errEndOfInput.
func lineSource(ctx context.Context, r io.Reader) func(context.Context) ([]byte, error) {
	type line struct {
		b   []byte
		err error
	}
	ch := make(chan line)
	go func() {
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), maxLineBytes)
		for sc.Scan() {
			b := []byte(strings.TrimSuffix(sc.Text(), "\r"))
			if len(b) == 0 {
				continue
			}
			select {
			case ch <- line{b: b}:
			case <-ctx.Done():
				return
			}
		}
		err := sc.Err()
		if errors.Is(err, bufio.ErrTooLong) {
			err = fmt.Errorf("a line is longer than %d bytes", maxLineBytes)
		}
		if err == nil {
			err = errEndOfInput
		}
		select {
		case ch <- line{err: err}:
		case <-ctx.Done():
		}
		close(ch)
	}()
	return func(ctx context.Context) ([]byte, error) {
		select {
		case l, ok := <-ch:
			if !ok {
				return nil, errEndOfInput
			}
			return l.b, l.err
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// drainSpool waits, after a run that ended normally, until the spool has
// delivered everything (what this run and earlier ones put there). An
// interrupt while waiting is a clean stop: the rest stays in the spool.
func drainSpool(ctx context.Context, sc *client.Spooled, res *pubResult, err error, log *slog.Logger) error {
	if err != nil || res.Stopped {
		return err
	}
	if n := sc.SpoolStats().Pending; n > 0 {
		log.Info("waiting for the spool to drain", "pending", n)
	}
	if err := sc.Drain(ctx); err != nil {
		if ctx.Err() != nil {
			res.Stopped = true
			return nil
		}
		return fmt.Errorf("spool delivery: %w", err)
	}
	return nil
}

// spoolSummary is the one-line report of a run with --spool.
func spoolSummary(r *pubResult, topicName string, qos int, st client.SpoolStats, dir string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "spooled %d message(s) to %s (qos %d); spool %s: delivered %d", r.Sent, topicName, qos, dir, st.Delivered)
	if st.Recovered > 0 {
		fmt.Fprintf(&b, " (%d left by an earlier run)", st.Recovered)
	}
	fmt.Fprintf(&b, "; %d pending", st.Pending)
	if st.Dropped > 0 {
		fmt.Fprintf(&b, "; %d dropped (spool full)", st.Dropped)
	}
	if st.Expired > 0 {
		fmt.Fprintf(&b, "; %d expired", st.Expired)
	}
	if st.Rejected > 0 {
		fmt.Fprintf(&b, "; %d refused by the broker", st.Rejected)
	}
	if st.Corrupt > 0 {
		fmt.Fprintf(&b, "; %d corrupt region(s) skipped", st.Corrupt)
	}
	if r.Stopped {
		b.WriteString("; interrupted (the rest stays in the spool)")
	}
	return b.String()
}
