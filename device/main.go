// Command quiot runs as broker, publisher or subscriber of a publish-subscribe
// system over QUIC: a pure HTTP/3 pub-sub protocol and MQTT over QUIC in one
// topic space. It also provisions certificates and runs the HTTP/3 vs
// MQTT-over-QUIC benchmark.
//
// The main package is thin: each subcommand lives in its own cmd_*.go file,
// registers itself in init, turns flags into an Options struct and calls a
// library package.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"sort"
	"strings"
	"syscall"

	"github.com/quiot/quiot/internal/config"
)

// command is one subcommand of quiot.
type command struct {
	name    string
	summary string
	// run parses args (without the subcommand name) and does the work; it
	// returns when ctx is cancelled (SIGINT/SIGTERM) or the work is done.
	run func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

var commands = map[string]command{}

// register adds a subcommand; called from init in each cmd_*.go file.
func register(c command) {
	if _, dup := commands[c.name]; dup {
		panic("quiot: duplicate command " + c.name)
	}
	commands[c.name] = c
}

// errUsage marks a usage error: main exits with status 2 instead of 1.
var errUsage = errors.New("usage error")

func usage(w io.Writer) {
	fmt.Fprintf(w, "quiot: pub-sub over QUIC (HTTP/3 and MQTT) for small Linux devices\n\nUsage: quiot <command> [flags]\n\nCommands:\n")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-9s %s\n", n, commands[n].summary)
	}
	fmt.Fprintf(w, "\nRun 'quiot <command> -h' for the flags of a command.\n")
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stdout)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "quiot: unknown command %q\n\n", args[0])
		usage(stderr)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := c.run(ctx, args[1:], stdout, stderr)
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		fmt.Fprintf(stderr, "quiot %s: %v\n", c.name, err)
		return 2
	default:
		fmt.Fprintf(stderr, "quiot %s: %v\n", c.name, err)
		return 1
	}
}

// newFlagSet returns a FlagSet for a subcommand that reports errors instead of
// exiting, so run decides the exit status.
func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("quiot "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	if slices.Contains(config.Sections, name) {
		fs.String(config.FlagName, config.DefaultPath, "TOML configuration file: table ["+name+"], keys = flag names; flags override it (a missing default file is ignored; \"\" for none)")
	}
	return fs
}

// parseFlags parses args into fs and wraps a parse failure as a usage error.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected arguments: %s", errUsage, strings.Join(fs.Args(), " "))
	}
	// Roles with a --config flag (see newFlagSet) take defaults from the file.
	return config.ApplyFlag(fs, strings.TrimPrefix(fs.Name(), "quiot "))
}

// newLogger returns the slog logger for a role: text to stderr, at the given
// level name (debug, info, warn, error).
func newLogger(stderr io.Writer, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("%w: bad --log-level %q", errUsage, level)
	}
	return slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: l})), nil
}
