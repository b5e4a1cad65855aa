// Command ovsprobe times packets through an Open vSwitch datapath with
// kernel timestamps at an ingress and an egress port, sweeps the factors that
// drive that delay (packet size, rate, flows, OpenFlow rules, memory and CPU
// given to ovs-vswitchd, cold or warm caches) and fits an empirical delay
// model a simulator or capacity planner can use.
//
//	ovsprobe lab      [--quick] [--out DIR]     throwaway OVS testbed, full sweep
//	ovsprobe measure  --ingress IF --egress IF --dst IP:PORT [...]
//	ovsprobe watch    --ingress IF --egress IF [--filter udp:4433]
//	ovsprobe fit      --in DIR [--out model.json]
//	ovsprobe predict  --model model.json --size B --rate PPS --flows N [--mem BYTES]
//	ovsprobe cleanup  remove what a killed lab run left behind
//	ovsprobe version
//
// The main package is thin: each subcommand turns its flags into the Options
// of a library package (probe/lab, probe/measure, probe/watch, probe/model).
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
	"sort"
	"strings"
	"syscall"
)

// command is one subcommand.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

var commands = map[string]command{}

func register(c command) {
	if _, dup := commands[c.name]; dup {
		panic("ovsprobe: duplicate command " + c.name)
	}
	commands[c.name] = c
}

// errUsage marks a usage error: exit status 2.
var errUsage = errors.New("usage error")

func usage(w io.Writer) {
	fmt.Fprintf(w, "ovsprobe: per-packet delay through Open vSwitch, factor sweeps and an empirical delay model\n\nUsage: ovsprobe <command> [flags]\n\nCommands:\n")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-8s %s\n", n, commands[n].summary)
	}
	fmt.Fprintf(w, "\nRun 'ovsprobe <command> -h' for the flags of a command. lab, measure, watch and cleanup need root.\n")
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
		fmt.Fprintf(stderr, "ovsprobe: unknown command %q\n\n", args[0])
		usage(stderr)
		return 2
	}
	// The first SIGINT/SIGTERM/SIGHUP cancels ctx; the command tears down and
	// returns. Further signals are absorbed until then (stop runs last), so
	// an impatient second Ctrl-C does not cut the teardown short.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	err := c.run(ctx, args[1:], stdout, stderr)
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		fmt.Fprintf(stderr, "ovsprobe %s: %v\n", c.name, err)
		return 2
	case ctx.Err() != nil:
		// A signal arrived: whatever error it caused, the command has torn
		// down before returning.
		if !errors.Is(err, context.Canceled) {
			fmt.Fprintf(stderr, "ovsprobe %s: %v\n", c.name, err)
		}
		fmt.Fprintf(stderr, "ovsprobe %s: interrupted; cleaned up\n", c.name)
		return 130
	default:
		fmt.Fprintf(stderr, "ovsprobe %s: %v\n", c.name, err)
		return 1
	}
}

func newFlagSet(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("ovsprobe "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: ovsprobe %s %s\n\nFlags:\n", name, synopsis)
		fs.PrintDefaults()
	}
	return fs
}

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
	return nil
}

func newLogger(stderr io.Writer, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("%w: bad --log-level %q (debug, info, warn, error)", errUsage, level)
	}
	return slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: l})), nil
}
