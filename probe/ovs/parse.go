package ovs

import (
	"bufio"
	"fmt"
	"strconv"
	"strings"
)

// DatapathStats are the counters `ovs-appctl dpctl/show` prints for one
// datapath.
type DatapathStats struct {
	// Name is the datapath, e.g. "netdev@ovs-netdev".
	Name string
	// Hit, Missed and Lost count packets that matched a datapath flow, went
	// up to ovs-vswitchd (upcall), and were dropped before reaching it.
	Hit, Missed, Lost uint64
	// Flows is the number of datapath flows now installed.
	Flows uint64
}

// ParseDpctlShow parses the output of `ovs-appctl dpctl/show`.
func ParseDpctlShow(out string) ([]DatapathStats, error) {
	var dps []DatapathStats
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		switch {
		case trimmed == "":
		case !strings.HasPrefix(line, " ") && strings.HasSuffix(trimmed, ":"):
			dps = append(dps, DatapathStats{Name: strings.TrimSuffix(trimmed, ":")})
		case len(dps) == 0:
			return nil, fmt.Errorf("dpctl/show: line before any datapath: %q", line)
		case strings.HasPrefix(trimmed, "lookups:"):
			dp := &dps[len(dps)-1]
			for _, f := range strings.Fields(strings.TrimPrefix(trimmed, "lookups:")) {
				k, v, ok := strings.Cut(f, ":")
				if !ok {
					return nil, fmt.Errorf("dpctl/show: bad lookups field %q", f)
				}
				n, err := strconv.ParseUint(v, 10, 64)
				if err != nil {
					return nil, fmt.Errorf("dpctl/show: bad %s count %q", k, v)
				}
				switch k {
				case "hit":
					dp.Hit = n
				case "missed":
					dp.Missed = n
				case "lost":
					dp.Lost = n
				}
			}
		case strings.HasPrefix(trimmed, "flows:"):
			n, err := strconv.ParseUint(strings.TrimSpace(strings.TrimPrefix(trimmed, "flows:")), 10, 64)
			if err != nil {
				return nil, fmt.Errorf("dpctl/show: bad flows line %q", line)
			}
			dps[len(dps)-1].Flows = n
		}
	}
	if len(dps) == 0 {
		return nil, fmt.Errorf("dpctl/show: no datapath in output %q", strings.TrimSpace(out))
	}
	return dps, nil
}

// PMDStats are the per-thread counters of `ovs-appctl
// dpif-netdev/pmd-stats-show`, keyed by thread ("main thread", "pmd thread
// numa_id 0 core_id 1") and then by the counter's label ("packets received",
// "emc hits", "megaflow hits", "miss with success upcall", ...).
type PMDStats map[string]map[string]float64

// Total sums one counter over all threads.
func (p PMDStats) Total(counter string) float64 {
	s := 0.0
	for _, t := range p {
		s += t[counter]
	}
	return s
}

// ParsePMDStats parses the output of `ovs-appctl dpif-netdev/pmd-stats-show`.
// Values may carry units or percentages ("123  (45.6 %)", "7.00"); the first
// number is kept.
func ParsePMDStats(out string) (PMDStats, error) {
	stats := PMDStats{}
	var cur map[string]float64
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		if trimmed == "" {
			continue
		}
		if !strings.HasPrefix(line, " ") && strings.HasSuffix(trimmed, ":") {
			cur = map[string]float64{}
			stats[strings.TrimSuffix(trimmed, ":")] = cur
			continue
		}
		if cur == nil {
			return nil, fmt.Errorf("pmd-stats-show: line before any thread: %q", line)
		}
		k, v, ok := strings.Cut(trimmed, ":")
		if !ok {
			continue
		}
		fields := strings.Fields(v)
		if len(fields) == 0 {
			continue
		}
		n, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			continue // a label without a number (e.g. a text value): skip
		}
		cur[strings.TrimSpace(k)] = n
	}
	if len(stats) == 0 {
		return nil, fmt.Errorf("pmd-stats-show: no thread in output %q", strings.TrimSpace(out))
	}
	return stats, nil
}

// ParseAggregate returns flow_count from `ovs-ofctl dump-aggregate BRIDGE`.
func ParseAggregate(out string) (uint64, error) {
	for _, f := range strings.Fields(out) {
		if v, ok := strings.CutPrefix(f, "flow_count="); ok {
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				return 0, fmt.Errorf("dump-aggregate: bad flow_count %q", v)
			}
			return n, nil
		}
	}
	return 0, fmt.Errorf("dump-aggregate: no flow_count in %q", strings.TrimSpace(out))
}

// ParseVersion returns the version number from the first line of an OVS
// tool's version output, e.g. "ovs-vswitchd (Open vSwitch) 3.1.0" -> "3.1.0".
func ParseVersion(out string) (string, error) {
	line, _, _ := strings.Cut(strings.TrimSpace(out), "\n")
	i := strings.Index(line, "(Open vSwitch)")
	if i < 0 {
		return "", fmt.Errorf("not an Open vSwitch version line: %q", line)
	}
	v := strings.TrimSpace(line[i+len("(Open vSwitch)"):])
	if v == "" {
		return "", fmt.Errorf("no version number in %q", line)
	}
	return strings.Fields(v)[0], nil
}

// ParseDatapathType normalises `ovs-vsctl get bridge BR datapath_type`:
// quotes are removed and the empty default is reported as "system".
func ParseDatapathType(out string) string {
	s := strings.Trim(strings.TrimSpace(out), `"`)
	if s == "" {
		return "system"
	}
	return s
}
