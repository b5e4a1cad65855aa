package ovs

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// IDPrefix starts the name of everything a Testbed creates: namespaces,
// links, the bridge, the temporary directory ("ovsprobe-" + ID) and the
// cgroup ("ovsprobe-" + ID). Cleanup removes leftovers by this prefix.
const IDPrefix = "ovp"

// idRE matches a testbed ID: IDPrefix and 5 hex digits.
var idRE = regexp.MustCompile(`^ovp[0-9a-f]{5}$`)

// nameRE matches the names of namespaces and links a testbed creates.
var nameRE = regexp.MustCompile(`^ovp[0-9a-f]{5}[a-z0-9]*$`)

// ErrNotRoot means the testbed needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN).
var ErrNotRoot = errors.New("must run as root (needs CAP_NET_ADMIN and CAP_SYS_ADMIN for namespaces, veths and cgroups)")

// DefaultSchema is the OVSDB schema Debian's openvswitch-common installs.
const DefaultSchema = "/usr/share/openvswitch/vswitch.ovsschema"

// TestbedOptions configures StartTestbed. The zero value is usable.
type TestbedOptions struct {
	// ID names everything; "" means IDPrefix + 5 random hex digits. It must
	// match that shape so Cleanup recognises leftovers.
	ID string
	// Logger receives progress; nil discards.
	Logger *slog.Logger
	// TempDir is where the OVS state directory and the host lock live; ""
	// means os.TempDir().
	TempDir string
	// CgroupRoot is the cgroup mount; "" means CgroupRoot.
	CgroupRoot string
	// Schema is the vswitch OVSDB schema; "" means DefaultSchema.
	Schema string
	// Floor also builds the floor path: a generator and a sink namespace
	// joined by veth pairs whose host ends are spliced by a tc mirred
	// redirect, with no switch in between.
	Floor bool
	// OtherConfig is applied to Open_vSwitch other_config; nil means
	// {"max-idle": "60000"} so datapath flows stay warm through a sweep
	// (the OVS default expires them after 10 s idle).
	OtherConfig map[string]string
	// StartTimeout bounds the wait for the daemons; 0 means 20 s.
	StartTimeout time.Duration
	// Nice is ovs-vswitchd's scheduling priority; 0 means -10, what
	// Debian's ovs-ctl gives it (--ovs-vswitchd-priority), so the switch's
	// threads are not starved by the probe or other work on the host.
	Nice int
}

// DefaultNice is ovs-ctl's default priority for ovs-vswitchd.
const DefaultNice = -10

func (o TestbedOptions) withDefaults() (TestbedOptions, error) {
	if o.ID == "" {
		var b [3]byte
		_, _ = rand.Read(b[:])
		o.ID = IDPrefix + hex.EncodeToString(b[:])[:5]
	}
	if !idRE.MatchString(o.ID) {
		return o, fmt.Errorf("testbed id %q must be %q and 5 hex digits", o.ID, IDPrefix)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.TempDir == "" {
		o.TempDir = os.TempDir()
	}
	if o.CgroupRoot == "" {
		o.CgroupRoot = CgroupRoot
	}
	if o.Schema == "" {
		o.Schema = DefaultSchema
	}
	if o.OtherConfig == nil {
		o.OtherConfig = map[string]string{"max-idle": "60000"}
	}
	if o.StartTimeout == 0 {
		o.StartTimeout = 20 * time.Second
	}
	if o.Nice == 0 {
		o.Nice = DefaultNice
	}
	if o.Nice < -20 || o.Nice > 19 {
		return o, fmt.Errorf("nice %d out of range -20..19", o.Nice)
	}
	return o, nil
}

// Path is a generator namespace and a sink namespace, each joined by a veth
// pair to the current namespace, whose current-namespace ends (Ingress,
// Egress) are where packets are timed:
//
//	[GenNS: GenDev Src] <-veth-> Ingress --(OVS | tc mirred)--> Egress <-veth-> [SinkNS: SinkDev Dst]
type Path struct {
	GenNS, SinkNS   string
	GenDev, SinkDev string
	Ingress, Egress string
	Src, Dst        netip.Addr
	GenMAC, SinkMAC string
}

// Testbed is a private OVS (ovsdb-server and ovs-vswitchd with the userspace
// datapath, state in Dir) with a bridge whose OpenFlow ports 1 and 2 are the
// Switch path's Ingress and Egress.
type Testbed struct {
	// ID is the name prefix of everything created.
	ID string
	// Dir holds the database, sockets, pid files and logs.
	Dir string
	// Bridge is the OVS bridge; ports InPort and OutPort carry the traffic.
	Bridge          string
	InPort, OutPort int
	// OVS drives this testbed's daemons.
	OVS *Client
	// Switch is the path through OVS; Floor the switchless one (nil unless
	// TestbedOptions.Floor).
	Switch Path
	Floor  *Path
	// Version and Datapath describe the running OVS ("3.1.0", "netdev").
	Version, Datapath string
	// VswitchdPID is ovs-vswitchd's process id.
	VswitchdPID int

	opts       TestbedOptions
	log        *slog.Logger
	lock       *hostLock
	ovsdb      *daemon
	vswitchd   *daemon
	cg         *Cgroup
	namespaces []string
	links      []string
	closeOnce  sync.Once
	closeErr   error
}

// requiredTools are the programs a testbed runs.
var requiredTools = []string{"ovsdb-tool", "ovsdb-server", "ovs-vswitchd", "ovs-vsctl", "ovs-ofctl", "ovs-appctl", "ip", "ethtool", "tc", "sysctl", "nice"}

// CheckPrerequisites reports why a testbed cannot start here: not root, a
// missing tool or schema.
func CheckPrerequisites(schema string) error {
	if os.Geteuid() != 0 {
		return ErrNotRoot
	}
	for _, t := range requiredTools {
		if _, err := exec.LookPath(t); err != nil {
			if strings.HasPrefix(t, "ovs") {
				return fmt.Errorf("%s not found in PATH: %w", t, ErrNotInstalled)
			}
			return fmt.Errorf("%s not found in PATH (install iproute2, ethtool, procps, coreutils)", t)
		}
	}
	if schema == "" {
		schema = DefaultSchema
	}
	if _, err := os.Stat(schema); err != nil {
		return fmt.Errorf("ovsdb schema: %w: %w", err, ErrNotInstalled)
	}
	return nil
}

// StartTestbed builds the testbed. It takes a host-wide lock (one testbed at
// a time: the userspace datapath's "ovs-netdev" device is host-global),
// removes the leftovers of earlier killed runs, and on any error tears down
// everything it built before returning. Close it when done.
func StartTestbed(ctx context.Context, opts TestbedOptions) (*Testbed, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := CheckPrerequisites(opts.Schema); err != nil {
		return nil, err
	}
	lock, err := acquireLock(ctx, filepath.Join(opts.TempDir, "ovsprobe-testbed.lock"), opts.Logger)
	if err != nil {
		return nil, err
	}
	tb := &Testbed{
		ID: opts.ID, Dir: filepath.Join(opts.TempDir, "ovsprobe-"+opts.ID),
		Bridge: opts.ID + "br", InPort: 1, OutPort: 2,
		opts: opts, log: opts.Logger, lock: lock,
	}
	if removed, err := cleanupLocked(ctx, opts.TempDir, opts.CgroupRoot, opts.Logger); err != nil {
		tb.log.Warn("cleanup of earlier runs incomplete", "err", err)
	} else if len(removed) > 0 {
		tb.log.Info("removed leftovers of an earlier run", "items", strings.Join(removed, " "))
	}
	if err := tb.start(ctx); err != nil {
		return nil, errors.Join(err, tb.Close())
	}
	return tb, nil
}

func (tb *Testbed) start(ctx context.Context) error {
	t0 := time.Now()
	if err := os.Mkdir(tb.Dir, 0o700); err != nil {
		return fmt.Errorf("create testbed dir: %w", err)
	}
	if err := os.WriteFile(filepath.Join(tb.Dir, "owner.pid"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return fmt.Errorf("write owner pid: %w", err)
	}
	d := tb.Dir
	env := []string{"OVS_RUNDIR=" + d, "OVS_LOGDIR=" + d, "OVS_DBDIR=" + d, "OVS_SYSCONFDIR=" + d}
	db := filepath.Join(d, "conf.db")
	if err := run(ctx, env, "ovsdb-tool", "create", db, tb.opts.Schema); err != nil {
		return err
	}
	sock := filepath.Join(d, "db.sock")
	var err error
	tb.ovsdb, err = startDaemon("ovsdb-server", env, filepath.Join(d, "ovsdb-server.out"), nil, 0,
		db, "--remote=punix:"+sock, "--pidfile="+filepath.Join(d, "ovsdb-server.pid"),
		"--unixctl="+filepath.Join(d, "ovsdb-server.ctl"), "--log-file="+filepath.Join(d, "ovsdb-server.log"))
	if err != nil {
		return err
	}
	tb.OVS = &Client{DB: "unix:" + sock, Target: filepath.Join(d, "ovs-vswitchd.ctl"), RunDir: d, PIDFile: filepath.Join(d, "ovs-vswitchd.pid")}
	sctx, cancel := context.WithTimeout(ctx, tb.opts.StartTimeout)
	defer cancel()
	if err := waitReady(sctx, tb.ovsdb, func() error {
		_, err := tb.OVS.vsctl(sctx, "--no-wait", "init")
		return err
	}); err != nil {
		return fmt.Errorf("ovsdb-server did not start: %w", err)
	}
	// ovs-vswitchd starts inside its cgroup so all its memory is charged
	// there and the memory factor bites from the first page.
	var join []string
	if cg, err := NewCgroup(tb.opts.CgroupRoot, "ovsprobe-"+tb.ID); err != nil {
		tb.log.Warn("no cgroup for ovs-vswitchd: memory and CPU limits unavailable", "err", err)
	} else {
		tb.cg = cg
		join = cg.ProcsFiles()
	}
	tb.vswitchd, err = startDaemon("ovs-vswitchd", env, filepath.Join(d, "ovs-vswitchd.out"), join, tb.opts.Nice,
		"unix:"+sock, "--disable-system", "--pidfile="+tb.OVS.PIDFile, "--unixctl="+tb.OVS.Target,
		"--log-file="+filepath.Join(d, "ovs-vswitchd.log"))
	if err != nil {
		return err
	}
	if err := waitReady(sctx, tb.vswitchd, func() error {
		v, err := tb.OVS.Version(sctx)
		tb.Version = v
		return err
	}); err != nil {
		return fmt.Errorf("ovs-vswitchd did not start: %w", err)
	}
	tb.VswitchdPID = tb.vswitchd.cmd.Process.Pid
	if err := tb.OVS.SetOtherConfig(ctx, tb.opts.OtherConfig); err != nil {
		return err
	}
	if _, err := tb.OVS.vsctl(ctx, "add-br", tb.Bridge, "--", "set", "bridge", tb.Bridge, "datapath_type=netdev"); err != nil {
		return err
	}
	tb.Switch, err = tb.buildPath(ctx, tb.ID+"o", "10.203.0")
	if err != nil {
		return err
	}
	if _, err := tb.OVS.vsctl(ctx,
		"add-port", tb.Bridge, tb.Switch.Ingress, "--", "set", "Interface", tb.Switch.Ingress, fmt.Sprintf("ofport_request=%d", tb.InPort), "--",
		"add-port", tb.Bridge, tb.Switch.Egress, "--", "set", "Interface", tb.Switch.Egress, fmt.Sprintf("ofport_request=%d", tb.OutPort)); err != nil {
		return err
	}
	if err := tb.ResetRules(ctx); err != nil {
		return err
	}
	if tb.Datapath, err = tb.OVS.DatapathType(ctx, tb.Bridge); err != nil {
		return err
	}
	if tb.opts.Floor {
		p, err := tb.buildPath(ctx, tb.ID+"f", "10.204.0")
		if err != nil {
			return err
		}
		tb.Floor = &p
		for _, pair := range [][2]string{{p.Ingress, p.Egress}, {p.Egress, p.Ingress}} {
			if err := run(ctx, nil, "tc", "qdisc", "add", "dev", pair[0], "ingress"); err != nil {
				return err
			}
			if err := run(ctx, nil, "tc", "filter", "add", "dev", pair[0], "parent", "ffff:", "protocol", "all",
				"u32", "match", "u32", "0", "0", "action", "mirred", "egress", "redirect", "dev", pair[1]); err != nil {
				return fmt.Errorf("floor path needs tc u32 and mirred: %w", err)
			}
		}
	}
	tb.log.Info("testbed up", "id", tb.ID, "ovs", tb.Version, "datapath", tb.Datapath, "dir", tb.Dir, "took", time.Since(t0).Round(time.Millisecond))
	return nil
}

// ResetRules replaces the bridge's OpenFlow rules by the two forwarding
// rules between InPort and OutPort.
func (tb *Testbed) ResetRules(ctx context.Context) error {
	if err := tb.OVS.DelFlows(ctx, tb.Bridge, ""); err != nil {
		return err
	}
	return tb.OVS.AddFlows(ctx, tb.Bridge, ForwardRules(tb.InPort, tb.OutPort))
}

// buildPath makes a generator and a sink namespace and their veth pairs.
func (tb *Testbed) buildPath(ctx context.Context, prefix, net24 string) (Path, error) {
	p := Path{
		GenNS: prefix + "g", SinkNS: prefix + "s",
		GenDev: prefix + "g0", Ingress: prefix + "g1",
		SinkDev: prefix + "s0", Egress: prefix + "s1",
		Src: netip.MustParseAddr(net24 + ".1"), Dst: netip.MustParseAddr(net24 + ".2"),
		GenMAC: "02:00:0a:00:00:01", SinkMAC: "02:00:0a:00:00:02",
	}
	for _, ns := range []string{p.GenNS, p.SinkNS} {
		if err := run(ctx, nil, "ip", "netns", "add", ns); err != nil {
			return p, err
		}
		tb.namespaces = append(tb.namespaces, ns)
		if err := run(ctx, nil, "ip", "-n", ns, "link", "set", "lo", "up"); err != nil {
			return p, err
		}
	}
	ends := []struct{ host, dev, ns, mac, addr string }{
		{p.Ingress, p.GenDev, p.GenNS, p.GenMAC, p.Src.String()},
		{p.Egress, p.SinkDev, p.SinkNS, p.SinkMAC, p.Dst.String()},
	}
	for _, e := range ends {
		if err := run(ctx, nil, "ip", "link", "add", e.host, "type", "veth", "peer", "name", e.dev, "netns", e.ns); err != nil {
			return p, err
		}
		tb.links = append(tb.links, e.host)
		// No IPv6 on the path: router solicitations and neighbour discovery
		// would be background traffic through the switch.
		steps := [][]string{
			{"sysctl", "-q", "-w", "net.ipv6.conf." + e.host + ".disable_ipv6=1"},
			{"ip", "netns", "exec", e.ns, "sysctl", "-q", "-w", "net.ipv6.conf." + e.dev + ".disable_ipv6=1"},
			{"ip", "link", "set", e.host, "up"},
			{"ethtool", "-K", e.host, "tx", "off"},
			{"ip", "-n", e.ns, "link", "set", e.dev, "address", e.mac},
			{"ip", "-n", e.ns, "link", "set", e.dev, "up"},
			{"ip", "-n", e.ns, "addr", "add", e.addr + "/24", "dev", e.dev},
			{"ip", "netns", "exec", e.ns, "ethtool", "-K", e.dev, "tx", "off"},
		}
		for _, s := range steps {
			if err := run(ctx, nil, s[0], s[1:]...); err != nil {
				return p, err
			}
		}
	}
	// Static neighbours: no ARP in the timed traffic.
	if err := run(ctx, nil, "ip", "-n", p.GenNS, "neigh", "replace", p.Dst.String(), "lladdr", p.SinkMAC, "dev", p.GenDev, "nud", "permanent"); err != nil {
		return p, err
	}
	if err := run(ctx, nil, "ip", "-n", p.SinkNS, "neigh", "replace", p.Src.String(), "lladdr", p.GenMAC, "dev", p.SinkDev, "nud", "permanent"); err != nil {
		return p, err
	}
	return p, nil
}

// SetLimits applies limits to ovs-vswitchd's cgroup; zero Limits lift them.
func (tb *Testbed) SetLimits(l Limits) error {
	if err := l.Validate(); err != nil {
		return err
	}
	if tb.cg == nil {
		return fmt.Errorf("ovs-vswitchd has no cgroup: %w", ErrCgroupUnsupported)
	}
	return tb.cg.Set(l)
}

// Cgroup returns ovs-vswitchd's cgroup, nil when none could be made.
func (tb *Testbed) Cgroup() *Cgroup { return tb.cg }

// Alive reports whether ovs-vswitchd is still running (a memory limit can
// get it killed).
func (tb *Testbed) Alive() bool {
	if tb.vswitchd == nil {
		return false
	}
	select {
	case <-tb.vswitchd.done:
		return false
	default:
		return true
	}
}

// Close stops the daemons and removes the namespaces, links, cgroup and
// directory, then releases the host lock. It is safe to call more than once
// and from a signal path; it does not depend on a live context.
func (tb *Testbed) Close() error {
	tb.closeOnce.Do(func() {
		var errs []error
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if tb.vswitchd != nil {
			errs = append(errs, tb.vswitchd.stop(func() error {
				_, err := tb.OVS.appctl(ctx, "exit", "--cleanup")
				return err
			}))
		}
		if tb.ovsdb != nil {
			errs = append(errs, tb.ovsdb.stop(func() error {
				_, err := (&Client{Target: filepath.Join(tb.Dir, "ovsdb-server.ctl"), Timeout: 5 * time.Second}).appctl(ctx, "exit")
				return err
			}))
		}
		if tb.cg != nil {
			errs = append(errs, tb.cg.Remove())
		}
		for i := len(tb.namespaces) - 1; i >= 0; i-- {
			if err := run(ctx, nil, "ip", "netns", "del", tb.namespaces[i]); err != nil && !gone(err) {
				errs = append(errs, err)
			}
		}
		for _, l := range tb.links {
			if err := run(ctx, nil, "ip", "link", "del", l); err != nil && !gone(err) {
				errs = append(errs, err)
			}
		}
		if tb.Dir != "" {
			if err := os.RemoveAll(tb.Dir); err != nil {
				errs = append(errs, fmt.Errorf("remove testbed dir: %w", err))
			}
		}
		tb.lock.release()
		tb.closeErr = errors.Join(errs...)
		if tb.closeErr == nil {
			tb.log.Info("testbed down", "id", tb.ID)
		}
	})
	return tb.closeErr
}

func gone(err error) bool {
	s := err.Error()
	for _, m := range []string{"Cannot find device", "No such file", "does not exist", "No such device", "Invalid argument"} {
		if strings.Contains(s, m) {
			return true
		}
	}
	return false
}

// run runs a command and returns an error carrying its output.
func run(ctx context.Context, env []string, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return nil
}

// daemon is an OVS daemon run in the foreground as our child, so we reap it;
// it gets SIGTERM if we die (Pdeathsig) and its own process group, so a
// terminal's Ctrl-C reaches only us and we tear down in order.
type daemon struct {
	name string
	cmd  *exec.Cmd
	out  string
	done chan struct{}
	err  error
}

// startDaemon starts name with args; when join lists cgroup.procs files the
// daemon writes its pid there first (through sh, before exec), so it runs
// inside the cgroup from its first allocation; a non-zero nice runs it
// through nice(1) so every thread it starts inherits the priority.
func startDaemon(name string, env []string, outPath string, join []string, nice int, args ...string) (*daemon, error) {
	f, err := os.Create(outPath)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	defer f.Close()
	path, err := exec.LookPath(name)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	cmd := exec.Command(path, args...)
	if len(join) > 0 || nice != 0 {
		script := ""
		for _, j := range join {
			script += "echo $$ > '" + j + "' && "
		}
		if nice != 0 {
			script += fmt.Sprintf("exec nice -n %d ", nice) + `"$0" "$@"`
		} else {
			script += `exec "$0" "$@"`
		}
		cmd = exec.Command("/bin/sh", append([]string{"-c", script, path}, args...)...)
	}
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = daemonAttr()
	d := &daemon{name: name, cmd: cmd, out: outPath, done: make(chan struct{})}
	// The parent-death signal fires when the forking OS thread exits, not
	// the process (golang/go#27505): fork from a goroutine locked to its
	// thread and keep it there, reaping the daemon, until the daemon exits.
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		d.err = cmd.Wait()
		close(d.done)
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	return d, nil
}

// waitReady polls ready until it succeeds, the daemon exits or ctx ends.
func waitReady(ctx context.Context, d *daemon, ready func() error) error {
	delay := 5 * time.Millisecond
	for {
		err := ready()
		if err == nil {
			return nil
		}
		select {
		case <-d.done:
			b, _ := os.ReadFile(d.out)
			return fmt.Errorf("%s exited (%v): %s", d.name, d.err, lastLines(string(b), 5))
		case <-ctx.Done():
			return fmt.Errorf("%w: last error: %v", ctx.Err(), err)
		case <-time.After(delay):
		}
		delay = min(2*delay, 200*time.Millisecond)
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// stop asks the daemon to exit with graceful, then SIGTERM, then SIGKILL.
func (d *daemon) stop(graceful func() error) error {
	select {
	case <-d.done:
		return nil
	default:
	}
	_ = graceful()
	for _, sig := range []syscall.Signal{0, syscall.SIGTERM, syscall.SIGKILL} {
		if sig != 0 {
			_ = d.cmd.Process.Signal(sig)
		}
		select {
		case <-d.done:
			return nil
		case <-time.After(3 * time.Second):
		}
	}
	return fmt.Errorf("%s (pid %d) did not exit", d.name, d.cmd.Process.Pid)
}
