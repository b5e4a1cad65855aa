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
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"syscall"

	"github.com/quiot/quiot/internal/cli"
)

// command is one subcommand.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

// The first SIGINT/SIGTERM/SIGHUP cancels the command's context; it tears
// down and returns, and ovsprobe exits 130 saying it cleaned up.
var app = &cli.App{
	Name:              "ovsprobe",
	Tagline:           "per-packet delay through Open vSwitch, factor sweeps and an empirical delay model",
	Footer:            "Run 'ovsprobe <command> -h' for the flags of a command. lab, measure, watch and cleanup need root.",
	Signals:           []os.Signal{os.Interrupt, syscall.SIGTERM, syscall.SIGHUP},
	InterruptedStatus: 130,
}

func register(c command) { app.Register(cli.Command{Name: c.name, Summary: c.summary, Run: c.run}) }

// errUsage marks a usage error: exit status 2.
var errUsage = cli.ErrUsage

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int { return app.Main(args, stdout, stderr) }

func newFlagSet(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := cli.NewFlagSet("ovsprobe", name, stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: ovsprobe %s %s\n\nFlags:\n", name, synopsis)
		fs.PrintDefaults()
	}
	return fs
}

func parseFlags(fs *flag.FlagSet, args []string) error { return cli.ParseFlags(fs, args) }

func newLogger(stderr io.Writer, level string) (*slog.Logger, error) {
	return cli.NewLogger(stderr, level)
}
