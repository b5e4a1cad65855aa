package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"time"

	"github.com/quiot/quiot/probe/lab"
	"github.com/quiot/quiot/probe/measure"
	"github.com/quiot/quiot/probe/netns"
	"github.com/quiot/quiot/probe/ovs"
	"github.com/quiot/quiot/probe/stats"
	"github.com/quiot/quiot/probe/watch"
)

func init() {
	register(command{name: "measure", summary: "time probe packets from --ingress to --egress for one condition", run: runMeasure})
	register(command{name: "watch", summary: "time real traffic (e.g. QUIC) crossing the switch, live percentiles", run: runWatch})
}

// checkInterface fails clearly when ifname does not exist in namespace ns.
func checkInterface(flagName, ifname, ns string) error {
	if ifname == "" {
		return fmt.Errorf("%w: --%s is required", errUsage, flagName)
	}
	err := netns.Do(ns, func() error {
		_, err := net.InterfaceByName(ifname)
		return err
	})
	if err != nil {
		where := "this network namespace"
		if ns != "" {
			where = "network namespace " + ns
		}
		return fmt.Errorf("--%s: no interface %q in %s: %v", flagName, ifname, where, err)
	}
	return nil
}

func needRoot(what string) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("%s %w", what, ovs.ErrNotRoot)
	}
	return nil
}

func runMeasure(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("measure", "--ingress IF --egress IF --dst IP:PORT [--gen-netns NS --sink-netns NS] [condition flags] [--out DIR] [--bridge BR]", stderr)
	ingress := fs.String("ingress", "", "switch port where probe packets enter (required)")
	egress := fs.String("egress", "", "switch port where they leave (required)")
	ingressNS := fs.String("ingress-netns", "", "network namespace of --ingress (empty = current)")
	egressNS := fs.String("egress-netns", "", "network namespace of --egress (empty = current)")
	genNS := fs.String("gen-netns", "", "network namespace to send the probe from (empty = current)")
	sinkNS := fs.String("sink-netns", "", "network namespace where a UDP sink listens at --dst (empty = none)")
	dst := fs.String("dst", "", "probe destination IP:PORT (required)")
	size := fs.Int("size", 128, "Ethernet frame size in bytes (62..1514)")
	rate := fs.Float64("rate", 1000, "packets per second")
	flows := fs.Int("flows", 1, "distinct flows (source ports)")
	duration := fs.Duration("duration", 2*time.Second, "measured time")
	warmup := fs.Duration("warmup", 0, "warmup sent before the measured time")
	poisson := fs.Bool("poisson", false, "Poisson instead of constant spacing")
	burst := fs.Int("burst", 1, "packets per burst")
	out := fs.String("out", "", "append the condition to DIR/conditions.csv with samples and distribution (for ovsprobe fit)")
	bridge := fs.String("bridge", "", "record this OVS bridge's datapath counters, rules and ovs-vswitchd CPU/RSS")
	ovsDB := fs.String("ovs-db", "", "OVSDB remote for ovs-vsctl (empty = the system's)")
	ovsTarget := fs.String("ovs-target", "", "ovs-appctl target of ovs-vswitchd (empty = the system's)")
	ovsRunDir := fs.String("ovs-rundir", "", "OVS run directory (empty = the system's)")
	rulesLabel := fs.Int("rules", 0, "record the condition's filler OpenFlow rule count in conditions.csv (set up by you; measure does not add rules)")
	memLabel := fs.String("mem", "0", "record ovs-vswitchd's memory limit (K/M/G; 0 = unlimited) in conditions.csv (set up by you, e.g. in its cgroup)")
	cpusLabel := fs.Float64("cpus", 0, "record ovs-vswitchd's CPU quota in cores (0 = unlimited) in conditions.csv (set up by you)")
	coldLabel := fs.Bool("cold", false, "record the condition as cold (datapath flows flushed by you before it, no --warmup)")
	resamples := fs.Int("resamples", 1000, "bootstrap replicates")
	seed := fs.Uint64("seed", 1, "seed of the bootstrap and Poisson gaps")
	logLevel := fs.String("log-level", "warn", "log level")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	log, err := newLogger(stderr, *logLevel)
	if err != nil {
		return err
	}
	if *dst == "" {
		return fmt.Errorf("%w: --dst IP:PORT is required", errUsage)
	}
	ap, err := netip.ParseAddrPort(*dst)
	if err != nil || ap.Port() == 0 {
		return fmt.Errorf("%w: --dst %q is not IP:PORT", errUsage, *dst)
	}
	memBytes, err := parseBytes(*memLabel)
	if err != nil || memBytes < 0 || *rulesLabel < 0 || *cpusLabel < 0 {
		return fmt.Errorf("%w: --rules, --mem and --cpus must be non-negative numbers", errUsage)
	}
	if err := needRoot("ovsprobe measure"); err != nil {
		return err
	}
	if err := checkInterface("ingress", *ingress, *ingressNS); err != nil {
		return err
	}
	if err := checkInterface("egress", *egress, *egressNS); err != nil {
		return err
	}
	row := lab.Row{Condition: lab.Condition{Path: "ovs", Size: *size, Rate: *rate, Flows: *flows,
		Rules: *rulesLabel, MemBytes: memBytes, CPUs: *cpusLabel, Cold: *coldLabel}}
	var rec *ovsRecord
	if *bridge != "" {
		oc := &ovs.Client{DB: *ovsDB, Target: *ovsTarget, RunDir: *ovsRunDir}
		if rec, err = startOVSRecord(ctx, oc, *bridge, &row); err != nil {
			return err
		}
	} else {
		row.Path = "measure"
	}
	t0 := time.Now()
	res, err := measure.Run(ctx, measure.Options{
		IngressIf: *ingress, EgressIf: *egress, IngressNamespace: *ingressNS, EgressNamespace: *egressNS,
		GenNamespace: *genNS, SinkNamespace: *sinkNS, Dst: ap, Logger: log,
	}, measure.Condition{Size: *size, Rate: *rate, Flows: *flows, Duration: *duration, Warmup: *warmup, Poisson: *poisson, Burst: *burst, Seed: *seed})
	if err != nil {
		return err
	}
	if err := checkMatched(res, *ingress, *egress, ap); err != nil {
		return err
	}
	s, err := stats.Summarize(stats.Micros(res.Delays), stats.Options{Resamples: *resamples, Seed: *seed})
	if err != nil {
		return err
	}
	printMeasurement(stdout, *ingress, *egress, res, s)
	if *out == "" {
		return nil
	}
	row.DurationS = time.Since(t0).Seconds()
	setResults(&row, res, s)
	if rec != nil {
		rec.finish(ctx, &row)
	}
	row.HostMemAvailBytes, _ = ovs.HostMemAvailable("")
	row.HostLoad1, _ = ovs.HostLoad1("")
	row, err = lab.AppendCondition(*out, row, res.Delays)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "appended %s to %s/conditions.csv\n", row.ID, *out)
	return nil
}

// checkMatched fails with lab.ErrNoTraffic, saying which side saw nothing,
// when no probe packet was seen on both ports.
func checkMatched(res *measure.Result, ingress, egress string, dst netip.AddrPort) error {
	if res.Matched > 0 {
		return nil
	}
	if res.IngressSeen == 0 {
		return fmt.Errorf("%w: %s saw none of the %d probe packets sent to %s (wrong interface or namespace?)", lab.ErrNoTraffic, ingress, res.Sent, dst)
	}
	return fmt.Errorf("%w: %s saw %d probe packets but %s saw none of them (are they forwarded between the two?)", lab.ErrNoTraffic, ingress, res.IngressSeen, egress)
}

// printMeasurement writes one condition's packet counts, delay percentiles
// and, when it was timed, the first packet's delay.
func printMeasurement(w io.Writer, ingress, egress string, res *measure.Result, s stats.Summary) {
	fmt.Fprintf(w, "%s -> %s: %d sent, %d matched, %d lost, %d duplicated, %d reordered, ring drops %d/%d\n",
		ingress, egress, res.Sent, res.Matched, res.Lost, res.Duplicated, res.Reordered, res.IngressRingDrops, res.EgressRingDrops)
	fmt.Fprintf(w, "delay us: min %.1f  p50 %.1f [%.1f, %.1f]  p99 %.1f [%.1f, %.1f]  p99.9 %.1f  PDV %.1f  max %.1f\n",
		s.Min, s.P50, s.P50CI.Lo, s.P50CI.Hi, s.P99, s.P99CI.Lo, s.P99CI.Hi, s.P999, s.PDV, s.Max)
	if res.FirstOK {
		fmt.Fprintf(w, "first packet (cold): %.1f us\n", float64(res.FirstDelay)/1e3)
	}
}

// setResults copies the measurement's counts, first-packet delay and
// delay summary into row.
func setResults(row *lab.Row, res *measure.Result, s stats.Summary) {
	if res.FirstOK {
		row.FirstDelayUS = float64(res.FirstDelay) / 1e3
	}
	row.Sent, row.Matched, row.Lost, row.Duplicated, row.Reordered = res.Sent, res.Matched, res.Lost, res.Duplicated, res.Reordered
	row.IngressRingDrops, row.EgressRingDrops, row.Stats = res.IngressRingDrops, res.EgressRingDrops, s
}

// ovsRecord samples an OVS bridge around one condition: its datapath
// counters, OpenFlow rule count and ovs-vswitchd's CPU and memory.
type ovsRecord struct {
	c      *ovs.Client
	bridge string
	before ovs.Counters   // datapath counters at the start
	pid    int            // ovs-vswitchd's pid; 0 when not found
	pb     ovs.ProcSample // its CPU time and memory at the start
}

// startOVSRecord notes the OVS version and bridge's datapath type in row
// and takes the starting samples. Without a readable ovs-vswitchd pid file
// the record leaves out its CPU and memory.
func startOVSRecord(ctx context.Context, c *ovs.Client, bridge string, row *lab.Row) (*ovsRecord, error) {
	r := &ovsRecord{c: c, bridge: bridge}
	var err error
	if row.OVSVersion, err = c.Version(ctx); err != nil {
		return nil, fmt.Errorf("--bridge %s: %w", bridge, err)
	}
	if row.Datapath, err = c.DatapathType(ctx, bridge); err != nil {
		return nil, fmt.Errorf("--bridge %s: %w", bridge, err)
	}
	if r.before, err = c.Snapshot(ctx); err != nil {
		return nil, err
	}
	if c.RunDir != "" {
		c.PIDFile = c.RunDir + "/ovs-vswitchd.pid"
	}
	if r.pid, err = c.VswitchdPID(); err == nil {
		r.pb, _ = ovs.SampleProcess("", r.pid)
	}
	return r, nil
}

// finish adds to row what the bridge did since the start: datapath counter
// deltas, the OpenFlow rule count and ovs-vswitchd's CPU share and memory.
// A sample that fails is left out.
func (r *ovsRecord) finish(ctx context.Context, row *lab.Row) {
	if after, err := r.c.Snapshot(ctx); err == nil {
		d := after.Sub(r.before)
		row.DPHit, row.DPMissed, row.DPLost, row.DPFlows = d.Hit, d.Missed, d.Lost, d.Flows
		row.EMCHits, row.SMCHits, row.MegaflowHits = d.PMD["emc hits"], d.PMD["smc hits"], d.PMD["megaflow hits"]
		row.Upcalls = d.PMD["miss with success upcall"] + d.PMD["miss with failed upcall"]
	}
	if n, err := r.c.RuleCount(ctx, r.bridge); err == nil {
		row.OFRules = n
	}
	if r.pid > 0 {
		if pa, err := ovs.SampleProcess("", r.pid); err == nil {
			row.VswitchdCPUPct, row.VswitchdRSSBytes, row.VswitchdPeakRSS = ovs.CPUPercent(r.pb, pa), pa.RSSBytes, pa.PeakRSSBytes
		}
	}
}

func runWatch(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("watch", "--ingress IF --egress IF [--filter udp:4433] [--duration D]", stderr)
	ingress := fs.String("ingress", "", "switch port where the traffic enters (required)")
	egress := fs.String("egress", "", "switch port where it leaves (required)")
	ingressNS := fs.String("ingress-netns", "", "network namespace of --ingress (empty = current)")
	egressNS := fs.String("egress-netns", "", "network namespace of --egress (empty = current)")
	filter := fs.String("filter", "udp:4433", "traffic to time: udp, udp:PORT, udp:dst:PORT, udp:src:PORT")
	duration := fs.Duration("duration", 0, "how long to watch (0 = until Ctrl-C)")
	interval := fs.Duration("interval", time.Second, "time between output lines")
	logLevel := fs.String("log-level", "warn", "log level")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	log, err := newLogger(stderr, *logLevel)
	if err != nil {
		return err
	}
	if *duration < 0 || *interval <= 0 {
		return fmt.Errorf("%w: --duration must not be negative and --interval must be positive", errUsage)
	}
	if err := needRoot("ovsprobe watch"); err != nil {
		return err
	}
	if err := checkInterface("ingress", *ingress, *ingressNS); err != nil {
		return err
	}
	if err := checkInterface("egress", *egress, *egressNS); err != nil {
		return err
	}
	sum, err := watch.Run(ctx, watch.Options{
		IngressIf: *ingress, EgressIf: *egress, IngressNamespace: *ingressNS, EgressNamespace: *egressNS,
		Filter: *filter, Duration: *duration, Interval: *interval, Out: stdout, Logger: log,
		OnReady: func() { fmt.Fprintf(stdout, "watching %s -> %s (%s)\n", *ingress, *egress, *filter) },
	})
	if sum != nil {
		fmt.Fprintf(stdout, "total: ingress %d egress %d packets; matched %d; p50 %v p99 %v p99.9 %v (min %v, max %v); ring drops %d/%d\n",
			sum.IngressPackets, sum.EgressPackets, sum.Matched, sum.P50, sum.P99, sum.P999, sum.Min, sum.Max, sum.IngressRingDrops, sum.EgressRingDrops)
	}
	if errors.Is(err, context.Canceled) && *duration == 0 {
		return nil // Ctrl-C is how an open-ended watch ends
	}
	return err
}
