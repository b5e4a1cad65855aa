package cli

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"testing"
)

func testApp() *App {
	a := &App{Name: "prog", Tagline: "does things"}
	a.Register(Command{Name: "ok", Summary: "succeeds", Run: func(context.Context, []string, io.Writer, io.Writer) error { return nil }})
	a.Register(Command{Name: "fail", Summary: "fails", Run: func(context.Context, []string, io.Writer, io.Writer) error { return errors.New("boom") }})
	a.Register(Command{Name: "flags", Summary: "parses flags", Run: func(_ context.Context, args []string, _, stderr io.Writer) error {
		fs := NewFlagSet("prog", "flags", stderr)
		fs.Int("n", 1, "a number")
		fs.String("listen", ":4433", "address")
		fs.Bool("dev", false, "development")
		fs.Int("max-payload", 1024, "largest payload")
		return ParseFlags(fs, args)
	}})
	return a
}

func TestMainStatuses(t *testing.T) {
	tests := []struct {
		args       []string
		want       int
		wantStderr string
	}{
		{args: nil, want: 2},
		{args: []string{"-h"}, want: 0},
		{args: []string{"ok"}, want: 0},
		{args: []string{"fail"}, want: 1, wantStderr: "prog fail: boom"},
		{args: []string{"nope"}, want: 2, wantStderr: `unknown command "nope"`},
		{args: []string{"flags", "-n", "x"}, want: 2, wantStderr: `invalid value "x" for --n`},
		{args: []string{"flags", "extra"}, want: 2, wantStderr: "unexpected arguments: extra"},
		{args: []string{"flags", "-h"}, want: 0},
		{args: []string{"flags", "-n", "3"}, want: 0},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.args), func(t *testing.T) {
			var out, errb bytes.Buffer
			if got := testApp().Main(tt.args, &out, &errb); got != tt.want {
				t.Errorf("status %d, want %d (stderr %q)", got, tt.want, errb.String())
			}
			if !strings.Contains(errb.String(), tt.wantStderr) {
				t.Errorf("stderr %q lacks %q", errb.String(), tt.wantStderr)
			}
		})
	}
}

func TestUsageListsCommands(t *testing.T) {
	var b bytes.Buffer
	testApp().Usage(&b)
	for _, s := range []string{"prog: does things", "fail", "succeeds", "prog help <command>", "prog <command> -h"} {
		if !strings.Contains(b.String(), s) {
			t.Errorf("usage lacks %q:\n%s", s, b.String())
		}
	}
}

func TestDuplicatePanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("no panic on duplicate command")
		}
	}()
	a := testApp()
	a.Register(Command{Name: "ok"})
}

func TestNewLogger(t *testing.T) {
	if _, err := NewLogger(io.Discard, "debug"); err != nil {
		t.Error(err)
	}
	if _, err := NewLogger(io.Discard, "loud"); !errors.Is(err, ErrUsage) {
		t.Errorf("err = %v, want usage error", err)
	}
	_ = flag.ErrHelp
}

func TestInterruptedStatus(t *testing.T) {
	a := &App{Name: "prog", Signals: []os.Signal{syscall.SIGUSR1}, InterruptedStatus: 130}
	a.Register(Command{Name: "wait", Run: func(ctx context.Context, _ []string, _, _ io.Writer) error {
		if err := syscall.Kill(os.Getpid(), syscall.SIGUSR1); err != nil {
			return err
		}
		<-ctx.Done()
		return fmt.Errorf("teardown: %w", ctx.Err())
	}})
	var errb bytes.Buffer
	if got := a.Main([]string{"wait"}, io.Discard, &errb); got != 130 {
		t.Fatalf("status %d, want 130 (stderr %q)", got, errb.String())
	}
	if !strings.Contains(errb.String(), "interrupted; cleaned up") {
		t.Errorf("stderr %q", errb.String())
	}
}
