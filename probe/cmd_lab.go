package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/quiot/quiot/probe/lab"
	"github.com/quiot/quiot/probe/ovs"
)

func init() {
	register(command{name: "lab", summary: "build a throwaway OVS testbed in namespaces, run the sweep, fit the model", run: runLab})
	register(command{name: "cleanup", summary: "remove namespaces, veths, OVS processes, cgroups left by a killed lab run", run: runCleanup})
}

func runLab(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("lab", "[--quick] [--out DIR] [sweep flags]", stderr)
	quick := fs.Bool("quick", false, "the quick sweep (about 25 short conditions, under 3 minutes)")
	out := fs.String("out", "results/lab", "output directory")
	sizes := fs.String("sizes", "", "frame sizes in bytes, comma-separated (overrides the sweep's)")
	rates := fs.String("rates", "", "offered rates in packets/s, comma-separated")
	flows := fs.String("flows", "", "flow counts, comma-separated")
	rules := fs.String("rules", "", "filler OpenFlow rule counts, comma-separated (first = baseline)")
	mems := fs.String("mems", "", "memory limits of ovs-vswitchd (0 = unlimited; K/M/G suffixes), comma-separated")
	cpus := fs.String("cpus", "", "CPU quotas of ovs-vswitchd in cores (0 = unlimited), comma-separated")
	cold := fs.Bool("cold", true, "add cold-cache conditions (datapath flows flushed, no warmup)")
	duration := fs.Duration("duration", 0, "measured time per condition (0 = the sweep's)")
	warmup := fs.Duration("warmup", -1, "warmup per warm condition (-1 = the sweep's)")
	repeat := fs.Int("repeat", 0, "measurements of each condition, each round in random order (0 = the sweep's: quick 2, full 3)")
	response := fs.String("response", "p50_us", "statistic the model fits: p50_us, p99_us, p999_us, mean_us, min_us, pdv_us")
	seed := fs.Uint64("seed", 1, "seed of bootstrap and cross-validation")
	resamples := fs.Int("resamples", 500, "bootstrap replicates per condition")
	port := fs.Uint("port", 9000, "UDP destination port of the probe packets")
	noPlots := fs.Bool("no-plots", false, "skip the PNG plots")
	inOrder := fs.Bool("in-order", false, "measure conditions in sweep order (off = random order, seeded by --seed)")
	logLevel := fs.String("log-level", "warn", "log level: debug, info, warn, error")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	log, err := newLogger(stderr, *logLevel)
	if err != nil {
		return err
	}
	sw := lab.FullSweep()
	if *quick {
		sw = lab.QuickSweep()
	}
	if v, err := parseList("sizes", *sizes, atoi); err != nil {
		return err
	} else if v != nil {
		sw.Sizes = v
	}
	if v, err := parseList("rates", *rates, atof); err != nil {
		return err
	} else if v != nil {
		sw.Rates = v
	}
	if v, err := parseList("flows", *flows, atoi); err != nil {
		return err
	} else if v != nil {
		sw.Flows = v
	}
	if v, err := parseList("rules", *rules, atoi); err != nil {
		return err
	} else if v != nil {
		sw.Rules = v
	}
	if v, err := parseList("mems", *mems, atoBytes); err != nil {
		return err
	} else if v != nil {
		sw.Mems = v
	}
	if v, err := parseList("cpus", *cpus, atof); err != nil {
		return err
	} else if v != nil {
		sw.CPUs = v
	}
	sw.Cold = *cold
	if *duration > 0 {
		sw.Duration = *duration
	}
	if *warmup >= 0 {
		sw.Warmup = *warmup
	}
	if *repeat > 0 {
		sw.Repeat = *repeat
	}
	if err := sw.Validate(); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if *port == 0 || *port > 65535 {
		return fmt.Errorf("%w: --port %d out of range", errUsage, *port)
	}
	if err := ovs.CheckPrerequisites(""); err != nil {
		return err
	}
	n := len(sw.Conditions())
	fmt.Fprintf(stdout, "ovsprobe lab: %d conditions x %d of %v (+%v warmup) and the floor, output in %s\n", n, max(sw.Repeat, 1), sw.Duration, sw.Warmup, *out)
	sum, err := lab.Run(ctx, lab.Options{
		Out: *out, Sweep: sw, Response: *response, Seed: *seed, Resamples: *resamples, Port: uint16(*port),
		Logger: log, Progress: stdout, NoPlots: *noPlots, InOrder: *inOrder,
	})
	if err != nil {
		if errors.Is(err, context.Canceled) {
			return err
		}
		return err
	}
	fmt.Fprintf(stdout, "\nfloor (no switch) p50 %.1f us\nmodel of %s: nested-CV held-out R^2 %.3f, RMSE %.2f us; terms %v\nwrote %s/{conditions.csv,samples/,distributions/,model.json,report.md} in %v\n",
		sum.FloorUS, *response, sum.R2, sum.RMSEUS, sum.Terms, *out, sum.Elapsed.Round(time.Second))
	for _, w := range sum.Warnings {
		fmt.Fprintf(stdout, "warning: %s\n", w)
	}
	return nil
}

func runCleanup(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("cleanup", "", stderr)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := ovs.CheckPrerequisites(""); err != nil {
		return err
	}
	removed, err := ovs.Cleanup(ctx, ovs.CleanupOptions{})
	for _, r := range removed {
		fmt.Fprintf(stdout, "removed %s\n", r)
	}
	if err != nil {
		return err
	}
	if len(removed) == 0 {
		fmt.Fprintln(stdout, "nothing to clean up")
	}
	return nil
}
