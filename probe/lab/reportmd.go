package lab

import (
	"fmt"
	"math"
	"os"
	"slices"
	"sort"
	"strings"

	"github.com/quiot/quiot/probe/model"
)

// us formats a delay in microseconds: one decimal below 1000 us, none above.
func us(v float64) string {
	if math.Abs(v) >= 1000 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.1f", v)
}

func memLabel(b int64) string {
	if b == 0 {
		return "unlimited"
	}
	return fmt.Sprintf("%d MiB", b>>20)
}

// cell renders a condition's p50 with its CI, its p99, and the loss when
// any (delays of lost packets are not in the statistics).
func cell(r Row) string {
	if r.Error != "" && r.Stats.N == 0 {
		return "**failed**: " + r.Error
	}
	s := r.Stats
	c := fmt.Sprintf("%s [%s, %s] / %s", us(s.P50), us(s.P50CI.Lo), us(s.P50CI.Hi), us(s.P99))
	if r.Sent > 0 && r.Lost > 0 {
		c += fmt.Sprintf(" (lost %.1f %%)", 100*float64(r.Lost)/float64(r.Sent))
	}
	return c
}

// effectTable writes a table of the representative rows at the baseline of
// every factor but the named one and the rate: one line per level of the
// factor, one column per rate.
func effectTable(b *strings.Builder, rows []Row, base Row, factor, title string, level func(Row) float64, label func(Row) string) {
	type key struct{ lvl, rate float64 }
	cells := map[key]Row{}
	var levels, rates []float64
	labels := map[float64]string{}
	for _, r := range rows {
		if r.Path != "ovs" || (r.Stats.N == 0 && r.Error == "") || r.Cold != base.Cold || !isBaseline(r, base, factor, "rate") {
			continue
		}
		l := level(r)
		cells[key{l, r.Rate}] = r
		levels, rates = append(levels, l), append(rates, r.Rate)
		labels[l] = label(r)
	}
	slices.Sort(levels)
	slices.Sort(rates)
	levels, rates = slices.Compact(levels), slices.Compact(rates)
	if len(levels) < 2 {
		return
	}
	fmt.Fprintf(b, "\n### %s\n\n| %s |", title, factor)
	for _, rt := range rates {
		fmt.Fprintf(b, " %g pps |", rt)
	}
	b.WriteString("\n|---|")
	for range rates {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	for _, l := range levels {
		fmt.Fprintf(b, "| %s |", labels[l])
		for _, rt := range rates {
			if r, ok := cells[key{l, rt}]; ok {
				fmt.Fprintf(b, " %s |", cell(r))
			} else {
				b.WriteString(" |")
			}
		}
		b.WriteString("\n")
	}
}

// coldTable compares cold and warm conditions per flow count.
func coldTable(b *strings.Builder, rows []Row, base Row) {
	var cold []Row
	for _, r := range rows {
		if r.Path == "ovs" && r.Cold && r.Stats.N > 0 {
			cold = append(cold, r)
		}
	}
	if len(cold) == 0 {
		return
	}
	sort.Slice(cold, func(i, j int) bool { return cold[i].Flows < cold[j].Flows })
	fmt.Fprintf(b, "\n### Cold vs warm datapath cache (rate %g pps, size %d B)\n\n| flows | warm p50 [95 %% CI] / p99 | cold p50 [95 %% CI] / p99 | cold: first packet | cold: datapath misses (upcalls) |\n|---|---|---|---|---|\n", base.Rate, base.Size)
	for _, c := range cold {
		warm := "n/a"
		for _, r := range rows {
			if !r.Cold && r.Path == "ovs" && r.Flows == c.Flows && isBaseline(r, base, "flows") {
				warm = cell(r)
			}
		}
		fmt.Fprintf(b, "| %d | %s | %s | %s | %d (%.0f) |\n", c.Flows, warm, cell(c), us(c.FirstDelayUS), c.DPMissed, c.Upcalls)
	}
}

func writeEffects(b *strings.Builder, rows []Row) {
	var base Row
	found := false
	for _, r := range rows {
		if r.ID == "c001" && r.Path == "ovs" {
			base, found = r, true
		}
	}
	if !found {
		return
	}
	fmt.Fprintf(b, "\n## How the delay depends on each factor\n\nMeasured, not modelled: each table varies one factor (lines) and the offered rate (columns), every other factor at its baseline (%s); each cell is the condition's median repeat: p50 [95 %% block-bootstrap CI] / p99, in us, and the loss when packets were lost (their delays are missing from the statistics).\n",
		base.Condition.Describe())
	effectTable(b, rows, base, "size", "Frame size", func(r Row) float64 { return float64(r.Size) }, func(r Row) string { return fmt.Sprintf("%d B", r.Size) })
	effectTable(b, rows, base, "flows", "Flows", func(r Row) float64 { return float64(r.Flows) }, func(r Row) string { return fmt.Sprintf("%d", r.Flows) })
	effectTable(b, rows, base, "rules", "OpenFlow rules", func(r Row) float64 { return float64(r.Rules) }, func(r Row) string { return fmt.Sprintf("%d", r.Rules) })
	effectTable(b, rows, base, "mem", "Memory limit of ovs-vswitchd (cgroup)", func(r Row) float64 {
		if r.MemBytes == 0 {
			return math.Inf(-1)
		}
		return -float64(r.MemBytes)
	}, func(r Row) string { return memLabel(r.MemBytes) })
	effectTable(b, rows, base, "cpus", "CPU quota of ovs-vswitchd", func(r Row) float64 {
		if r.CPUs == 0 {
			return math.Inf(-1)
		}
		return -r.CPUs
	}, func(r Row) string {
		if r.CPUs == 0 {
			return "unlimited"
		}
		return fmt.Sprintf("%g cores", r.CPUs)
	})
	coldTable(b, rows, base)
}

func writeModel(b *strings.Builder, m *model.Model) {
	lhs := m.Response
	if m.Transform == "log" {
		lhs = "ln(" + m.Response + ")"
	}
	fmt.Fprintf(b, "\n## Model\n\n%s = sum of the terms below (each coefficient times its term), chosen by forward selection under %d-fold cross-validation over %d conditions (each condition's median repeat).\n\n", lhs, m.Folds, m.NConditions)
	if cv := m.CV; cv != nil {
		inner := fmt.Sprintf("%d-fold", cv.InnerFolds)
		if cv.InnerFolds == 0 {
			inner = "leave-one-out"
		}
		fmt.Fprintf(b, "**Held-out fit, nested cross-validation** (%d outer folds x %d repeats; inside each outer training set the transform and the terms are chosen afresh by %s inner cross-validation, so the held-out conditions never take part in choosing the model): R^2 **%.3f** (sd %.3f, %.3f to %.3f over the repeats), RMSE **%s us** (sd %s, %s to %s). Per outer fold: R^2 %.3f ± %.3f (%.3f to %.3f), RMSE %s ± %s us (%s to %s).\n\n",
			cv.OuterFolds, cv.Repeats, inner, m.R2, cv.R2.SD, cv.R2.Min, cv.R2.Max, us(m.RMSEus), us(cv.RMSEus.SD), us(cv.RMSEus.Min), us(cv.RMSEus.Max),
			cv.FoldR2.Mean, cv.FoldR2.SD, cv.FoldR2.Min, cv.FoldR2.Max, us(cv.FoldRMSEus.Mean), us(cv.FoldRMSEus.SD), us(cv.FoldRMSEus.Min), us(cv.FoldRMSEus.Max))
		fmt.Fprintf(b, "Without nesting (the folds that chose the terms also scoring them) the same procedure would report R^2 %.3f, RMSE %s us: optimism %+.3f in R^2, %s us in RMSE. In sample: R^2 %.3f, RMSE %s us.\n\n",
			cv.InnerR2, us(cv.InnerRMSEus), cv.OptimismR2, us(cv.OptimismRMSEus), m.R2Train, us(m.RMSETrainUS))
	} else {
		fmt.Fprintf(b, "Held-out R^2 **%.3f**, RMSE **%s us** (in-sample R^2 %.3f, RMSE %s us).\n\n", m.R2, us(m.RMSEus), m.R2Train, us(m.RMSETrainUS))
	}
	boot := m.Bootstrap
	if boot != nil {
		fmt.Fprintf(b, "Coefficient intervals: percentile intervals over %d bootstrap replicates of the whole procedure (conditions resampled with replacement; transform, terms and fit redone on each; a term not selected counts 0; %d replicates chose the %s transform and enter the intervals). \"selected\" is how often the term was chosen, in the bootstrap and in the outer training sets. The bootstrap mean is the bagged coefficient (0 where not selected); a coefficient far from it, or outside its own interval, marks a selection that is unstable on these data. The t-interval assumes the terms were fixed in advance and is shown for comparison only.\n\n", boot.Replicates, boot.Used, m.Transform)
	}
	fmt.Fprintf(b, "| term | coefficient | 95 %% CI | bootstrap mean | selected (bootstrap) | selected (outer folds) | t-interval given the terms |\n|---|---|---|---|---|---|---|\n")
	pct := func(f map[string]float64, t string) string {
		if f == nil {
			return "n/a"
		}
		if t == model.Intercept {
			return "always"
		}
		return fmt.Sprintf("%.0f %%", 100*f[t])
	}
	var bootSel, cvSel map[string]float64
	if boot != nil {
		bootSel = boot.Selected
	}
	if m.CV != nil {
		cvSel = m.CV.Selected
	}
	for _, t := range m.Terms {
		ci, ok := m.CI95[t]
		cis := "n/a"
		if ok {
			cis = fmt.Sprintf("[%.4g, %.4g]", ci[0], ci[1])
		}
		ti := "n/a"
		if c, ok := m.CI95GivenTerms[t]; ok {
			ti = fmt.Sprintf("[%.4g, %.4g]", c[0], c[1])
		}
		bm := "n/a"
		if boot != nil && boot.Mean != nil {
			bm = fmt.Sprintf("%.4g", boot.Mean[t])
		}
		fmt.Fprintf(b, "| `%s` | %.4g | %s | %s | %s | %s | %s |\n", t, m.Coefficients[t], cis, bm, pct(bootSel, t), pct(cvSel, t), ti)
	}
	if boot != nil {
		var others []string
		for t, f := range boot.Selected {
			if f >= 0.2 && !slices.Contains(m.Terms, t) {
				others = append(others, fmt.Sprintf("`%s` %.0f %%", t, 100*f))
			}
		}
		sort.Strings(others)
		if len(others) > 0 {
			fmt.Fprintf(b, "\nTerms not in the model but selected in at least 20 %% of the bootstrap replicates: %s.\n", strings.Join(others, ", "))
		}
	}
	fmt.Fprintf(b, "\nFactor units: size_bytes (frame bytes), rate_kpps (1000 packets/s), flows, rules (filler OpenFlow rules), mem_mib (limit, 0 = unlimited), cpus (quota, 0 = unlimited), cold (1 = datapath flows flushed).\n")
	for _, n := range m.Notes {
		fmt.Fprintf(b, "\nNote: %s\n", n)
	}
}

func writeSimSection(b *strings.Builder, checks []SimCheckRow) {
	if len(checks) == 0 {
		return
	}
	ki := make([]float64, len(checks))
	ks := make([]float64, len(checks))
	over := 0
	for i, c := range checks {
		ki[i], ks[i] = c.KSInterp, c.KSStep
		if c.KSInterp > c.Critical {
			over++
		}
	}
	slices.Sort(ki)
	slices.Sort(ks)
	med := func(x []float64) float64 { return x[len(x)/2] }
	fmt.Fprintf(b, "\n## Simulator tables checked end to end\n\nFor each measured condition, as many values as it has measured delays were drawn from its table `distributions/ID.csv` (%d points) the way a simulator samples it, and compared with the measured delays by the two-sample Kolmogorov-Smirnov distance D (the largest gap between the two CDFs). Interpolated draws (ns-3 `EmpiricalRandomVariable` with `Interpolate=true`): median D %.4f, largest %.4f; %d of %d conditions above the 5 %% critical value of two samples from one distribution. Step draws (first table value with cdf >= u, ns-3's default `Interpolate=false`): median D %.4f, largest %.4f. The table's resolution bounds D by about 1/%d plus sampling noise. Per condition: `simcheck.csv` and the KS column of the conditions table.\n",
		DistributionPoints+1, med(ki), ki[len(ki)-1], over, len(checks), med(ks), ks[len(ks)-1], DistributionPoints)
}

func writeReport(path string, rows []Row, m *model.Model, plots, warnings []string, checks []SimCheckRow) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# ovsprobe lab report\n\n")
	fmt.Fprintf(&b, "Open vSwitch %s, %s datapath. Delays are per-packet, from kernel software timestamps at the switch's ingress and egress ports (microseconds); \"first pkt\" is the delay of a condition's very first packet (the upcall path on cold conditions). Confidence intervals of a condition's statistics come from a circular block bootstrap over the packet sequence (consecutive packets' delays are correlated; the block length, chosen per condition from the autocorrelation, is in conditions.csv as boot_block).\n\n", m.OVSVersion, m.Datapath)
	for _, r := range rows {
		if r.Path == "floor" {
			fmt.Fprintf(&b, "**Probe floor** (same capture points, no switch: veth pairs spliced by tc mirred), %s: min %.1f us, p50 %.1f us [%.1f, %.1f], p99 %.1f us, %d packets.\n\n",
				r.Condition.Describe(), r.Stats.Min, r.Stats.P50, r.Stats.P50CI.Lo, r.Stats.P50CI.Hi, r.Stats.P99, r.Stats.N)
		}
	}
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, r := range rows {
		lo, hi = math.Min(lo, r.HostLoad1), math.Max(hi, r.HostLoad1)
	}
	if len(rows) > 0 {
		fmt.Fprintf(&b, "Host load average (1 min) during the run: %.1f to %.1f. The userspace datapath's threads share the CPUs with the probe and anything else running: a busy host lengthens and widens the delays.\n", lo, hi)
	}
	writeEffects(&b, Representative(rows, m.Response))
	writeModel(&b, m)
	writeSimSection(&b, checks)
	if len(plots) > 0 {
		fmt.Fprintf(&b, "\n## Plots\n\n")
		for _, p := range plots {
			fmt.Fprintf(&b, "![%s](%s)\n\n", strings.TrimSuffix(p, ".png"), p)
		}
	}
	ksOf := map[string]SimCheckRow{}
	for _, c := range checks {
		ksOf[c.FileID] = c
	}
	fmt.Fprintf(&b, "\n## Conditions\n\n| id | condition | n | first pkt | min | p50 [95 %% CI] | p99 | p99.9 | PDV | lost | ring drops | dp hit/missed | vswitchd CPU %% | RSS MiB | load | KS interp/step |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		s := r.Stats
		ks := "n/a"
		if c, ok := ksOf[r.FileID()]; ok {
			ks = fmt.Sprintf("%.4f/%.4f", c.KSInterp, c.KSStep)
		}
		desc := r.Condition.Describe()
		if r.Error != "" {
			desc += " **failed: " + r.Error + "**"
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %s | %s | %s [%s, %s] | %s | %s | %s | %d | %d | %d/%d | %.0f | %d | %.1f | %s |\n",
			r.FileID(), desc, s.N, us(r.FirstDelayUS), us(s.Min), us(s.P50), us(s.P50CI.Lo), us(s.P50CI.Hi), us(s.P99), us(s.P999), us(s.PDV), r.Lost,
			r.IngressRingDrops+r.EgressRingDrops, r.DPHit, r.DPMissed, r.VswitchdCPUPct, r.VswitchdRSSBytes>>20, r.HostLoad1, ks)
	}
	if len(warnings) > 0 {
		fmt.Fprintf(&b, "\n## Warnings\n\n")
		for _, w := range warnings {
			fmt.Fprintf(&b, "- %s\n", w)
		}
	}
	fmt.Fprintf(&b, "\n## Files\n\n- `conditions.csv`: one row per condition (factors, statistics with 95 %% CIs, OVS counters, ovs-vswitchd CPU/RSS).\n- `samples/ID.csv`: per-packet delays (ns) in sequence order.\n- `distributions/ID.csv`: empirical CDF (delay_us, cdf) for simulators; `distributions/index.csv` maps IDs to conditions.\n- `simcheck.csv`: KS distance between draws from each table and the measured delays.\n- `model.json`: the fitted model (`ovsprobe predict --model model.json ...`), with its nested cross-validation (`cv`) and bootstrap (`bootstrap`) reports.\n")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	return nil
}
