package ovs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// ErrNotInstalled means an Open vSwitch tool is not in PATH.
var ErrNotInstalled = errors.New("open vswitch is not installed (install openvswitch-switch)")

// ErrNotRunning means ovs-vswitchd or ovsdb-server did not answer.
var ErrNotRunning = errors.New("open vswitch is not running")

// Client runs the OVS command-line tools against one OVS instance. The zero
// value talks to the system's OVS through the tools' defaults.
type Client struct {
	// DB is the OVSDB remote for ovs-vsctl, e.g. "unix:/tmp/x/db.sock";
	// "" uses ovs-vsctl's default.
	DB string
	// Target is ovs-appctl's -t argument for ovs-vswitchd: a unixctl socket
	// path; "" means "ovs-vswitchd" (the default run directory).
	Target string
	// RunDir, when set, is exported as OVS_RUNDIR so ovs-ofctl finds the
	// bridges' management sockets of a private OVS; "" keeps the default.
	RunDir string
	// PIDFile is ovs-vswitchd's pid file; "" means
	// /var/run/openvswitch/ovs-vswitchd.pid.
	PIDFile string
	// Timeout bounds each command; 0 means 20 s.
	Timeout time.Duration
}

func (c *Client) run(ctx context.Context, stdin []byte, tool string, args ...string) (string, error) {
	path, err := exec.LookPath(tool)
	if err != nil {
		return "", fmt.Errorf("%s: %w", tool, ErrNotInstalled)
	}
	timeout := c.Timeout
	if timeout == 0 {
		timeout = 20 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, args...)
	if c.RunDir != "" {
		cmd.Env = append(os.Environ(), "OVS_RUNDIR="+c.RunDir)
	}
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(errb.String())
		if ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return "", fmt.Errorf("%s %s: %w", tool, strings.Join(args, " "), ctx.Err())
		}
		if isNotRunning(msg) {
			return "", fmt.Errorf("%s %s: %w: %s", tool, strings.Join(args, " "), ErrNotRunning, msg)
		}
		return "", fmt.Errorf("%s %s: %w: %s", tool, strings.Join(args, " "), err, msg)
	}
	return out.String(), nil
}

func isNotRunning(msg string) bool {
	for _, s := range []string{"cannot connect", "Connection refused", "No such file or directory", "database connection failed", "is not a bridge or a socket"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

func (c *Client) vsctl(ctx context.Context, args ...string) (string, error) {
	if c.DB != "" {
		args = append([]string{"--db=" + c.DB}, args...)
	}
	return c.run(ctx, nil, "ovs-vsctl", append([]string{"--timeout=10"}, args...)...)
}

func (c *Client) appctl(ctx context.Context, args ...string) (string, error) {
	t := c.Target
	if t == "" {
		t = "ovs-vswitchd"
	}
	return c.run(ctx, nil, "ovs-appctl", append([]string{"-t", t}, args...)...)
}

// Vsctl runs ovs-vsctl with args against c's database.
func (c *Client) Vsctl(ctx context.Context, args ...string) (string, error) {
	return c.vsctl(ctx, args...)
}

// Appctl runs ovs-appctl with args against c's ovs-vswitchd.
func (c *Client) Appctl(ctx context.Context, args ...string) (string, error) {
	return c.appctl(ctx, args...)
}

// Ofctl runs ovs-ofctl with args (the first usually a command and bridge).
func (c *Client) Ofctl(ctx context.Context, args ...string) (string, error) {
	return c.run(ctx, nil, "ovs-ofctl", args...)
}

// Version returns the running ovs-vswitchd's version, e.g. "3.1.0". It
// fails with ErrNotRunning when ovs-vswitchd does not answer.
func (c *Client) Version(ctx context.Context) (string, error) {
	out, err := c.appctl(ctx, "version")
	if err != nil {
		return "", err
	}
	return ParseVersion(out)
}

// DatapathType returns the bridge's datapath type: "netdev" or "system".
func (c *Client) DatapathType(ctx context.Context, bridge string) (string, error) {
	out, err := c.vsctl(ctx, "get", "bridge", bridge, "datapath_type")
	if err != nil {
		return "", err
	}
	return ParseDatapathType(out), nil
}

// Datapaths returns the counters of every datapath (`dpctl/show`).
func (c *Client) Datapaths(ctx context.Context) ([]DatapathStats, error) {
	out, err := c.appctl(ctx, "dpctl/show")
	if err != nil {
		return nil, err
	}
	return ParseDpctlShow(out)
}

// PMDStats returns the userspace datapath's per-thread statistics; it fails
// on a kernel-datapath-only OVS.
func (c *Client) PMDStats(ctx context.Context) (PMDStats, error) {
	out, err := c.appctl(ctx, "dpif-netdev/pmd-stats-show")
	if err != nil {
		return nil, err
	}
	return ParsePMDStats(out)
}

// ClearPMDStats zeroes the userspace datapath's statistics.
func (c *Client) ClearPMDStats(ctx context.Context) error {
	_, err := c.appctl(ctx, "dpif-netdev/pmd-stats-clear")
	return err
}

// RuleCount returns the number of OpenFlow rules in the bridge's tables.
func (c *Client) RuleCount(ctx context.Context, bridge string) (uint64, error) {
	out, err := c.Ofctl(ctx, "dump-aggregate", bridge)
	if err != nil {
		return 0, err
	}
	return ParseAggregate(out)
}

// AddFlows installs OpenFlow rules in bulk with one `ovs-ofctl add-flows
// BRIDGE FILE` (one rule a line). Give each rule an explicit priority:
// add-flows defaults to 32768.
func (c *Client) AddFlows(ctx context.Context, bridge string, rules []string) error {
	if len(rules) == 0 {
		return nil
	}
	f, err := os.CreateTemp("", "ovsprobe-flows-*.txt")
	if err != nil {
		return fmt.Errorf("write flows file: %w", err)
	}
	defer os.Remove(f.Name())
	if _, err := f.WriteString(strings.Join(rules, "\n") + "\n"); err != nil {
		f.Close()
		return fmt.Errorf("write flows file: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write flows file: %w", err)
	}
	_, err = c.Ofctl(ctx, "add-flows", bridge, f.Name())
	return err
}

// DelFlows removes the bridge's OpenFlow rules that match match ("" = all).
func (c *Client) DelFlows(ctx context.Context, bridge, match string) error {
	args := []string{"del-flows", bridge}
	if match != "" {
		args = append(args, match)
	}
	_, err := c.Ofctl(ctx, args...)
	return err
}

// FlushDatapathFlows deletes all datapath (megaflow) flows, so the next
// packet of each flow takes the slow path: the "cold" condition.
func (c *Client) FlushDatapathFlows(ctx context.Context) error {
	_, err := c.appctl(ctx, "dpctl/del-flows")
	return err
}

// SetOtherConfig sets Open_vSwitch other_config keys (e.g. "max-idle",
// "flow-limit", "emc-insert-inv-prob"), in a stable order.
func (c *Client) SetOtherConfig(ctx context.Context, kv map[string]string) error {
	if len(kv) == 0 {
		return nil
	}
	keys := make([]string, 0, len(kv))
	for k := range kv {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	args := []string{"set", "Open_vSwitch", "."}
	for _, k := range keys {
		args = append(args, fmt.Sprintf("other_config:%s=%q", k, kv[k]))
	}
	_, err := c.vsctl(ctx, args...)
	return err
}

// VswitchdPID reads ovs-vswitchd's pid file.
func (c *Client) VswitchdPID() (int, error) {
	p := c.PIDFile
	if p == "" {
		p = filepath.Join("/var/run/openvswitch", "ovs-vswitchd.pid")
	}
	return readPIDFile(p)
}

func readPIDFile(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("read pid file: %w", err)
	}
	var pid int
	if _, err := fmt.Sscanf(strings.TrimSpace(string(b)), "%d", &pid); err != nil || pid <= 0 {
		return 0, fmt.Errorf("pid file %s: bad content %q", path, strings.TrimSpace(string(b)))
	}
	return pid, nil
}

// Counters is a snapshot of the OVS counters recorded with each condition.
type Counters struct {
	Hit, Missed, Lost, Flows uint64
	// PMD holds dpif-netdev/pmd-stats-show totals (nil on a kernel datapath).
	PMD map[string]float64
}

// Snapshot reads datapath and PMD counters, summed over datapaths and
// threads.
func (c *Client) Snapshot(ctx context.Context) (Counters, error) {
	dps, err := c.Datapaths(ctx)
	if err != nil {
		return Counters{}, err
	}
	var s Counters
	for _, d := range dps {
		s.Hit += d.Hit
		s.Missed += d.Missed
		s.Lost += d.Lost
		s.Flows += d.Flows
	}
	if pmd, err := c.PMDStats(ctx); err == nil {
		s.PMD = map[string]float64{}
		for _, t := range pmd {
			for k, v := range t {
				s.PMD[k] += v
			}
		}
	}
	return s, nil
}

// Sub returns the counter increase from before to s (Flows is s's value).
func (s Counters) Sub(before Counters) Counters {
	d := Counters{Hit: sub(s.Hit, before.Hit), Missed: sub(s.Missed, before.Missed), Lost: sub(s.Lost, before.Lost), Flows: s.Flows}
	if s.PMD != nil {
		d.PMD = map[string]float64{}
		for k, v := range s.PMD {
			d.PMD[k] = v - before.PMD[k]
		}
	}
	return d
}

// sub is a - b, or a when the counter was reset in between.
func sub(a, b uint64) uint64 {
	if a < b {
		return a
	}
	return a - b
}
