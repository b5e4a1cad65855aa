//go:build linux

package ovs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// CgroupRoot is where cgroup file systems are mounted.
const CgroupRoot = "/sys/fs/cgroup"

// Cgroup is a cgroup (v1: one directory in the memory and one in the cpu
// hierarchy; v2: one directory) that holds ovs-vswitchd.
type Cgroup struct {
	// Name is the directory name, e.g. "ovsprobe-ovp1a2b3".
	Name string
	// V2 is true on the unified hierarchy.
	V2   bool
	root string
}

// CgroupV2 reports whether root (default CgroupRoot) is a cgroup v2 unified
// hierarchy.
func CgroupV2(root string) bool {
	if root == "" {
		root = CgroupRoot
	}
	_, err := os.Stat(filepath.Join(root, "cgroup.controllers"))
	return err == nil
}

// NewCgroup creates the cgroup name under root ("" = CgroupRoot).
func NewCgroup(root, name string) (*Cgroup, error) {
	if root == "" {
		root = CgroupRoot
	}
	c := &Cgroup{Name: name, V2: CgroupV2(root), root: root}
	if c.V2 {
		// Controllers must be enabled for children; harmless if already.
		_ = os.WriteFile(filepath.Join(root, "cgroup.subtree_control"), []byte("+memory +cpu"), 0)
	}
	for _, d := range c.dirs() {
		if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			_ = c.Remove()
			return nil, fmt.Errorf("create cgroup %s: %w", d, err)
		}
	}
	return c, nil
}

func (c *Cgroup) dirs() []string {
	if c.V2 {
		return []string{filepath.Join(c.root, c.Name)}
	}
	return []string{filepath.Join(c.root, "memory", c.Name), filepath.Join(c.root, "cpu", c.Name)}
}

// parents are the cgroup.procs files processes go back to on Remove.
func (c *Cgroup) parents() []string {
	if c.V2 {
		return []string{filepath.Join(c.root, "cgroup.procs")}
	}
	return []string{filepath.Join(c.root, "memory", "cgroup.procs"), filepath.Join(c.root, "cpu", "cgroup.procs")}
}

// ProcsFiles are the cgroup.procs files a process writes its pid to in
// order to join the cgroup (one per v1 hierarchy). Memory is charged to the
// cgroup a page was allocated in (charges do not move with a process on
// current kernels), so a process whose memory must count should join before
// it allocates: see Testbed, which starts ovs-vswitchd inside.
func (c *Cgroup) ProcsFiles() []string {
	var out []string
	for _, d := range c.dirs() {
		out = append(out, filepath.Join(d, "cgroup.procs"))
	}
	return out
}

// AddProcess moves every thread of pid into the cgroup.
func (c *Cgroup) AddProcess(pid int) error {
	for _, d := range c.dirs() {
		if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
			return fmt.Errorf("move pid %d into cgroup %s: %w", pid, d, err)
		}
	}
	return nil
}

// Set applies the limits. Lowering memory below what the process uses makes
// the kernel reclaim; it fails (EBUSY) when it cannot.
func (c *Cgroup) Set(l Limits) error {
	if err := l.Validate(); err != nil {
		return err
	}
	d := c.dirs()
	var writes [][2]string
	if c.V2 {
		writes = [][2]string{{filepath.Join(d[0], "memory.max"), v2MemoryValue(l.MemoryBytes)}, {filepath.Join(d[0], "cpu.max"), v2CPUMaxValue(l.CPUs)}}
	} else {
		writes = [][2]string{
			{filepath.Join(d[0], "memory.limit_in_bytes"), v1MemoryValue(l.MemoryBytes)},
			{filepath.Join(d[1], "cpu.cfs_period_us"), strconv.Itoa(cfsPeriodUS)},
			{filepath.Join(d[1], "cpu.cfs_quota_us"), v1QuotaValue(l.CPUs)},
		}
	}
	for _, w := range writes {
		if err := os.WriteFile(w[0], []byte(w[1]), 0); err != nil {
			if errors.Is(err, syscall.EBUSY) {
				return fmt.Errorf("set %s to %s: %w (the process uses more than that and the kernel could not reclaim it)", w[0], w[1], err)
			}
			return fmt.Errorf("set %s to %s: %w", w[0], w[1], err)
		}
	}
	return nil
}

// MemoryUsage returns the cgroup's current memory charge in bytes.
func (c *Cgroup) MemoryUsage() (int64, error) {
	var p string
	if c.V2 {
		p = filepath.Join(c.dirs()[0], "memory.current")
	} else {
		p = filepath.Join(c.dirs()[0], "memory.usage_in_bytes")
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, fmt.Errorf("read cgroup memory usage: %w", err)
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}

// Remove moves any remaining processes back to the root cgroup and deletes
// the cgroup's directories. Missing directories are not errors.
func (c *Cgroup) Remove() error {
	var errs []error
	for i, d := range c.dirs() {
		if b, err := os.ReadFile(filepath.Join(d, "cgroup.procs")); err == nil {
			for _, f := range strings.Fields(string(b)) {
				_ = os.WriteFile(c.parents()[i], []byte(f), 0)
			}
		}
		if err := removeCgroupDir(d); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("remove cgroup %s: %w", d, err))
		}
	}
	return errors.Join(errs...)
}

// cgroupBusyWait bounds how long removeCgroupDir retries a cgroup the
// kernel still holds.
const cgroupBusyWait = 5 * time.Second

// removeCgroupDir removes a cgroup directory, retrying while the kernel
// answers EBUSY: a process killed a moment ago (kill -9 of a testbed)
// stays in its cgroup until it has exited, which on a loaded host takes a
// while (seen as "device or resource busy" in a loaded make test). The
// kernel gives no event for it, so this polls, bounded by cgroupBusyWait.
func removeCgroupDir(d string) error {
	deadline := time.Now().Add(cgroupBusyWait)
	for {
		err := os.Remove(d)
		if !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// cgroupDirsWithPrefix lists cgroup directories under root whose names start
// with prefix, for leftover cleanup.
func cgroupDirsWithPrefix(root, prefix string) []*Cgroup {
	if root == "" {
		root = CgroupRoot
	}
	v2 := CgroupV2(root)
	var scan []string
	if v2 {
		scan = []string{root}
	} else {
		scan = []string{filepath.Join(root, "memory"), filepath.Join(root, "cpu")}
	}
	seen := map[string]bool{}
	var out []*Cgroup
	for _, s := range scan {
		ents, _ := os.ReadDir(s)
		for _, e := range ents {
			if e.IsDir() && strings.HasPrefix(e.Name(), prefix) && !seen[e.Name()] {
				seen[e.Name()] = true
				out = append(out, &Cgroup{Name: e.Name(), V2: v2, root: root})
			}
		}
	}
	return out
}
