// Package lab runs the ovsprobe sweep: it builds a throwaway OVS testbed
// (probe/ovs), measures the probe's own floor through a path with no switch,
// then times packets through OVS under each condition of a Sweep (probe/
// measure), and writes conditions.csv, per-packet samples, per-condition
// delay distribution tables, model.json and report.md with plots. The testbed
// is always torn down: on success, on error and when ctx is cancelled.
package lab

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/quiot/quiot/probe/measure"
	"github.com/quiot/quiot/probe/ovs"
	"github.com/quiot/quiot/probe/stats"
)

// MeasureFunc measures one condition; measure.Run by default.
type MeasureFunc func(ctx context.Context, o measure.Options, c measure.Condition) (*measure.Result, error)

// ErrNoTraffic means no probe packet crossed a path: a broken testbed or
// interfaces that see no traffic.
var ErrNoTraffic = errors.New("no probe packet crossed the path")

// Options configures Run. Out is required; the rest has defaults.
type Options struct {
	// Out is the output directory (created).
	Out string
	// Sweep is the set of conditions; zero value means QuickSweep().
	Sweep Sweep
	// Response is the statistic the model fits; "" means "p50_us".
	Response string
	// Seed seeds bootstrap and cross-validation; 0 means 1.
	Seed uint64
	// Resamples is the bootstrap replicate count; 0 means 500.
	Resamples int
	// Port is the probe's UDP destination port; 0 means 9000.
	Port uint16
	// Logger receives diagnostics; nil discards.
	Logger *slog.Logger
	// Progress receives one line per condition; nil discards.
	Progress io.Writer
	// Testbed configures the OVS testbed (its Logger defaults to Logger).
	Testbed ovs.TestbedOptions
	// Measure replaces measure.Run (tests).
	Measure MeasureFunc
	// NoPlots skips the PNG plots (report.md still written).
	NoPlots bool
	// InOrder measures the conditions in sweep order; by default they run
	// in a random order (seeded by Seed), so that a drift of the host (load,
	// memory, caches) does not masquerade as the effect of a factor.
	InOrder bool
}

func (o *Options) setDefaults() error {
	if o.Out == "" {
		return errors.New("no output directory")
	}
	if o.Sweep.Sizes == nil && o.Sweep.Rates == nil && o.Sweep.Flows == nil {
		o.Sweep = QuickSweep()
	}
	if err := o.Sweep.Validate(); err != nil {
		return err
	}
	if o.Response == "" {
		o.Response = "p50_us"
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	if o.Resamples == 0 {
		o.Resamples = 500
	}
	if o.Port == 0 {
		o.Port = 9000
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	if o.Testbed.Logger == nil {
		o.Testbed.Logger = o.Logger
	}
	o.Testbed.Floor = true
	if o.Measure == nil {
		o.Measure = measure.Run
	}
	return nil
}

// Summary is what Run reports.
type Summary struct {
	// Rows holds the floor row first, then one row per OVS condition.
	Rows []Row
	// FloorUS is the floor's median delay.
	FloorUS float64
	// R2 and RMSEUS are the model's held-out fit figures.
	R2, RMSEUS float64
	// Terms are the model's chosen terms.
	Terms []string
	// Elapsed is the wall time of the run.
	Elapsed time.Duration
	// Warnings lists conditions skipped or suspect.
	Warnings []string
}

// Run performs the sweep. The testbed is torn down before Run returns,
// whatever happens; when ctx is cancelled Run returns ctx's error after the
// teardown and keeps the rows written so far.
func Run(ctx context.Context, o Options) (sum *Summary, err error) {
	if err := o.setDefaults(); err != nil {
		return nil, err
	}
	t0 := time.Now()
	// Per-condition files of an earlier run in the same directory would mix
	// with this run's: start those two subdirectories afresh.
	for _, d := range []string{filepath.Join(o.Out, "samples"), filepath.Join(o.Out, "distributions")} {
		if err := os.RemoveAll(d); err != nil {
			return nil, fmt.Errorf("clear %s: %w", d, err)
		}
	}
	for _, d := range []string{o.Out, filepath.Join(o.Out, "samples"), filepath.Join(o.Out, "distributions")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("create output directory: %w", err)
		}
	}
	fmt.Fprintf(o.Progress, "starting OVS testbed\n")
	tb, err := ovs.StartTestbed(ctx, o.Testbed)
	if err != nil {
		return nil, fmt.Errorf("testbed: %w", err)
	}
	sum = &Summary{}
	r := &runner{o: o, tb: tb, sum: sum}
	defer func() {
		if r.tb == nil {
			return
		}
		fmt.Fprintf(o.Progress, "tearing down testbed %s\n", r.tb.ID)
		if cerr := r.tb.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("testbed teardown: %w", cerr))
		}
	}()
	fmt.Fprintf(o.Progress, "testbed %s up: Open vSwitch %s, %s datapath\n", tb.ID, tb.Version, tb.Datapath)

	rw, err := CreateRows(filepath.Join(o.Out, "conditions.csv"))
	if err != nil {
		return nil, err
	}
	defer rw.Close()
	r.rw = rw

	conds := o.Sweep.Conditions()
	rng := rand.New(rand.NewPCG(o.Seed, 0x0de7))
	if !o.InOrder {
		rng.Shuffle(len(conds), func(i, j int) { conds[i], conds[j] = conds[j], conds[i] })
	}
	floor := Condition{ID: "floor", Path: "floor", Size: first(o.Sweep.Sizes), Rate: o.Sweep.FloorRate, Flows: 1}
	if floor.Rate == 0 {
		floor.Rate = first(o.Sweep.Rates)
	}
	fmt.Fprintf(o.Progress, "[floor] %s (no switch: veth pairs spliced by tc mirred)\n", floor.Describe())
	row, err := r.measure(ctx, floor, 1)
	if err != nil {
		return sum, fmt.Errorf("floor: %w", err)
	}
	sum.FloorUS = row.Stats.P50
	reps := max(o.Sweep.Repeat, 1)
	total, done := reps*len(conds), 0
	for rep := 1; rep <= reps; rep++ {
		if rep > 1 && !o.InOrder {
			rng.Shuffle(len(conds), func(i, j int) { conds[i], conds[j] = conds[j], conds[i] })
		}
		for _, c := range conds {
			if err := ctx.Err(); err != nil {
				return sum, err
			}
			done++
			fmt.Fprintf(o.Progress, "[%d/%d] %s %s\n", done, total, c.ID, c.Describe())
			if _, err := r.measure(ctx, c, rep); err != nil {
				if errors.Is(err, errSkip) {
					sum.Warnings = append(sum.Warnings, fmt.Sprintf("%s skipped: %v", c.ID, err))
					fmt.Fprintf(o.Progress, "  skipped: %v\n", err)
					continue
				}
				if ctx.Err() == nil && !r.aliveAfterError() {
					// ovs-vswitchd died (OOM-killed under a memory limit
					// it cannot live in at this load): a result, not a
					// broken run. Record it and go on with a new testbed.
					if err := r.switchDied(ctx, c, rep, err); err != nil {
						return sum, err
					}
					continue
				}
				return sum, fmt.Errorf("condition %s (%s): %w", c.ID, c.Describe(), err)
			}
		}
	}
	if err := writeWarnings(filepath.Join(o.Out, "warnings.txt"), sum.Warnings); err != nil {
		return sum, err
	}
	fmt.Fprintf(o.Progress, "fitting model\n")
	if err := Analyze(o.Out, AnalyzeOptions{Response: o.Response, Seed: o.Seed, NoPlots: o.NoPlots, Warnings: sum.Warnings, Summary: sum}); err != nil {
		return sum, err
	}
	sum.Elapsed = time.Since(t0)
	return sum, nil
}

var errSkip = errors.New("condition cannot run here")

// aliveAfterError reports whether ovs-vswitchd still runs after a
// condition failed, giving a daemon that is being killed a moment to be
// reaped (its exit is noticed by a goroutine).
func (r *runner) aliveAfterError() bool {
	for range 20 {
		if !r.tb.Alive() {
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
	return r.tb.Alive()
}

// switchDied records condition c as failed because ovs-vswitchd died
// during it (cause), and replaces the testbed with a new one.
func (r *runner) switchDied(ctx context.Context, c Condition, rep int, cause error) error {
	msg := "ovs-vswitchd died during the condition"
	if c.MemBytes > 0 {
		msg += fmt.Sprintf(" (memory limit %d MiB: OOM-killed)", c.MemBytes>>20)
	}
	r.sum.Warnings = append(r.sum.Warnings, fmt.Sprintf("%s (%s) repeat %d: %s; testbed restarted", c.ID, c.Describe(), rep, msg))
	fmt.Fprintf(r.o.Progress, "  FAILED: %s (%v); restarting the testbed\n", msg, cause)
	row := Row{Condition: c, Repeat: rep, Error: msg, Datapath: r.tb.Datapath, OVSVersion: r.tb.Version}
	if err := r.rw.Write(row); err != nil {
		return err
	}
	r.sum.Rows = append(r.sum.Rows, row)
	old := r.tb
	r.tb = nil
	if err := old.Close(); err != nil {
		r.o.Logger.Warn("teardown of the dead testbed", "id", old.ID, "err", err)
	}
	tb, err := ovs.StartTestbed(ctx, r.o.Testbed)
	if err != nil {
		return fmt.Errorf("restart testbed after %s: %w", c.ID, err)
	}
	fmt.Fprintf(r.o.Progress, "testbed %s up\n", tb.ID)
	r.tb, r.rules, r.lim = tb, 0, ovs.Limits{}
	return nil
}

type runner struct {
	o     Options
	tb    *ovs.Testbed
	rw    *RowWriter
	sum   *Summary
	rules int
	lim   ovs.Limits
}

// apply brings the switch to the condition's rules and limits.
func (r *runner) apply(ctx context.Context, c Condition) error {
	if c.Rules != r.rules {
		if err := r.tb.ResetRules(ctx); err != nil {
			return err
		}
		if err := r.tb.OVS.AddFlows(ctx, r.tb.Bridge, ovs.FillerRules(c.Rules, 200)); err != nil {
			return err
		}
		r.rules = c.Rules
		// New rules invalidate the datapath flows; start from a clean cache.
		if err := r.tb.OVS.FlushDatapathFlows(ctx); err != nil {
			return err
		}
	}
	lim := ovs.Limits{MemoryBytes: c.MemBytes, CPUs: c.CPUs}
	if cg := r.tb.Cgroup(); cg != nil && lim.MemoryBytes > 0 {
		// Without swap, a limit at or below what ovs-vswitchd already holds
		// gets it OOM-killed: keep 1 MiB of headroom or skip.
		if use, err := cg.MemoryUsage(); err == nil && lim.MemoryBytes < use+1<<20 {
			return fmt.Errorf("%w: memory limit %d MiB is not above the %.1f MiB ovs-vswitchd already uses (+1 MiB headroom)", errSkip, lim.MemoryBytes>>20, float64(use)/(1<<20))
		}
	}
	if lim != r.lim {
		if err := r.tb.SetLimits(lim); err != nil {
			if errors.Is(err, ovs.ErrCgroupUnsupported) {
				return fmt.Errorf("%w: %v", errSkip, err)
			}
			// Could not shrink (EBUSY): lift the limit again and skip.
			_ = r.tb.SetLimits(ovs.Limits{})
			r.lim = ovs.Limits{}
			return fmt.Errorf("%w: %v", errSkip, err)
		}
		r.lim = lim
	}
	if c.Cold {
		if err := r.tb.OVS.FlushDatapathFlows(ctx); err != nil {
			return err
		}
	}
	return nil
}

func (r *runner) measure(ctx context.Context, c Condition, rep int) (Row, error) {
	o := r.o
	path := r.tb.Switch
	if c.Path == "floor" {
		path = *r.tb.Floor
	} else if err := r.apply(ctx, c); err != nil {
		return Row{}, err
	}
	warm := o.Sweep.Warmup
	if c.Cold {
		warm = 0
	}
	mo := measure.Options{
		IngressIf: path.Ingress, EgressIf: path.Egress,
		GenNamespace: path.GenNS, SinkNamespace: path.SinkNS,
		Dst:    netip.AddrPortFrom(path.Dst, o.Port),
		Logger: o.Logger,
	}
	mc := measure.Condition{Size: c.Size, Rate: c.Rate, Flows: c.Flows, Duration: o.Sweep.Duration, Warmup: warm, Seed: o.Seed}

	ovsc := r.tb.OVS
	before, err := ovsc.Snapshot(ctx)
	if err != nil {
		return Row{}, err
	}
	pb, err := ovs.SampleProcess("", r.tb.VswitchdPID)
	if err != nil {
		return Row{}, err
	}
	t0 := time.Now()
	res, err := o.Measure(ctx, mo, mc)
	if err != nil {
		return Row{}, err
	}
	if !r.tb.Alive() {
		return Row{}, fmt.Errorf("ovs-vswitchd died during the condition (memory limit %d bytes too low?)", c.MemBytes)
	}
	pa, err := ovs.SampleProcess("", r.tb.VswitchdPID)
	if err != nil {
		return Row{}, err
	}
	after, err := ovsc.Snapshot(ctx)
	if err != nil {
		return Row{}, err
	}
	if res.Matched == 0 || len(res.Delays) == 0 {
		return Row{}, fmt.Errorf("%w: sent %d, matched 0 between %s and %s", ErrNoTraffic, res.Sent, path.Ingress, path.Egress)
	}
	delays := stats.Micros(res.Delays)
	s, err := stats.Summarize(delays, stats.Options{Resamples: o.Resamples, Seed: o.Seed})
	if err != nil {
		return Row{}, err
	}
	d := after.Sub(before)
	row := Row{
		Condition: c, Repeat: rep, DurationS: time.Since(t0).Seconds(),
		Sent: res.Sent, Matched: res.Matched, Lost: res.Lost, Duplicated: res.Duplicated, Reordered: res.Reordered,
		IngressRingDrops: res.IngressRingDrops, EgressRingDrops: res.EgressRingDrops,
		Stats:    s,
		Datapath: r.tb.Datapath, OVSVersion: r.tb.Version,
		VswitchdCPUPct: ovs.CPUPercent(pb, pa), VswitchdRSSBytes: pa.RSSBytes, VswitchdPeakRSS: pa.PeakRSSBytes,
	}
	if res.FirstOK {
		row.FirstDelayUS = float64(res.FirstDelay) / float64(time.Microsecond)
	}
	if c.Path == "ovs" {
		row.DPHit, row.DPMissed, row.DPLost, row.DPFlows = d.Hit, d.Missed, d.Lost, d.Flows
		row.EMCHits, row.SMCHits, row.MegaflowHits = d.PMD["emc hits"], d.PMD["smc hits"], d.PMD["megaflow hits"]
		row.Upcalls = d.PMD["miss with success upcall"] + d.PMD["miss with failed upcall"]
		if n, err := ovsc.RuleCount(ctx, r.tb.Bridge); err == nil {
			row.OFRules = n
		}
	} else {
		row.Datapath = "none"
	}
	if cg := r.tb.Cgroup(); cg != nil {
		row.CgroupMemBytes, _ = cg.MemoryUsage()
	}
	row.HostMemAvailBytes, _ = ovs.HostMemAvailable("")
	row.HostLoad1, _ = ovs.HostLoad1("")
	if err := r.rw.Write(row); err != nil {
		return Row{}, err
	}
	if err := writeSamples(filepath.Join(o.Out, "samples", row.FileID()+".csv"), res.Delays); err != nil {
		return Row{}, err
	}
	if err := writeDistribution(filepath.Join(o.Out, "distributions", row.FileID()+".csv"), delays); err != nil {
		return Row{}, err
	}
	r.sum.Rows = append(r.sum.Rows, row)
	msg := fmt.Sprintf("  p50 %.1f us [%.1f, %.1f]  p99 %.1f us  p99.9 %.1f us  sent %d matched %d lost %d",
		s.P50, s.P50CI.Lo, s.P50CI.Hi, s.P99, s.P999, res.Sent, res.Matched, res.Lost)
	if row.IngressRingDrops+row.EgressRingDrops > 0 {
		msg += fmt.Sprintf("  RING DROPS %d/%d", row.IngressRingDrops, row.EgressRingDrops)
		r.sum.Warnings = append(r.sum.Warnings, fmt.Sprintf("%s: capture ring drops ingress %d egress %d: delays incomplete", c.ID, row.IngressRingDrops, row.EgressRingDrops))
	}
	if c.Path == "ovs" {
		msg += fmt.Sprintf("  dp hit %d missed %d  vswitchd %.0f%% cpu %d MiB", d.Hit, d.Missed, row.VswitchdCPUPct, row.VswitchdRSSBytes>>20)
	}
	fmt.Fprintln(o.Progress, msg)
	return row, nil
}

// writeWarnings writes the run's warnings (skipped and failed conditions),
// one per line, so that a later `ovsprobe fit --report` keeps them.
func writeWarnings(path string, w []string) error {
	var b strings.Builder
	for _, s := range w {
		b.WriteString(strings.ReplaceAll(s, "\n", " "))
		b.WriteByte('\n')
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("write warnings: %w", err)
	}
	return nil
}

// readWarnings reads warnings.txt; a missing file means none.
func readWarnings(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read warnings: %w", err)
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out, nil
}

// writeSamples writes one delay per line in nanoseconds, in sequence order.
func writeSamples(path string, d []time.Duration) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("write samples: %w", err)
	}
	w := bufio.NewWriter(f)
	w.WriteString("delay_ns\n")
	for _, v := range d {
		w.WriteString(strconv.FormatInt(int64(v), 10))
		w.WriteByte('\n')
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return fmt.Errorf("write samples: %w", err)
	}
	return f.Close()
}

// DistributionPoints is the number of intervals of each distribution table
// (DistributionPoints+1 rows).
const DistributionPoints = 200

// writeDistribution writes the empirical CDF as (delay_us, cdf) rows, from
// cdf 0 (the minimum) to 1 (the maximum) in even steps: the shape ns-3's
// EmpiricalRandomVariable::CDF and OMNeT++'s histogram-based sampling take.
func writeDistribution(path string, us []float64) error {
	vals, probs := stats.CDF(us, DistributionPoints)
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("write distribution: %w", err)
	}
	w := bufio.NewWriter(f)
	w.WriteString("delay_us,cdf\n")
	for i := range vals {
		fmt.Fprintf(w, "%.3f,%.4f\n", vals[i], probs[i])
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return fmt.Errorf("write distribution: %w", err)
	}
	return f.Close()
}
