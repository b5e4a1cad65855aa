// Command quiot runs as broker, publisher or subscriber of a publish-subscribe
// system over QUIC: a pure HTTP/3 pub-sub protocol and MQTT over QUIC in one
// topic space. It also provisions certificates and runs the HTTP/3 vs
// MQTT-over-QUIC benchmark.
//
// The main package is thin: each subcommand lives in its own cmd_*.go file,
// registers itself in init, turns flags into an Options struct and calls a
// library package.
//
// The 32-bit ARM build (`make pi`, the Raspberry Pi Zero binary) leaves out
// what only a host runs, to stay within its size budget: `quiot bench` (the
// broker, pub and sub roles it runs are in) and the quick bench at the end
// of `quiot demo`; each says "not in the Pi build; run it on a host".
// pibuild.go lists them; the build tag nobench leaves the same out on any
// architecture.
package main

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"

	"github.com/quiot/quiot/internal/cli"
	"github.com/quiot/quiot/internal/config"
)

// command is one subcommand of quiot.
type command struct {
	name    string
	summary string
	// run parses args (without the subcommand name) and does the work; it
	// returns when ctx is cancelled (SIGINT/SIGTERM) or the work is done.
	run cliRun
}

type cliRun = func(ctx context.Context, args []string, stdout, stderr io.Writer) error

var app = &cli.App{Name: "quiot", Tagline: "pub-sub over QUIC (HTTP/3 and MQTT) for small Linux devices"}

// register adds a subcommand; called from init in each cmd_*.go file.
func register(c command) { app.Register(cli.Command{Name: c.name, Summary: c.summary, Run: c.run}) }

// errUsage marks a usage error: main exits with status 2 instead of 1.
var errUsage = cli.ErrUsage

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int { return app.Main(args, stdout, stderr) }

// newFlagSet returns a FlagSet for a subcommand that reports errors instead
// of exiting, so run decides the exit status. The roles with a configuration
// section get a --config flag.
func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := cli.NewFlagSet("quiot", name, stderr)
	if slices.Contains(config.Sections, name) {
		fs.String(config.FlagName, config.DefaultPath, "TOML configuration file: table ["+name+"], keys = flag names; flags override it (a missing file at the default path is ignored; empty = none)")
	}
	return fs
}

// parseFlags gives fs its command's help layout (flagLayouts) and byte-size
// flags (sizeFlags), parses args into fs (mistakes are usage errors), then
// lets roles with a --config flag take defaults from the file.
func parseFlags(fs *flag.FlagSet, args []string) error {
	name := strings.TrimPrefix(fs.Name(), "quiot ")
	if h, ok := flagLayouts[name]; ok {
		cli.SetHelp(fs, h)
	}
	cli.SizeFlags(fs, sizeFlags[name]...)
	if err := cli.ParseFlags(fs, args); err != nil {
		return err
	}
	return config.ApplyFlag(fs, name)
}

// newLogger returns the slog logger for a role: text to stderr, at the given
// level name (debug, info, warn, error).
func newLogger(stderr io.Writer, level string) (*slog.Logger, error) {
	return cli.NewLogger(stderr, level)
}
