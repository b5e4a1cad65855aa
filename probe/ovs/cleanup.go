package ovs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// netnsDir is where `ip netns` binds named namespaces.
const netnsDir = "/run/netns"

// CleanupOptions configures Cleanup and Leftovers; the zero value uses the
// system defaults.
type CleanupOptions struct {
	// TempDir holds testbed directories and the lock; "" = os.TempDir().
	TempDir string
	// CgroupRoot is the cgroup mount; "" = CgroupRoot.
	CgroupRoot string
	// Logger receives what is removed; nil discards.
	Logger *slog.Logger
}

// Cleanup removes what earlier testbeds left behind (a run killed with
// SIGKILL cannot tear down): OVS daemons started from an ovsprobe-ovp*
// directory, namespaces and links named ovp*, cgroups and directories named
// ovsprobe-ovp*. It takes the host lock first, so it never touches a testbed
// that is running. It returns what it removed.
func Cleanup(ctx context.Context, o CleanupOptions) ([]string, error) {
	if o.TempDir == "" {
		o.TempDir = os.TempDir()
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	lock, err := acquireLock(ctx, filepath.Join(o.TempDir, "ovsprobe-testbed.lock"), o.Logger)
	if err != nil {
		return nil, err
	}
	defer lock.release()
	return cleanupLocked(ctx, o.TempDir, o.CgroupRoot, o.Logger)
}

func cleanupLocked(ctx context.Context, tempDir, cgroupRoot string, log *slog.Logger) ([]string, error) {
	var removed []string
	var errs []error
	// 1. Daemons: killing ovs-vswitchd also removes its tap devices.
	procs := strayDaemons("/proc")
	for _, pid := range procs {
		if err := syscall.Kill(pid, syscall.SIGKILL); err == nil {
			removed = append(removed, fmt.Sprintf("process:%d", pid))
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(strayDaemons("/proc")) > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	// 2. Namespaces (their veth ends go with them), then links.
	for _, ns := range testbedNamespaces() {
		if err := run(ctx, nil, "ip", "netns", "del", ns); err != nil && !gone(err) {
			errs = append(errs, err)
		} else {
			removed = append(removed, "netns:"+ns)
		}
	}
	links, err := testbedLinks(ctx)
	if err != nil {
		errs = append(errs, err)
	}
	for _, l := range links {
		if err := run(ctx, nil, "ip", "link", "del", l); err != nil && !gone(err) {
			errs = append(errs, err)
		} else {
			removed = append(removed, "link:"+l)
		}
	}
	// 3. Cgroups and directories.
	for _, cg := range cgroupDirsWithPrefix(cgroupRoot, "ovsprobe-"+IDPrefix) {
		if err := cg.Remove(); err != nil {
			errs = append(errs, err)
		} else {
			removed = append(removed, "cgroup:"+cg.Name)
		}
	}
	for _, d := range testbedDirs(tempDir) {
		if err := os.RemoveAll(d); err != nil {
			errs = append(errs, err)
		} else {
			removed = append(removed, "dir:"+d)
		}
	}
	for _, r := range removed {
		log.Debug("removed leftover", "item", r)
	}
	return removed, errors.Join(errs...)
}

// Leftovers lists what testbeds left behind without removing anything:
// live OVS daemons of a testbed, namespaces, links, cgroups and directories.
// It takes the host lock first, so a testbed running in another process is
// not counted (it holds the lock for its whole life). Tests use it to check
// that nothing is left.
func Leftovers(ctx context.Context, o CleanupOptions) ([]string, error) {
	if o.TempDir == "" {
		o.TempDir = os.TempDir()
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	lock, err := acquireLock(ctx, filepath.Join(o.TempDir, "ovsprobe-testbed.lock"), o.Logger)
	if err != nil {
		return nil, err
	}
	defer lock.release()
	return leftoversLocked(o), nil
}

func leftoversLocked(o CleanupOptions) []string {
	var out []string
	for _, pid := range strayDaemons("/proc") {
		out = append(out, fmt.Sprintf("process:%d", pid))
	}
	for _, ns := range testbedNamespaces() {
		out = append(out, "netns:"+ns)
	}
	links, _ := testbedLinks(context.Background())
	for _, l := range links {
		out = append(out, "link:"+l)
	}
	for _, cg := range cgroupDirsWithPrefix(o.CgroupRoot, "ovsprobe-"+IDPrefix) {
		out = append(out, "cgroup:"+cg.Name)
	}
	for _, d := range testbedDirs(o.TempDir) {
		out = append(out, "dir:"+d)
	}
	return out
}

// strayDaemons returns live (not zombie) ovsdb-server and ovs-vswitchd
// processes whose command line names a testbed directory.
func strayDaemons(procRoot string) []int {
	ents, _ := os.ReadDir(procRoot)
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join(procRoot, e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join(procRoot, e.Name(), "stat"))
		if err != nil {
			continue
		}
		if isTestbedDaemon(string(cmdline), string(stat)) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// isTestbedDaemon decides from /proc/PID/cmdline and /proc/PID/stat.
func isTestbedDaemon(cmdline, stat string) bool {
	args := strings.Split(strings.TrimRight(cmdline, "\x00"), "\x00")
	if len(args) == 0 {
		return false
	}
	base := filepath.Base(args[0])
	if base != "ovs-vswitchd" && base != "ovsdb-server" {
		return false
	}
	if !strings.Contains(cmdline, "/ovsprobe-"+IDPrefix) {
		return false
	}
	// State follows the last ')' of the comm field; zombies are gone already.
	if i := strings.LastIndexByte(stat, ')'); i >= 0 {
		if f := strings.Fields(stat[i+1:]); len(f) > 0 && (f[0] == "Z" || f[0] == "X") {
			return false
		}
	}
	return true
}

func testbedNamespaces() []string {
	ents, _ := os.ReadDir(netnsDir)
	var out []string
	for _, e := range ents {
		if nameRE.MatchString(e.Name()) {
			out = append(out, e.Name())
		}
	}
	return out
}

func testbedLinks(ctx context.Context) ([]string, error) {
	cmd := exec.CommandContext(ctx, "ip", "-o", "link", "show")
	var out bytes.Buffer
	cmd.Stdout = &out
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("ip link show: %w", err)
	}
	var links []string
	for _, n := range ParseLinkNames(out.String()) {
		if nameRE.MatchString(n) {
			links = append(links, n)
		}
	}
	return links, nil
}

// ParseLinkNames returns the interface names in `ip -o link show` output
// ("2: eth0@if5: <...>" -> "eth0").
func ParseLinkNames(out string) []string {
	var names []string
	for _, line := range strings.Split(out, "\n") {
		_, rest, ok := strings.Cut(line, ": ")
		if !ok {
			continue
		}
		name, _, ok := strings.Cut(rest, ":")
		if !ok {
			continue
		}
		name, _, _ = strings.Cut(name, "@")
		if name = strings.TrimSpace(name); name != "" {
			names = append(names, name)
		}
	}
	return names
}

func testbedDirs(tempDir string) []string {
	ents, _ := os.ReadDir(tempDir)
	var out []string
	for _, e := range ents {
		if e.IsDir() && strings.HasPrefix(e.Name(), "ovsprobe-") && idRE.MatchString(strings.TrimPrefix(e.Name(), "ovsprobe-")) {
			out = append(out, filepath.Join(tempDir, e.Name()))
		}
	}
	return out
}
